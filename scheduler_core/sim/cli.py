"""Command line for the simulator.

``python -m scheduler_core.sim fgd --traces DIR --workload NAME --policy NAME --seeds 42,43 [--json]``
runs the FGD experiment; ``python -m scheduler_core.sim replay ...`` replays a job-level trace
through the engine. Bad arguments exit with status 2 and a message naming the flag and the rule.
YAML is read here only (the simulator itself takes plain objects).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from scheduler_core.sim.traces import TraceFormatError


def _int_list(flag: str) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: expected comma-separated integers, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{flag}: give at least one integer")
        return values

    return parse


def _parser() -> argparse.ArgumentParser:
    from scheduler_core.sim.fgd import DEFAULT_PERCENTS, POLICIES

    parser = argparse.ArgumentParser(prog="python -m scheduler_core.sim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    f = sub.add_parser("fgd", help="the FGD fragmentation experiment on the openb trace")
    f.add_argument("--traces", required=True, help="the openb trace folder or the traces root that holds it")
    f.add_argument("--workload", default="default", help="pod list name, e.g. default, gpushare40, multigpu50")
    f.add_argument("--policy", default="fgd", choices=POLICIES)
    f.add_argument("--seeds", type=_int_list("--seeds"), default=[42])
    f.add_argument(
        "--percents",
        type=_int_list("--percents"),
        default=list(DEFAULT_PERCENTS),
        help="arrived %% of GPU capacity at which to report (default 90,100,110,130)",
    )
    f.add_argument("--json", action="store_true", help="print one JSON object")

    r = sub.add_parser("replay", help="replay a job-level trace through the engine")
    r.add_argument("--trace", required=True, help="a trace name (see --list) or a CSV path")
    r.add_argument("--traces", default=None, help="traces root for named traces (default: the bundled sample)")
    r.add_argument("--jobs", type=int, default=200, help="replay the first N jobs")
    r.add_argument("--queues", required=True, help="queue tree YAML (Queue CRDs)")
    r.add_argument("--compare", default=None, help="a second queue tree YAML for a what-if comparison")
    r.add_argument("--nodes", type=int, default=None, help="cluster size in 8-GPU nodes (default: sized to the load)")
    r.add_argument("--period", type=float, default=60.0, help="seconds between scheduling cycles")
    r.add_argument("--time-scale", type=float, default=1.0, help="divide arrival times and durations by this")
    r.add_argument("--seed", type=int, default=0, help="salt of the job-to-queue hash")
    r.add_argument("--timeline", action="store_true", help="include the per-cycle series (single run only)")
    r.add_argument("--json", action="store_true")
    return parser


def _cmd_fgd(args: argparse.Namespace) -> int:
    from scheduler_core.sim.fgd import load_experiment_inputs, run_seeds

    cluster, workload = load_experiment_inputs(args.traces, args.workload)
    out = run_seeds(cluster, workload, args.policy, args.seeds, args.percents)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"workload {out['workload']}  policy {out['policy']}  (unallocated GPU % at arrived %)")
    header = "seed  " + "  ".join(f"{k:>7}" for k in args.percents) + "   seconds"
    print(header)
    for row in out["per_seed"]:
        vals = "  ".join(f"{row['unallocated_gpu_pct'][str(k)]:7.2f}" for k in args.percents)
        print(f"{row['seed']:<4}  {vals}   {row['seconds']:7.2f}")
    overall = out["unallocated_gpu_pct"]
    vals = "  ".join(f"{overall[str(k)]['mean']:.2f}±{overall[str(k)]['sd']:.2f}" for k in args.percents)
    print(f"all   {vals}   {out['seconds_per_experiment']:7.2f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "fgd":
            return _cmd_fgd(args)
        from scheduler_core.sim.replay_cli import run_replay_command

        return run_replay_command(args)
    except (TraceFormatError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["main"]
