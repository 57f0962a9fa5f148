"""KAI's consolidation action: running pods are moved to make room for a pending gang, and every
moved pod is placed again (never lost)."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core.actions.victims import (
    EPS,
    Attempt,
    Signatures,
    has_evictable,
    note_attempt,
    solve,
    trigger_jobs,
)
from scheduler_core.allocate import Placer
from scheduler_core.ordering import JobsOrder, tasks_to_allocate, within_queue_depth
from scheduler_core.session import Session
from scheduler_core.state import GPU, JobState, TaskState
from scheduler_core.statement import Statement


def _gpu_need(s: Session, tasks: list[TaskState]) -> float:
    """GPUs a batch needs, fractions and GPU memory counted as parts of a device."""
    need = 0.0
    for t in tasks:
        r = t.request
        if r.gpu_kind == m.GPU_WHOLE:
            need += r.gpus
        elif r.gpu_kind == m.GPU_FRACTION:
            need += r.gpu_fraction * r.gpu_devices
        elif r.gpu_kind == m.GPU_MEMORY:
            need += r.gpu_memory_mib / s.max_gpu_mem * r.gpu_devices
    return need

def _cluster_free_gpus(s: Session, cache: list[float] | None = None) -> float:
    """Idle and releasing GPUs of the whole cluster, plus the free part of shared devices.
    ``cache``: [node version, free] of the last computation; node usage changes only with the
    session's node version, so the figure is reused while that version stays the same."""
    if cache is not None and cache[0] == s.node_version:
        return cache[1]
    free = float((s.idle[:, GPU] + s.rel[:, GPU]).sum())
    if s.n_groups:
        for ns in s.nodes:
            if not ns.groups:
                continue
            gmem = float(s.gpu_mem[ns.index])
            for g in ns.groups.values():
                if not g.fully_releasing:
                    free += max(0.0, gmem - g.mem_active) / gmem
    if cache is not None:
        cache[:] = [s.node_version, free]
    return free

def _enough_gpus_in_cluster(s: Session, tasks: list[TaskState], cache: list[float] | None = None) -> bool:
    need = _gpu_need(s, tasks)
    if need <= 0:
        return True
    return _cluster_free_gpus(s, cache) + EPS >= need

def _consolidation_hopeless(s: Session, triggers: list[JobState], free_cache: list[float]) -> bool:
    """Whether consolidation cannot do anything for any of ``triggers``: each one's next batch
    needs more GPUs than the whole cluster has free (idle, releasing, free parts of shared
    devices). Moving pods never creates GPUs, and a job skipped by that check changes nothing
    (no statement, no note, no signature), so the cluster's free GPUs stay what they are for the
    whole action and every job in the order would be skipped in turn: the action is a no-op.
    A job with nothing to place or no GPU need defeats the shortcut (the search runs)."""
    free = _cluster_free_gpus(s, free_cache)
    ones: dict[int, float] = {}  # a batch of one pod: its need per pod shape (the shape fixes the request)
    for j in triggers:
        tasks = tasks_to_allocate(j)
        if not tasks:
            continue  # skipped by the loop without effect either
        if j.one_shape >= 0:
            need = ones.get(j.one_shape, -1.0)
            if need < 0:
                need = ones[j.one_shape] = _gpu_need(s, tasks)
        else:
            need = _gpu_need(s, tasks)
        if need <= 0 or free + EPS >= need:
            return False
    return True

def run_consolidation(s: Session, placer: Placer) -> None:
    """Move preemptible running pods (each must be re-placed) to open room for a pending job."""
    sigs = Signatures()
    triggers, _ = within_queue_depth([j for j in trigger_jobs(s) if j.preemptible],
                                     s.config.queue_depth(m.CONSOLIDATION))
    if not triggers:
        return
    free_cache: list[float] = [-1.0, 0.0]
    if s.config.shortcuts and _consolidation_hopeless(s, triggers, free_cache):
        return
    order = JobsOrder(s, triggers)
    cap = s.config.max_consolidation_preemptees
    max_jobs = None if cap < 0 else cap + 1  # KAI's check is "> max" (quirk Q6)
    while True:
        popped = order.pop()
        if popped is None:
            break
        job = popped
        tasks = tasks_to_allocate(job)
        if not tasks or sigs.skip("*", job):
            continue
        if not _enough_gpus_in_cluster(s, tasks, free_cache if s.config.shortcuts else None):
            continue
        victims = [v for v in s.jobs if v is not job and v.valid and v.preemptible and has_evictable(v)]
        if not victims:
            continue

        def validate(chunks: list[list[TaskState]], attempt: Attempt) -> bool:
            if chunks:
                attempt.verdict = "some moved pod could not be re-placed"
                return False
            return True

        stmt = Statement(s)
        attempt = solve(s, placer, stmt, job, victims, validate, max_victim_jobs=max_jobs, move_all=True)
        if attempt.ok and attempt.moved:
            delta = s.statement_delta(stmt)
            over = s.cap_problem(delta)
            if over is not None:
                stmt.discard()
                note_attempt(s, job, over)
                continue
            s.add_counts(delta)
            touched = stmt.commit()
            for t in attempt.moved:
                s.eviction_reasons[t.index] = (m.CONSOLIDATION, job.uid, m.Reason(
                    reasons.CONSOLIDATION, f"moved to node {s.nodes[t.node].name} to make room for job {job.uid}"
                    if t.node is not None else f"moved to make room for job {job.uid}", {"preemptor": job.uid}))
            for t in touched:
                if t.status == m.PIPELINED and t.index >= 0:
                    s.pipeline_actions[t.index] = m.CONSOLIDATION
            s.pending_reasons.pop(job.uid, None)
        else:
            stmt.discard()
            if attempt.ok:
                continue  # it fits without moving anything: allocate places it in a later cycle
            sigs.fail("*", job)
            note_attempt(s, job, m.Reason(reasons.CONSOLIDATION_FAILED, "consolidation: " + (attempt.verdict or
                                   "running pods cannot be moved to open room"), {}))
