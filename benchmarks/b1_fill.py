"""B1 — fill: one full scheduling cycle (all actions) on a cluster of N nodes × 8 GPUs.

Prints one JSON object (BENCHMARKS.md B1): per size and variant the median and p95 cycle time over
repeats, µs per pending pod, the ratio to the floor program (benchmarks/floor.py) timed in the same
run, allocated GPUs and the Jain index of allocated/deserved across leaf queues.

    python benchmarks/b1_fill.py [--sizes 100,500] [--repeats 5] [--variants base,mixed,many_queues,gangs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.floor import best_fit  # noqa: E402
from scheduler_core import model as m  # noqa: E402
from scheduler_core import run_cycle  # noqa: E402

GIB = 1024**3
NOW = 1_000_000.0
JOBS_AT = {100: 500, 500: 4000}


def build(n_nodes: int, variant: str = "base") -> tuple[m.ClusterSnapshot, list[str]]:
    """The B1 snapshot for one size and variant, and the names of its leaf queues."""
    nodes = tuple(m.NodeSpec(f"node-{i:05d}", 64000, 512 * GIB, 8) for i in range(n_nodes))
    total = 8.0 * n_nodes
    depts, per = (5, 4) if variant == "many_queues" else (2, 2)
    queues: list[m.QueueSpec] = []
    leaves: list[str] = []
    unl = m.QueueResource(-1, -1, 1)
    for d in range(depts):
        queues.append(m.QueueSpec(f"dept-{d}", None, 100, float(d), m.QueueResource(total / depts, -1, 1), unl, unl))
        for q in range(per):
            name = f"dept-{d}-q{q}"
            leaves.append(name)
            queues.append(m.QueueSpec(name, f"dept-{d}", 100, float(q),
                                      m.QueueResource(total / depts / per, -1, 1), unl, unl))
    n_jobs = JOBS_AT.get(n_nodes, 8 * n_nodes)
    pods = 4 if variant == "gangs" else 1
    if variant == "gangs":
        n_jobs //= 4
    req = m.TaskRequest(cpu_millis=1000, memory_bytes=4 * GIB, gpu_kind=m.GPU_WHOLE, gpus=1)
    jobs = []
    slot = 0
    for j in range(n_jobs):
        q = leaves[j % len(leaves)]
        running = variant == "mixed" and j % 2 == 0
        tasks = []
        for p in range(pods):
            if running:
                node = nodes[(slot // 8) % n_nodes].name
                slot += 1
                tasks.append(m.TaskSpec(f"job-{j:06d}-{p}", req, m.RUNNING, node))
            else:
                tasks.append(m.TaskSpec(f"job-{j:06d}-{p}", req))
        jobs.append(m.JobSpec(f"job-{j:06d}", q, tuple(tasks), creation=NOW - n_jobs + j))
    return m.ClusterSnapshot(nodes=nodes, queues=tuple(queues), jobs=tuple(jobs), now=NOW), leaves


def jain(values: list[float]) -> float:
    if not values or sum(v * v for v in values) == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def measure(n_nodes: int, variant: str, repeats: int) -> dict:
    snap, leaves = build(n_nodes, variant)
    pending = sum(1 for j in snap.jobs for t in j.tasks if t.state == m.PENDING)
    times, floor_times = [], []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run_cycle(snap)
        times.append((time.perf_counter() - t0) * 1000)
        free = np.full(n_nodes, 8.0)
        for j in snap.jobs:
            for t in j.tasks:
                if t.state == m.RUNNING:
                    free[int(t.node.rsplit("-", 1)[1])] -= 1
        pod_gpus = np.ones(pending)
        t1 = time.perf_counter()
        best_fit(free, pod_gpus)
        floor_times.append((time.perf_counter() - t1) * 1000)
    assert result is not None
    p50 = statistics.median(times)
    p95 = sorted(times)[max(0, int(round(0.95 * len(times))) - 1)]
    floor = statistics.median(floor_times)
    shares = []
    for q in leaves:
        st = result.queues[q]
        shares.append(st.allocated[2] / st.deserved[2] if st.deserved[2] > 0 else 0.0)
    partial = 0
    by_job: dict[str, list[str]] = {}
    for o in result.tasks:
        by_job.setdefault(o.job, []).append(o.status)
    for statuses in by_job.values():
        n = sum(1 for s in statuses if s in (m.BINDING, m.RUNNING))
        if 0 < n < len(statuses):
            partial += 1
    return {
        "nodes": n_nodes, "variant": variant, "jobs": len(snap.jobs), "pending_pods": pending,
        "cycle_ms_p50": round(p50, 2), "cycle_ms_p95": round(p95, 2),
        "us_per_pod": round(1000 * p50 / max(1, pending), 2),
        "floor_ms_p50": round(floor, 3), "ratio_to_floor": round(p50 / floor, 1) if floor > 0 else None,
        "allocated_gpus": round(sum(result.queues[q].allocated[2] for q in leaves), 3),
        "binds": len(result.binds), "partial_gangs": partial, "evictions": len(result.evictions),
        "jain_index": round(jain(shares), 4), "timings_ms": {k: round(v, 2) for k, v in result.timings_ms.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="B1 — fill")
    ap.add_argument("--sizes", default="10,100,500", help="node counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variants", default="base,mixed,many_queues,gangs")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    variants = [v for v in args.variants.split(",") if v]
    runs = [measure(n, v, args.repeats) for n in sizes for v in variants]
    print(json.dumps({"benchmark": "B1", "python": platform.python_version(), "numpy": np.__version__,
                      "cpu_count": os.cpu_count(), "repeats": args.repeats, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
