"""B3 — reclaim: a full cluster of queue A's 1-GPU jobs and pending work in queue B.

* B3a: one pending gang of N/2 pods × 8 GPUs in B → exactly N/2·8 victims, N/2 pods pipelined.
* B3b: N·8 pending 1-GPU jobs in B → each running job of A evicted exactly once.
* B3c: a gang of 10 × 8 GPUs that must not be able to reclaim (A's quota N·8 − 80 + 1) → a
  definitive reason and no eviction.

Prints one JSON object (BENCHMARKS.md B3): engine time per case and size (median of repeats),
victim and pipelined counts, and whether the counts are the exact expected ones.

    python benchmarks/b3_reclaim.py [--sizes 100,500,1000] [--cases a,b,c] [--repeats 3]
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

from scheduler_core import model as m  # noqa: E402
from scheduler_core import run_cycle  # noqa: E402

GIB = 1024**3
NOW = 1_000_000.0
UNL = m.QueueResource(-1, -1, 1)


def build(n: int, case: str) -> m.ClusterSnapshot:
    """The B3 snapshot of one case at N nodes."""
    nodes = tuple(m.NodeSpec(f"node-{i:05d}", 64000, 512 * GIB, 8) for i in range(n))
    a_quota = (8 * n - 80 + 1) if case == "c" else 0
    queues = (
        m.QueueSpec("A", None, 100, 0.0, m.QueueResource(a_quota, -1, 1), UNL, UNL),
        m.QueueSpec("B", None, 100, 1.0, m.QueueResource(8 * n, -1, 1), UNL, UNL),
    )
    one = m.TaskRequest(cpu_millis=1000, memory_bytes=4 * GIB, gpu_kind=m.GPU_WHOLE, gpus=1)
    eight = m.TaskRequest(cpu_millis=8000, memory_bytes=32 * GIB, gpu_kind=m.GPU_WHOLE, gpus=8)
    jobs: list[m.JobSpec] = []
    k = 0
    for i in range(n):
        for _g in range(8):
            name = f"a-{k:06d}"
            jobs.append(m.JobSpec(name, "A", (m.TaskSpec(f"{name}-0", one, m.RUNNING, nodes[i].name),),
                                  creation=NOW - 100000 + k, last_start=NOW - 3600))
            k += 1
    if case == "a":
        pods = n // 2
        jobs.append(m.JobSpec("b-gang", "B", tuple(m.TaskSpec(f"b-gang-{p}", eight) for p in range(pods)),
                              creation=NOW - 10))
    elif case == "b":
        for p in range(8 * n):
            jobs.append(m.JobSpec(f"b-{p:06d}", "B", (m.TaskSpec(f"b-{p:06d}-0", one),), creation=NOW - 50000 + p))
    else:
        jobs.append(m.JobSpec("b-gang", "B", tuple(m.TaskSpec(f"b-gang-{p}", eight) for p in range(10)),
                              creation=NOW - 10))
    return m.ClusterSnapshot(nodes=nodes, queues=queues, jobs=tuple(jobs), now=NOW)


def measure(n: int, case: str, repeats: int) -> dict:
    snap = build(n, case)
    config = m.CycleConfig(actions=("allocate", "reclaim"))
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run_cycle(snap, config)
        times.append((time.perf_counter() - t0) * 1000)
    assert result is not None
    victims = len(result.evictions)
    victim_jobs = len({e.job for e in result.evictions})
    pipelined = sum(1 for p in result.pipelined if p.moved_from is None)
    if case == "a":
        exact = victims == (n // 2) * 8 and pipelined == n // 2
    elif case == "b":
        exact = victims == 8 * n and victim_jobs == 8 * n and pipelined == 8 * n
    else:
        exact = victims == 0 and pipelined == 0 and "b-gang" in result.pending
    out = {"nodes": n, "case": f"B3{case}", "engine_ms": round(statistics.median(times), 2),
           "victims": victims, "victim_jobs": victim_jobs, "pipelined": pipelined, "counts_exact": exact,
           "reclaim_ms": round(result.timings_ms.get("reclaim", 0.0), 2)}
    if case == "c":
        reason = result.pending.get("b-gang")
        out["pending_reason"] = reason.message if reason else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="B3 — reclaim")
    ap.add_argument("--sizes", default="100,500,1000")
    ap.add_argument("--cases", default="a,b,c")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    runs = [measure(int(n), c, args.repeats) for n in args.sizes.split(",") if n for c in args.cases.split(",") if c]
    print(json.dumps({"benchmark": "B3", "python": platform.python_version(), "numpy": np.__version__,
                      "cpu_count": os.cpu_count(), "repeats": args.repeats, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
