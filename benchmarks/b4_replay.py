"""B4 replay: fragmentation-aware GPU placement against binpack, job by job through ``run_cycle``.

The GPU pods of an Alibaba openb pod list (most of them share a GPU) arrive at their creation time
and run for their recorded time on a homogeneous cluster of 8-GPU nodes sized for a busy load. The
same jobs are replayed twice through the engine's cycle, once per ``gpu_placement``, and the two
runs are printed side by side as JSON: unallocated GPU % while jobs wait, queueing delay (mean,
p95), job completion time (mean, p95), stranded GPUs, cycles and seconds per run.

    .venv/bin/python benchmarks/b4_replay.py --jobs 1000 --arrival-speedup 10 --load 1.2

Needs ``../shared/traces`` (or ``--traces``); exits with a message when it is absent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler_core import model as m  # noqa: E402
from scheduler_core.sim.replay import ReplayCluster, ReplayConfig, replay  # noqa: E402
from scheduler_core.sim.traces import openb_jobs, read_openb_pods  # noqa: E402

DEFAULT_TRACES = ROOT.parent / "shared" / "traces"
STRATEGIES = ("binpack", "fragmentation-aware")
KEYS = ("unallocated_gpu_pct_while_waiting", "queueing_delay_mean_s", "queueing_delay_p95_s", "jct_mean_s",
        "jct_p95_s", "stranded_gpus_avg", "gpu_utilisation", "completed", "unfinished", "cycles", "partial_gangs")

#: one queue for every job: the comparison is about placement, not fair share
QUEUES = (m.QueueSpec(name="trace", gpu=m.QueueResource(quota=m.UNLIMITED, limit=m.UNLIMITED)),)


#: the openb cluster's CPU per GPU (107,018 vCPU for 6,212 GPUs): 8-GPU nodes of 138 cores
NODE_CPU_MILLIS = 138_000
NODE_MEMORY_GIB = 1024


def size_cluster(jobs: list, load: float) -> ReplayCluster:
    """8-GPU nodes with the trace cluster's CPU per GPU, as many as make the GPUs the jobs would hold
    at once without waiting (its median over the arrivals) ``load`` × the GPU capacity."""
    import heapq

    held, ends, demand = 0.0, [], []
    for j in sorted(jobs, key=lambda x: x.submit_time):
        while ends and ends[0][0] <= j.submit_time:
            held -= heapq.heappop(ends)[1]
        gpus = j.gpu_per_pod * j.num_pods
        held += gpus
        heapq.heappush(ends, (j.submit_time + j.duration, gpus))
        demand.append(held)
    demand.sort()
    nodes = demand[len(demand) // 2] / 8 / load
    return ReplayCluster(nodes=max(1, round(nodes)), gpus_per_node=8, cpu_millis_per_node=NODE_CPU_MILLIS,
                         memory_gib_per_node=NODE_MEMORY_GIB)


def run(jobs: list, cluster: ReplayCluster, period: float) -> dict[str, object]:
    """Both strategies on the same jobs; per strategy the summary's figures and its seconds."""
    out: dict[str, object] = {}
    for strategy in STRATEGIES:
        config = ReplayConfig(period_s=period, cycle=m.CycleConfig(gpu_placement=strategy))
        t0 = time.process_time()
        summary = replay(jobs, QUEUES, cluster, config).summary()
        row = {k: summary[k] for k in KEYS}
        row["cpu_seconds"] = round(time.process_time() - t0, 1)
        out[strategy] = row
    a, b = out[STRATEGIES[0]], out[STRATEGIES[1]]
    out["difference"] = {k: (round(b[k] - a[k], 2) if isinstance(a[k], int | float) and isinstance(b[k], int | float)
                             else None) for k in KEYS}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), help="the traces folder")
    parser.add_argument("--pods", default="openb_pod_list_default.csv", help="an openb pod list in the trace")
    parser.add_argument("--since", type=float, default=10_600_000.0,
                        help="leave out pods created before this trace second (the trace starts with a snapshot "
                             "of pods already running; arrivals follow)")
    parser.add_argument("--jobs", type=int, default=1000, help="replay the first N arriving GPU pods")
    parser.add_argument("--load", type=float, default=1.2, help="offered GPU load / capacity that sizes the cluster")
    parser.add_argument("--nodes", type=int, default=0, help="nodes (default: sized by --load)")
    parser.add_argument("--period", type=float, default=60.0, help="seconds between cycles")
    parser.add_argument("--arrival-speedup", type=float, default=10.0,
                        help="divide the gaps between arrivals by this (durations unchanged): a busier cluster")
    args = parser.parse_args(argv)
    path = Path(args.traces) / "alibaba_gpu_v2023_openb" / args.pods
    if not path.is_file():
        print(json.dumps({"skipped": f"no trace at {path}"}))
        return 0
    if args.jobs < 1:
        parser.error("--jobs: must be at least 1")
    jobs = list(openb_jobs(read_openb_pods(path), name=path.stem, since=args.since).jobs[:args.jobs])
    if not jobs:
        parser.error(f"--since {args.since}: no GPU pod of {path.name} arrives after it")
    t0 = jobs[0].submit_time
    from dataclasses import replace

    if not args.arrival_speedup > 0:
        parser.error("--arrival-speedup: must be > 0")
    jobs = [replace(j, submit_time=(j.submit_time - t0) / args.arrival_speedup) for j in jobs]
    cluster = (ReplayCluster(nodes=args.nodes, cpu_millis_per_node=NODE_CPU_MILLIS, memory_gib_per_node=NODE_MEMORY_GIB)
               if args.nodes
               else size_cluster(jobs, args.load))
    meta = {"trace": path.stem, "jobs": len(jobs), "shared_gpu_jobs": sum(1 for j in jobs if j.gpu_per_pod < 1),
            "nodes": cluster.nodes, "gpus": cluster.total_gpus, "load": args.load, "period_s": args.period, "arrival_speedup": args.arrival_speedup,
            "arrival_span_s": round(jobs[-1].submit_time, 1)}
    print(json.dumps({"benchmark": "B4-replay", "meta": meta, **run(jobs, cluster, args.period)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
