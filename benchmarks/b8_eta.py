"""B8: start-time estimates against what happened, on the Alibaba trace replayed through ``run_cycle``.

The GPU pods of an openb pod list arrive at their creation time (gaps divided by
``--arrival-speedup``, as in B4's replay) and run for their recorded time on a cluster of 8-GPU
nodes sized for ``--load``; a cycle runs every ``--period`` seconds. Each pending job is
estimated (``scheduler_core.eta.estimate_starts``) at the first cycle that sees it (at submission)
and at the first cycle 10 simulated minutes later, and the estimates are compared with the cycle
that really starts it. The estimator is given what a control plane has at that moment: the
snapshot (running jobs with their start times, not their run times), the run times of the jobs
that finished before that moment, and no job that has not arrived yet.

The naive baseline at the same moments: the GPUs asked for by the pending jobs submitted before
the job (and by itself) × the mean run time of the jobs finished so far ÷ the cluster's GPUs (the
capacity that frees as runs end; the free capacity is nil whenever a job waits).

Printed per job class (its GPUs, ``eta.size_class``: ``shared-1/4``, ``shared-1/2``, ``shared-1``, ``1``, ``2``,
``4``, ``8``) and overall, for each moment
(``at_submission``, ``after_10_min``): how many, the p80 coverage (share of starts no later than
the p80 estimate), the median absolute error of the p50 in minutes and as a share of the real wait,
and the baseline's median absolute error; first for every estimate, then for waits over 10 minutes.
``--json`` prints the overall figures for waits over 10 minutes at submission
(``p80_coverage``, ``median_abs_error_ratio``, ``baseline_median_abs_error_ratio``) and the rest.

    .venv/bin/python benchmarks/b8_eta.py --jobs 150 --samples 8 --max-cycles 20 --json
    .venv/bin/python benchmarks/b8_eta.py --budget-only --json   # the estimator's cost at 2,000 nodes / 16,000 pending

Needs ``../shared/traces`` (or ``--traces``) for the replay; exits with a message when it is absent.

The documented run (150 jobs, 8 samples, 20 simulated cycles), waits over 10 minutes: at submission
p80 coverage 77.5 %, median absolute error 0.365 of the wait against the baseline's 0.764; 10 minutes
later 84.6 %, 0.121 against 0.55 (goal: coverage 75–90 %, error at most half the baseline's). With
``--seed 1`` (other draws) 71.3 % and 0.350 against 0.764, then 96.2 % and 0.157 against 0.55: with 8
samples, and one line of jobs whose starts hang together, the coverage moves by ten points with the
seed, the error hardly. The same run from ``--since 11500000`` (another window of the trace, not used to calibrate) misses the
coverage goal, with estimates too early rather than too late: 58.7 % and 0.405 against 0.769 at
submission, 73.0 % and 0.289 against 0.672 ten minutes later.
``--budget-only``: 2,000 of the 16,000 pending jobs run forward in 4 samples, about 1.2 s of process
CPU besides the first cycle's 0.5 s (1.6 s for the refresh, on the reference machine, alone).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from b4_replay import NODE_CPU_MILLIS, NODE_MEMORY_GIB, QUEUES, size_cluster  # noqa: E402

from scheduler_core import model as m  # noqa: E402
from scheduler_core import run_cycle  # noqa: E402
from scheduler_core.eta import (  # noqa: E402
    Budget,
    Run,
    RuntimeHistory,
    estimate_starts,
    job_class,
    running_runs,
    size_class,
)
from scheduler_core.sim.replay import ReplayCluster  # noqa: E402
from scheduler_core.sim.traces import Job, openb_jobs, read_openb_pods  # noqa: E402
from scheduler_core.units import mib_to_bytes  # noqa: E402

DEFAULT_TRACES = ROOT.parent / "shared" / "traces"
LATER_S = 600.0  # the second estimate: 10 simulated minutes after submission
LONG_WAIT_S = 600.0  # the headline figures are for waits over 10 minutes
MOMENTS = ("at_submission", "after_10_min")


@dataclass
class _State:
    job: Job
    uid: str
    order: int
    tasks: list[m.TaskSpec]
    submitted: bool = False
    start: float | None = None
    end: float | None = None
    done: bool = False
    estimates: dict[str, tuple[float, float | None, float | None, float]] = field(default_factory=dict)


def _request(job: Job) -> m.TaskRequest:
    cpu = float(job.cpu_millis_per_pod or 4000 * max(1, math.ceil(job.gpu_per_pod)))
    mem = float(job.memory_bytes_per_pod or mib_to_bytes(16 * 1024 * max(1, math.ceil(job.gpu_per_pod))))
    g = job.gpu_per_pod
    if g < 1:
        return m.TaskRequest(cpu_millis=cpu, memory_bytes=mem, gpu_kind=m.GPU_FRACTION, gpu_fraction=g)
    return m.TaskRequest(cpu_millis=cpu, memory_bytes=mem, gpu_kind=m.GPU_WHOLE, gpus=float(math.ceil(g)))


def _spec(s: _State) -> m.JobSpec:
    return m.JobSpec(name=s.uid, queue="trace", tasks=tuple(s.tasks), creation=s.job.submit_time, build_order=s.order,
                     min_available=len(s.tasks), last_start=s.start if s.end is not None else None)


def _gpus(job: Job) -> float:
    return job.gpu_per_pod * max(1, job.num_pods)


def replay_with_estimates(jobs: list[Job], cluster: ReplayCluster, period: float, budget: Budget,
                          seed: int = 0, config: m.CycleConfig | None = None) -> tuple[list[_State], dict[str, Any]]:
    """Replay ``jobs`` cycle by cycle (B4's rules: a gang starts whole, an evicted job restarts from
    nothing) and estimate each pending job at submission and 10 minutes later; the job states with
    their estimates and real starts, and the run's figures."""
    config = config or m.CycleConfig()
    states = []
    for i, job in enumerate(sorted(jobs, key=lambda j: (j.submit_time, j.job_id))):
        uid = f"job-{i:06d}"
        req = _request(job)
        states.append(_State(job, uid, i, [m.TaskSpec(f"{uid}-{k}", req) for k in range(max(1, job.num_pods))]))
    by_uid = {s.uid: s for s in states}
    nodes = cluster.node_specs()
    finished: list[Run] = []
    arrivals = 0
    now = states[0].job.submit_time
    cycles = estimates = 0
    est_seconds = 0.0
    est_runs = 0
    while True:
        for s in states:
            if s.end is not None and not s.done and s.end <= now:
                s.done = True
                cls = job_class(_spec(s))
                finished.append(Run(cls[0], cls[1], cls[2], cls[3], s.job.duration))
                s.tasks = [replace(t, state=m.PENDING, node=None, gpu_groups=()) for t in s.tasks]
        while arrivals < len(states) and states[arrivals].job.submit_time <= now:
            states[arrivals].submitted = True
            arrivals += 1
        active = [s for s in states if s.submitted and not s.done]
        if not active and arrivals >= len(states):
            break
        if not active:
            now = math.ceil((states[arrivals].job.submit_time - now) / period) * period + now
            continue
        snap = m.ClusterSnapshot(nodes=nodes, queues=QUEUES, jobs=tuple(_spec(s) for s in active), now=now)
        result = run_cycle(snap, config)
        cycles += 1
        due = {}
        for uid in result.pending:
            s = by_uid[uid]
            if "at_submission" not in s.estimates:
                due[uid] = "at_submission"
            elif "after_10_min" not in s.estimates and now >= s.job.submit_time + LATER_S:
                due[uid] = "after_10_min"
        if due:
            history = RuntimeHistory.from_runs(finished, running=running_runs(snap))
            t0 = time.process_time()
            got = estimate_starts(snap, config, history, seed=seed + cycles, budget=budget, first=result)
            est_seconds += time.process_time() - t0
            est_runs += 1
            mean_run = history.mean() or period
            total = float(cluster.total_gpus)
            for uid, moment in due.items():
                s = by_uid[uid]
                ahead = sum(_gpus(o.job) for o in active if o.uid in result.pending and o.order <= s.order)
                baseline = now + ahead * mean_run / total
                e = got[uid]
                s.estimates[moment] = (now, e.p50, e.p80, baseline)
                estimates += 1
        # the cycle's decisions: evicted jobs wait again from nothing, a gang placed whole starts
        evicted = {e.job for e in result.evictions}
        for uid in sorted(evicted):
            s = by_uid[uid]
            s.start = s.end = None
            s.tasks = [replace(t, state=m.PENDING, node=None, gpu_groups=()) for t in s.tasks]
        binds: dict[str, dict[str, m.BindDecision]] = {}
        for b in result.binds:
            binds.setdefault(b.job, {})[b.task] = b
        pipelined = {p.job for p in result.pipelined}
        for uid in sorted(binds):
            s = by_uid[uid]
            if s.end is not None or uid in evicted or uid in pipelined or len(binds[uid]) < len(s.tasks):
                continue
            s.tasks = [replace(t, state=m.RUNNING, node=binds[uid][t.name].node,
                               gpu_groups=binds[uid][t.name].gpu_groups) for t in s.tasks]
            s.start, s.end = now, now + s.job.duration
            if "first_start" not in s.estimates:
                s.estimates["first_start"] = (now, None, None, 0.0)
        now += period
    figures = {"cycles": cycles, "estimates": estimates, "estimator_runs": est_runs,
               "estimator_cpu_seconds": round(est_seconds, 1),
               "estimator_cpu_seconds_per_run": round(est_seconds / est_runs, 3) if est_runs else None}
    return states, figures


def score(states: list[_State], horizon_s: float, long_only: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """Per moment, per job class and overall: count, p80 coverage, median absolute error of the p50
    (minutes, and as a share of the real wait), and the baseline's."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for moment in MOMENTS:
        rows: dict[str, list[tuple[float, float, float, float]]] = {}
        for s in states:
            if moment not in s.estimates or "first_start" not in s.estimates:
                continue
            at, p50, p80, base = s.estimates[moment]
            real = s.estimates["first_start"][0]
            wait = real - s.job.submit_time
            if long_only and not wait > LONG_WAIT_S:
                continue
            p50v = p50 if p50 is not None else at + horizon_s
            p80v = p80 if p80 is not None else math.inf
            left = max(wait, 1.0)
            row = (1.0 if real <= p80v + 1e-6 else 0.0, abs(p50v - real), abs(p50v - real) / left, abs(base - real) / left)
            for key in (size_class(_gpus(s.job)), "overall"):
                rows.setdefault(key, []).append(row)
        out[moment] = {}
        for key, rs in sorted(rows.items()):
            out[moment][key] = {
                "jobs": len(rs),
                "p80_coverage": round(sum(r[0] for r in rs) / len(rs), 3),
                "median_abs_error_min": round(statistics.median(r[1] for r in rs) / 60, 1),
                "median_abs_error_ratio": round(statistics.median(r[2] for r in rs), 3),
                "baseline_median_abs_error_ratio": round(statistics.median(r[3] for r in rs), 3),
            }
    return out


def budget_figure(nodes: int = 2000, pending: int = 16000, seed: int = 0, budget: Budget | None = None) -> dict[str, Any]:
    """The estimator's worker time (process CPU seconds) at ``nodes`` × 8 GPUs all running 1-GPU jobs
    and ``pending`` pending 1-GPU jobs (B6's saturated snapshot), with ``budget`` (default: the default
    budget) and a history of 1,000 runs; and a refresh's (the first cycle, which the worker runs too,
    and the estimator)."""
    budget = budget or Budget()
    from b6_steady_state import build

    snap = build(nodes, pending)
    history = RuntimeHistory.from_runs(Run(q, "", "single", "1", 600.0 + 37.0 * (k % 200))
                                       for k, q in enumerate(("dept-0-q0", "dept-0-q1", "dept-1-q0", "dept-1-q1") * 250))
    t0 = time.process_time()
    first = run_cycle(snap)
    cycle_s = time.process_time() - t0
    t0 = time.process_time()
    got = estimate_starts(snap, history=history, seed=seed, first=first, budget=budget)
    seconds = time.process_time() - t0
    sample = next(iter(got.values()))
    return {"nodes": nodes, "pending": pending, "estimated_jobs": len(got), "samples": sample.samples,
            "with_p50": sum(1 for e in got.values() if e.p50 is not None),
            "beyond_bound": sum(1 for e in got.values() if e.reason.code == "beyond-bound"),
            "estimator_cpu_seconds": round(seconds, 2), "live_cycle_cpu_seconds": round(cycle_s, 2),
            "refresh_cpu_seconds": round(seconds + cycle_s, 2),
            "budget": {k: getattr(budget, k) for k in ("samples", "min_samples", "horizon_s", "max_cycles", "max_work",
                                                        "max_pending")}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), help="the traces folder")
    parser.add_argument("--pods", default="openb_pod_list_default.csv", help="an openb pod list in the trace")
    parser.add_argument("--since", type=float, default=10_600_000.0, help="leave out pods created before this trace second")
    parser.add_argument("--jobs", type=int, default=150, help="replay the first N arriving GPU pods")
    parser.add_argument("--load", type=float, default=1.2, help="offered GPU load / capacity that sizes the cluster")
    parser.add_argument("--period", type=float, default=60.0, help="seconds between cycles")
    parser.add_argument("--arrival-speedup", type=float, default=10.0, help="divide the gaps between arrivals by this")
    parser.add_argument("--samples", type=int, default=16, help="the estimator's samples")
    parser.add_argument("--max-cycles", type=int, default=60, help="the estimator's simulated cycles per sample")
    parser.add_argument("--horizon-hours", type=float, default=7 * 24.0, help="the estimator's horizon")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-work", type=int, default=Budget().max_work,
                        help="the estimator's work bound per refresh (jobs + nodes of every simulated cycle)")
    parser.add_argument("--min-samples", type=int, default=4, help="the estimator's fewest samples")
    parser.add_argument("--max-pending", type=int, default=Budget().max_pending,
                        help="the estimator's pending jobs run forward (the first in the engine's order)")
    parser.add_argument("--budget-only", action="store_true",
                        help="only the estimator's cost at 2,000 nodes / 16,000 pending (no trace needed)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    for name in ("samples", "max_pending", "max_work"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1")
    if args.budget_only:
        fig = budget_figure(budget=Budget(samples=args.samples, min_samples=min(args.min_samples, args.samples),
                                          max_work=args.max_work, max_pending=args.max_pending))
        print(json.dumps({"benchmark": "B8-budget", **fig}, indent=None if args.json else 2))
        return 0
    path = Path(args.traces) / "alibaba_gpu_v2023_openb" / args.pods
    if not path.is_file():
        print(json.dumps({"skipped": f"no trace at {path}"}))
        return 0
    for name in ("jobs", "max_cycles"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1")
    if not args.arrival_speedup > 0:
        parser.error("--arrival-speedup: must be > 0")
    jobs = list(openb_jobs(read_openb_pods(path), name=path.stem, since=args.since).jobs[:args.jobs])
    if not jobs:
        parser.error(f"--since {args.since}: no GPU pod of {path.name} arrives after it")
    t0 = jobs[0].submit_time
    jobs = [replace(j, submit_time=(j.submit_time - t0) / args.arrival_speedup) for j in jobs]
    cluster = size_cluster(jobs, args.load)
    cluster = ReplayCluster(nodes=cluster.nodes, cpu_millis_per_node=NODE_CPU_MILLIS, memory_gib_per_node=NODE_MEMORY_GIB)
    budget = Budget(samples=args.samples, min_samples=min(args.min_samples, args.samples), max_cycles=args.max_cycles,
                    max_work=args.max_work, max_pending=args.max_pending,
                    horizon_s=args.horizon_hours * 3600, period_s=args.period)
    t = time.process_time()
    states, figures = replay_with_estimates(jobs, cluster, args.period, budget, seed=args.seed)
    every, long_ = score(states, budget.horizon_s, False), score(states, budget.horizon_s, True)
    waits = [s.estimates["first_start"][0] - s.job.submit_time for s in states if "first_start" in s.estimates]
    meta = {"trace": path.stem, "jobs": len(jobs), "nodes": cluster.nodes, "gpus": cluster.total_gpus, "load": args.load,
            "period_s": args.period, "arrival_speedup": args.arrival_speedup, "samples": args.samples,
            "max_cycles": args.max_cycles, "started": len(waits),
            "waits_over_10_min": sum(1 for w in waits if w > LONG_WAIT_S),
            "wait_median_min": round(statistics.median(waits) / 60, 1) if waits else None,
            "cpu_seconds": round(time.process_time() - t, 1), **figures}
    head = long_["at_submission"].get("overall", {})
    out = {"benchmark": "B8", "p80_coverage": head.get("p80_coverage"),
           "median_abs_error_ratio": head.get("median_abs_error_ratio"),
           "baseline_median_abs_error_ratio": head.get("baseline_median_abs_error_ratio"),
           "after_10_min": long_["after_10_min"].get("overall"), "meta": meta,
           "waits_over_10_min": long_, "every_wait": every}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"B8 on {meta['trace']}: {meta['jobs']} jobs, {meta['nodes']} nodes; {meta['waits_over_10_min']} of "
          f"{meta['started']} started jobs waited over 10 min")
    for title, table in (("waits over 10 minutes", long_), ("every wait", every)):
        print(f"\n{title}")
        print(f"{'moment':<14}{'class':<9}{'jobs':>6}{'p80 cov':>9}{'MAE min':>9}{'MAE/wait':>10}{'baseline':>10}")
        for moment, rows in table.items():
            for key, r in rows.items():
                print(f"{moment:<14}{key:<9}{r['jobs']:>6}{r['p80_coverage']:>9.1%}{r['median_abs_error_min']:>9}"
                      f"{r['median_abs_error_ratio']:>10.2f}{r['baseline_median_abs_error_ratio']:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
