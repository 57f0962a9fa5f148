"""B2 — gang waves: all-or-nothing packing of a burst of full-node gangs on 32 nodes × 8 GPUs.

53 gang jobs of 8-GPU pods (sizes in order 1×32, 2×16, 3×10, 1×2, 4×8, 5×6, 2×1, 6×5, 1×2, 7×4,
1×2, 2×1, 8×4, 9×3, 1×5 — count × pods) arrive at t = 0; each pod runs 30 s of simulated time.
The set packs into exactly 9 full-cluster waves (ideal makespan 270 s). A cycle runs at t = 0 and
whenever pods finish; bound pods start at once. Prints one JSON object: makespan, its ratio to
270 s, GPU occupancy, partial gangs (must be 0) and the median cycle time.

    python benchmarks/b2_gang_waves.py [--nodes 32] [--runtime 30]
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
SIZES = [(1, 32), (2, 16), (3, 10), (1, 2), (4, 8), (5, 6), (2, 1), (6, 5), (1, 2), (7, 4), (1, 2), (2, 1), (8, 4),
         (9, 3), (1, 5)]
UNL = m.QueueResource(-1, -1, 1)


def gangs(scale: float = 1.0) -> list[int]:
    """Pods per gang, in arrival order (``scale`` shrinks the workload for small clusters)."""
    out = []
    for count, pods in SIZES:
        out.extend([max(1, round(pods * scale))] * count)
    return out


def simulate(n_nodes: int = 32, runtime: float = 30.0, scale: float = 1.0) -> dict:
    nodes = tuple(m.NodeSpec(f"node-{i:03d}", 64000, 512 * GIB, 8) for i in range(n_nodes))
    queue = m.QueueSpec("train", None, 100, 0.0, m.QueueResource(8 * n_nodes, -1, 1), UNL, UNL)
    req = m.TaskRequest(cpu_millis=8000, memory_bytes=64 * GIB, gpu_kind=m.GPU_WHOLE, gpus=8)
    sizes = gangs(scale)
    # job -> list of [state, node, finish time]
    state = {f"gang-{j:02d}": [[m.PENDING, None, None] for _ in range(p)] for j, p in enumerate(sizes)}
    now, cycles, partial, busy = 0.0, [], 0, 0.0
    config = m.CycleConfig()
    while True:
        jobs = []
        for j, (name, pods) in enumerate(state.items()):
            if all(p[0] == m.SUCCEEDED for p in pods):
                continue
            tasks = tuple(m.TaskSpec(f"{name}-{k}", req, p[0], p[1]) for k, p in enumerate(pods))
            jobs.append(m.JobSpec(name, "train", tasks, creation=float(j), build_order=j))
        if not jobs:
            break
        snap = m.ClusterSnapshot(nodes=nodes, queues=(queue,), jobs=tuple(jobs), now=now)
        t0 = time.perf_counter()
        result = run_cycle(snap, config)
        cycles.append((time.perf_counter() - t0) * 1000)
        by_job: dict[str, list[str]] = {}
        for o in result.tasks:
            by_job.setdefault(o.job, []).append(o.status)
            if o.status == m.BINDING:
                k = int(o.task.rsplit("-", 1)[1])
                state[o.job][k] = [m.RUNNING, o.node, now + runtime]
        for statuses in by_job.values():
            started = sum(1 for s in statuses if s in (m.BINDING, m.RUNNING))
            if 0 < started < len(statuses):
                partial += 1
        finishes = [p[2] for pods in state.values() for p in pods if p[0] == m.RUNNING]
        if not finishes:
            break  # nothing runs and nothing could start: stuck
        now = min(finishes)
        for pods in state.values():
            for p in pods:
                if p[0] == m.RUNNING and p[2] <= now:
                    p[0], p[1] = m.SUCCEEDED, None
                    busy += 8 * runtime
    total_pods = sum(sizes)
    done = sum(1 for pods in state.values() for p in pods if p[0] == m.SUCCEEDED)
    ideal = runtime * total_pods / n_nodes
    return {
        "nodes": n_nodes, "gangs": len(sizes), "pods": total_pods, "pods_finished": done,
        "makespan_s": now, "ideal_makespan_s": ideal, "makespan_ratio": round(now / ideal, 4) if ideal else None,
        "gpu_occupancy": round(busy / (8 * n_nodes * now), 4) if now else 0.0,
        "partial_gangs": partial, "cycles": len(cycles), "cycle_ms_p50": round(statistics.median(cycles), 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="B2 — gang waves")
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--runtime", type=float, default=30.0)
    args = ap.parse_args(argv)
    out = simulate(args.nodes, args.runtime, scale=args.nodes / 32)
    out.update({"benchmark": "B2", "python": platform.python_version(), "numpy": np.__version__,
                "cpu_count": os.cpu_count()})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
