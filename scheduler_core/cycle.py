"""One scheduling cycle: fair share, then the configured actions, then the result.

``run_cycle(snapshot, config)`` is pure: it never mutates its input and the same snapshot and
config always give the same ``CycleResult`` (every tie is broken by a name). ``Session`` state can
also be driven action by action (``open_session`` / ``run_action`` / ``close_session``), which is
what the scenario runner does for KAI's single-action sessions.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core.actions.consolidate import run_consolidation
from scheduler_core.actions.preempt import run_preempt
from scheduler_core.actions.reclaim import run_reclaim
from scheduler_core.actions.stale_gangs import run_stale_gangs
from scheduler_core.allocate import Placer, run_allocate
from scheduler_core.fair_share import divide_session
from scheduler_core.memo import CycleMemo
from scheduler_core.ordering import QueueComparator, tasks_to_allocate
from scheduler_core.session import Session

_ACTION_FUNCS = {
    m.ALLOCATE: run_allocate,
    m.CONSOLIDATION: run_consolidation,
    m.RECLAIM: run_reclaim,
    m.PREEMPT: run_preempt,
    m.STALE_GANG_EVICTION: run_stale_gangs,
}


def open_session(snapshot: m.ClusterSnapshot, config: m.CycleConfig,
                 memo: CycleMemo | None = None) -> tuple[Session, Placer]:
    """Build the session and compute fair shares (fixed for the cycle, §8.25). ``memo``: verdicts
    remembered across cycles (``memo.py``); never changes a decision."""
    s = Session(snapshot, config, memo.take_jobs() if memo is not None and config.shortcuts else None)
    s.memo = memo
    # validated while the session was built; kept as a guard for bad totals
    for problem in divide_session(s):
        s.errors.append(m.ObjectError("queue", "*", "fair_share", problem))
    s.queue_comparator = QueueComparator(s.total)
    return s, Placer(s)


def run_action(s: Session, placer: Placer, action: str) -> None:
    """Run one action on the session (names as in ``model.ACTIONS``)."""
    if action not in _ACTION_FUNCS:
        raise ValueError(f"actions: unknown action {action!r}; known: {', '.join(m.ACTIONS)}")
    if action == m.CONSOLIDATION and (
        s.config.gpu_placement == "spread" or s.config.cpu_placement == "spread"
        or s.config.max_consolidation_preemptees == 0
    ):
        return  # KAI disables consolidation with spread placement
    _ACTION_FUNCS[action](s, placer)


#: the task statuses a decision can leave (a bind, a pipelined pod, an eviction)
_DECIDED = frozenset({m.ALLOCATED, m.PIPELINED, m.RELEASING})


def close_session(s: Session, timings: dict[str, float] | None = None) -> m.CycleResult:
    """Turn the session state into a ``CycleResult``."""
    names = [n.name for n in s.nodes]
    binds, pipelined, evictions, outcomes = [], [], [], []
    for t in s.tasks:
        st = t.status
        if t.node is not None:
            node = names[t.node]
        elif t.spec.node is not None and not t.was_cleared and st == t.orig_status:
            # KAI keeps an untouched task's node (pending ones until an attempt is rolled back)
            node = t.spec.node
        else:
            node = None
        status = m.BINDING if st == m.ALLOCATED else st
        out = t.outcome  # the last outcome made for this task: a value, shared while it holds
        if out is None or out.status != status or out.node != node or out.gpu_groups != t.groups:
            out = t.outcome = m.TaskOutcome(t.job.uid, t.name, status, node, t.groups)
        outcomes.append(out)
        if st not in _DECIDED:
            continue
        if st == m.ALLOCATED:
            binds.append(m.BindDecision(t.job.uid, t.name, node or "", tuple(t.groups),
                                        t.portion if t.shared else 0.0))
        elif st == m.PIPELINED and (t.orig_status != m.PIPELINED or t.spec.node != node):
            action = s.pipeline_actions.get(t.index, m.ALLOCATE)
            src = t.spec.node if t.orig_status in m.ACTIVE_USED_STATES and t.spec.node != node else None
            pipelined.append(m.PipelineDecision(t.job.uid, t.name, node or "", action, tuple(t.groups), src))
        moved = (st == m.PIPELINED and t.orig_status in m.ACTIVE_USED_STATES and t.orig_status != m.PIPELINED
                 and t.index in s.eviction_reasons)
        if (st == m.RELEASING and t.orig_status != m.RELEASING) or moved:
            info = s.eviction_reasons.get(t.index)
            action, preemptor, reason = info if info else ("unknown", None, m.Reason(reasons.EVICTED, "evicted", {}))
            evictions.append(m.EvictionDecision(t.job.uid, t.name, t.spec.node or node or "", action,
                                                preemptor, reason))
    def vec3(v: list[float]) -> tuple[float, float, float]:
        return (v[0], v[1], v[2])

    queues = {
        name: m.QueueStatus(name, vec3(q.fair), vec3(q.allocated), vec3(q.allocated_np), vec3(q.request),
                            vec3(q.deserved), vec3(q.limit))
        for name, q in sorted(s.queues.items())
    }
    pending: dict[str, m.Reason] = {}
    last_start: dict[str, float] = {}
    stale_since: dict[str, float | None] = {}
    for j in s.jobs:
        uid = j.uid
        stale_since[uid] = j.stale_since
        if j.last_start is not None:
            last_start[uid] = j.last_start
        if not j.n_pending:  # has_pending()
            continue
        if not j.valid:
            err = next((e for e in s.errors if e.name == uid), None)
            pending[uid] = m.Reason(reasons.INVALID, err.message if err else "job has invalid fields", {})
            continue
        why = s.pending_reasons.get(uid)
        if why is None:
            if j.gang_satisfied() and not tasks_to_allocate(j):
                continue
            why = m.Reason(reasons.NOT_ATTEMPTED, "no attempt was made for this job in this cycle "
                           "(earlier jobs used the capacity, or a session cap was reached)", {})
        pending[uid] = why
    nodes = {}
    for i, n in enumerate(s.nodes):
        idle, rel = s.node_gpu_counts(i)
        nodes[n.name] = {"idle_gpus": idle, "releasing_gpus": rel}
    counts = {
        "binds": len(binds), "pipelined": len(pipelined), "evictions": len(evictions),
        "pending_jobs": len(pending), "errors": len(s.errors), "nodes": len(s.nodes), "jobs": len(s.jobs),
        "charged_jobs": s.charged_jobs,
    }
    return m.CycleResult(
        binds=tuple(binds), pipelined=tuple(pipelined), evictions=tuple(evictions), queues=queues,
        pending=pending, errors=tuple(s.errors), tasks=tuple(outcomes), nodes=nodes,
        last_start=last_start, stale_since=stale_since, positions=positions(s.try_order, pending),
        counts=counts, timings_ms=dict(timings or {}),
    )


def positions(try_order: list[tuple[str, str]], pending: dict[str, m.Reason]) -> dict[str, tuple[int, int]]:
    """Each pending job's place in the order allocate tried the jobs, in the shard and in its leaf
    queue, from 1. Jobs placed in the cycle are not counted: a job's place says how many jobs
    still waiting the engine tries before it. Jobs allocate did not try (not ready, being deleted,
    beyond ``queue_depth_per_action``, invalid) have no place."""
    out: dict[str, tuple[int, int]] = {}
    in_queue: dict[str, int] = {}
    for uid, queue in try_order:
        if uid in pending:
            at = in_queue[queue] = in_queue.get(queue, 0) + 1
            out[uid] = (len(out) + 1, at)
    return out


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a cycle runs, and on again after, as it was.

    A cycle makes hundreds of thousands of objects that live until it ends (the session's jobs,
    tasks and gang trees, which refer to each other). Every few thousand new objects the collector
    would walk all the objects that survived so far, again and again: at 16,000 pending and
    16,000 running jobs that is about a third of the cycle. Paused, it does the same work once,
    between cycles. The control plane holds it for its whole cycle (rows, snapshot, engine)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_cycle(snapshot: m.ClusterSnapshot, config: m.CycleConfig | None = None,
              memo: CycleMemo | None = None) -> m.CycleResult:
    """Run fair share and the configured actions (allocate → consolidation → reclaim → preempt →
    stale-gang eviction by default) on a frozen snapshot; return every decision with reasons.

    Deterministic: same snapshot and config, same result. Bad objects are reported in
    ``result.errors`` and skipped; the rest of the cycle goes on. ``memo``: a ``CycleMemo`` the
    caller keeps from cycle to cycle (one per scheduling shard); it saves work on verdicts that
    did not change and never changes a decision (``memo.py``). Its hit and miss counts of this
    cycle are in ``result.counts["memo_hits"]`` / ``["memo_misses"]``."""
    config = config or m.CycleConfig()
    for a in config.actions:
        if a not in m.ACTIONS:
            raise ValueError(f"actions: unknown action {a!r}; known: {', '.join(m.ACTIONS)}")
    with collector_paused():
        return _run_cycle(snapshot, config, memo)


def _run_cycle(snapshot: m.ClusterSnapshot, config: m.CycleConfig, memo: CycleMemo | None) -> m.CycleResult:
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    hits0, misses0 = (memo.hits, memo.misses) if memo is not None else (0, 0)
    if memo is not None and config.shortcuts and (quiet := memo.reusable(snapshot, config)) is not None:
        quiet.counts.update(memo_hits=0, memo_misses=0, reused=1)
        quiet.timings_ms.clear()
        quiet.timings_ms["reused"] = quiet.timings_ms["total"] = (time.perf_counter() - t0) * 1000
        return quiet
    s, placer = open_session(snapshot, config, memo)
    timings["open_session"] = (time.perf_counter() - t0) * 1000
    for a in config.actions:
        t1 = time.perf_counter()
        run_action(s, placer, a)
        timings[a] = (time.perf_counter() - t1) * 1000
    t2 = time.perf_counter()
    result = close_session(s, timings)
    if memo is not None:
        result.counts["memo_hits"] = memo.hits - hits0
        result.counts["memo_misses"] = memo.misses - misses0
    if memo is not None and config.shortcuts:
        memo.keep(snapshot, config, result, s.valid_until)
        memo.keep_jobs(s.hand_over(memo.max_entries))
    else:
        s.release()
    result.timings_ms["close_session"] = (time.perf_counter() - t2) * 1000
    result.timings_ms["total"] = (time.perf_counter() - t0) * 1000
    return result
