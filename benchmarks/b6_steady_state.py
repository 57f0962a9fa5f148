"""B6 — steady state: a saturated cluster with a deep backlog, engine alone.

Every GPU of N nodes × 8 runs a 1-GPU job, spread evenly over B1's four leaf queues (each at its
fair share), and P pending 1-GPU pods wait, spread evenly over the leaves (variant ``gangs``: jobs
of 4 pods). Nothing can be placed, reclaimed for, preempted for or consolidated for.

* ``static``: the same cluster cycle after cycle, 5 s later each time (the same objects, a new
  ``now``); the figure is the median of the cycles after the first (the first one fills the
  cross-cycle memo; it is reported as ``first_cycle_ms``), and ``reused`` counts the cycles whose
  quiet result was reused (``memo.py``, layer 3).
* ``churn``: between cycles 1 % of the running jobs finish and as many new pending jobs arrive;
  the result of each cycle is applied (binds run, evictions leave, pipelined pods stay pending),
  and the figure is the median over 10 consecutive cycles after the first.

Both run with a memo passed from cycle to cycle (``run_cycle(..., memo=CycleMemo())``), the way
the control plane's worker runs them. ``same_decisions``: at the smallest size the benchmark also
runs the plain full evaluation (no memo, shortcuts off) on the same snapshots and compares every
decision (binds, pipelined pods, evictions, pending reasons, queue accounting).

Prints one JSON object (BENCHMARKS.md B6).

    python benchmarks/b6_steady_state.py [--sizes 500x4000,500x16000,2000x16000] [--kinds static,churn]
        [--variants base,gangs] [--cycles 10] [--plain] [--check-size NODESxPENDING]

``--plain`` measures the plain full evaluation instead (the figures before the memo existed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
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
ONE = m.TaskRequest(cpu_millis=1000, memory_bytes=4 * GIB, gpu_kind=m.GPU_WHOLE, gpus=1)
LEAVES = ("dept-0-q0", "dept-0-q1", "dept-1-q0", "dept-1-q1")
CHURN = 0.01


def _queues(n_nodes: int) -> tuple[m.QueueSpec, ...]:
    total = 8.0 * n_nodes
    out = []
    for d in range(2):
        out.append(m.QueueSpec(f"dept-{d}", None, 100, float(d), m.QueueResource(total / 2, -1, 1), UNL, UNL))
        for q in range(2):
            out.append(m.QueueSpec(f"dept-{d}-q{q}", f"dept-{d}", 100, float(q),
                                   m.QueueResource(total / 4, -1, 1), UNL, UNL))
    return tuple(out)


def _running(name: str, queue: str, node: str, started: float) -> m.JobSpec:
    return m.JobSpec(name, queue, (m.TaskSpec(f"{name}-0", ONE, m.RUNNING, node),), creation=started - 60,
                     last_start=started)


def _pending(name: str, queue: str, pods: int, created: float) -> m.JobSpec:
    return m.JobSpec(name, queue, tuple(m.TaskSpec(f"{name}-{p}", ONE) for p in range(pods)), creation=created)


def build(n_nodes: int, n_pending: int, variant: str = "base") -> m.ClusterSnapshot:
    """The saturated B6 snapshot: N·8 running 1-GPU jobs, ``n_pending`` pending pods."""
    nodes = tuple(m.NodeSpec(f"node-{i:05d}", 64000, 512 * GIB, 8) for i in range(n_nodes))
    jobs: list[m.JobSpec] = []
    for k in range(8 * n_nodes):
        # round robin over the leaves, node by node: every leaf holds exactly its quota
        jobs.append(_running(f"run-{k:07d}", LEAVES[k % 4], nodes[k // 8].name, NOW - 3600 - k))
    pods = 4 if variant == "gangs" else 1
    for k in range(n_pending // pods):
        jobs.append(_pending(f"wait-{k:07d}", LEAVES[k % 4], pods, NOW - n_pending + k))
    return m.ClusterSnapshot(nodes=nodes, queues=_queues(n_nodes), jobs=tuple(jobs), now=NOW)


def advance(snap: m.ClusterSnapshot, result: m.CycleResult, rng: random.Random, step: int,
            variant: str = "base", churn: float = CHURN,
            leaves: tuple[str, ...] = LEAVES) -> m.ClusterSnapshot:
    """The next cycle's snapshot: the result applied (bound pods run, evicted pods are gone and
    their jobs wait again), then ``churn`` of the running jobs finish and as many pending jobs
    arrive (round robin over ``leaves``). Deterministic for a seeded ``rng``. Jobs the step does
    not touch keep their objects, as an incremental snapshot builder keeps them."""
    now = snap.now + 5.0
    bound = {(b.job, b.task): b.node for b in result.binds}
    evicted = {(e.job, e.task) for e in result.evictions}
    jobs: list[m.JobSpec] = []
    for j in snap.jobs:
        tasks = []
        for t in j.tasks:
            key = (j.name, t.name)
            if key in bound:
                t = dataclasses.replace(t, state=m.RUNNING, node=bound[key])
            elif key in evicted:
                t = dataclasses.replace(t, state=m.PENDING, node=None)
            tasks.append(t)
        if any((j.name, t.name) in bound or (j.name, t.name) in evicted for t in j.tasks):
            started = now if any((j.name, t.name) in bound for t in j.tasks) else j.last_start
            j = dataclasses.replace(j, tasks=tuple(tasks), last_start=started)
        jobs.append(j)
    running = [i for i, j in enumerate(jobs) if all(t.state == m.RUNNING for t in j.tasks)]
    n_done = max(1, int(round(churn * len(running)))) if churn > 0 else 0
    done = set(rng.sample(running, min(n_done, len(running))))
    jobs = [j for i, j in enumerate(jobs) if i not in done]
    pods = 4 if variant == "gangs" else 1
    for k in range(n_done):
        jobs.append(_pending(f"new-{step:04d}-{k:06d}", leaves[k % len(leaves)], pods, now - 1 + k * 1e-6))
    return dataclasses.replace(snap, jobs=tuple(jobs), now=now)


def decisions(result: m.CycleResult) -> tuple:
    """Everything a cycle decided and explains, without its timings and memo figures."""
    return (result.binds, result.pipelined, result.evictions,
            tuple(sorted((k, v.code, v.message, json.dumps(v.details, sort_keys=True, default=str))
                         for k, v in result.pending.items())),
            tuple(sorted(result.queues.items())), result.tasks, result.errors)


def _run(snap: m.ClusterSnapshot, memo: object | None, plain: bool) -> m.CycleResult:
    if plain:
        return run_cycle(snap, m.CycleConfig(shortcuts=False))
    return run_cycle(snap, memo=memo)


def sequence(n_nodes: int, n_pending: int, variant: str, kind: str, cycles: int, plain: bool,
             seed: int = 6) -> tuple[list[float], list[m.CycleResult]]:
    """Run ``cycles`` + 1 consecutive cycles (the first one warms the memo); the cycle times
    in ms and the results."""
    snap = build(n_nodes, n_pending, variant)
    memo = None
    if not plain:
        from scheduler_core import CycleMemo

        memo = CycleMemo()
    rng = random.Random(seed)
    times, results = [], []
    for step in range(cycles + 1):
        t0 = time.perf_counter()
        result = _run(snap, memo, plain)
        times.append((time.perf_counter() - t0) * 1000)
        results.append(result)
        if kind == "churn":
            snap = advance(snap, result, rng, step, variant)
        else:  # nothing changes but the clock, as in a control plane's period
            snap = dataclasses.replace(snap, now=snap.now + 5.0)
    return times, results


def measure(n_nodes: int, n_pending: int, kind: str, variant: str = "base", cycles: int = 10,
            plain: bool = False, check: bool = False) -> dict:
    times, results = sequence(n_nodes, n_pending, variant, kind, cycles, plain)
    steady = times[1:] or times
    per_action: dict[str, list[float]] = {}
    for r in results[1:] or results:
        for k, v in r.timings_ms.items():
            per_action.setdefault(k, []).append(v)
    out = {
        "nodes": n_nodes, "pending_pods": n_pending, "kind": kind, "variant": variant,
        "mode": "plain" if plain else "memo", "cycles": len(steady),
        "cycle_ms_p50": round(statistics.median(steady), 2), "cycle_ms_max": round(max(steady), 2),
        "first_cycle_ms": round(times[0], 2),
        "per_action_ms_p50": {k: round(statistics.median(v), 2) for k, v in per_action.items()},
        "binds": sum(len(r.binds) for r in results[1:]),
        "evictions": sum(len(r.evictions) for r in results[1:]),
        "pipelined": sum(len(r.pipelined) for r in results[1:]),
        "memo": {k: v for k, v in results[-1].counts.items() if k.startswith("memo_")},
        "reused": sum(r.counts.get("reused", 0) for r in results[1:]),
        # jobs the build charged per cycle (the others kept their charges from the last cycle)
        "charged_jobs_p50": statistics.median(r.counts.get("charged_jobs", 0) for r in results[1:] or results),
    }
    if check:
        _, plain_results = sequence(n_nodes, n_pending, variant, kind, cycles, plain=True)
        out["same_decisions"] = all(decisions(a) == decisions(b) for a, b in zip(results, plain_results))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="B6 — steady state")
    ap.add_argument("--sizes", default="500x4000,500x16000,2000x16000", help="NODESxPENDING, comma-separated")
    ap.add_argument("--kinds", default="static,churn")
    ap.add_argument("--variants", default="base", help="base (one-pod jobs) and/or gangs (four-pod jobs)")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--plain", action="store_true", help="measure the plain full evaluation")
    ap.add_argument("--check-size", default="", help="NODESxPENDING for the same_decisions check "
                    "(default: the smallest size)")
    args = ap.parse_args(argv)
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",") if s]
    check = tuple(int(x) for x in args.check_size.split("x")) if args.check_size else min(sizes)
    runs = []
    for n, p in sizes:
        for kind in [k for k in args.kinds.split(",") if k]:
            for variant in [v for v in args.variants.split(",") if v]:
                runs.append(measure(n, p, kind, variant, args.cycles, args.plain,
                                    check=(n, p) == check and not args.plain))
    print(json.dumps({"benchmark": "B6", "python": platform.python_version(), "numpy": np.__version__,
                      "cpu_count": os.cpu_count(), "cycles": args.cycles, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
