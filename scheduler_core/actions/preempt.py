"""KAI's preempt action: inside one queue, a job takes from strictly lower priorities (the search:
`victims.solve`)."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core import reclaimable as rc
from scheduler_core.actions.victims import (
    EPS,
    Attempt,
    Signatures,
    commit_attempt,
    has_evictable,
    is_protected,
    min_runtime_violation,
    note_attempt,
    solve,
    trigger_jobs,
)
from scheduler_core.allocate import Placer
from scheduler_core.ordering import JobsOrder, batch_request, tasks_to_allocate, within_queue_depth
from scheduler_core.session import Session
from scheduler_core.state import JobState, TaskState
from scheduler_core.statement import Statement


def _preempt_victim(s: Session, v: JobState, minrts: dict[str, float] | None = None) -> bool:
    """Whether a job may lose pods to a same-queue preemptor of higher priority. ``minrts``: the
    queues' minimum runtimes found so far (a pure function of the queue tree)."""
    if not v.valid or not v.preemptible or not has_evictable(v):
        return False
    minrt = minrts.get(v.queue) if minrts is not None else None
    if minrt is None:
        minrt = rc.preempt_min_runtime(s.queues, v.queue, s.config.default_preempt_min_runtime_s).seconds
        if minrts is not None:
            minrts[v.queue] = minrt
    return v.is_elastic() or not is_protected(s, v, minrt)

#: ``_preempt_without_victims``: the job was skipped by a signature
SKIPPED = 1
#: ``_preempt_without_victims``: the job was done with otherwise (nothing to place, or noted)
DONE = 2


def _preempt_without_victims(s: Session, job: JobState, sigs: Signatures) -> int | None:
    """The steps of the preempt walk before its victims are listed: ``SKIPPED`` or ``DONE`` when
    the job is done with (skipped by a signature; nothing to place, or a non-preemptible job
    over its quota, which is noted); None when the victims must be looked at."""
    tasks = tasks_to_allocate(job)
    if not tasks:
        return DONE
    if sigs.skip(job.queue, job):
        return SKIPPED
    if not job.preemptible:
        req = batch_request(tasks)
        over = next((q for q in s.chain[job.queue] for r in range(3)
                     if req[r] > 0 and q.deserved[r] != m.UNLIMITED and q.allocated_np[r] + req[r] > q.deserved[r] + EPS),
                    None)
        if over is not None:
            note_attempt(s, job, m.Reason(reasons.PREEMPT_NON_PREEMPTIBLE_OVER_QUOTA,
                                   f"preempt: a non-preemptible job may only use queue {over.name}'s quota", {}))
            return DONE
    return None

def _no_victims(job: JobState) -> m.Reason:
    return m.Reason(reasons.PREEMPT_NO_VICTIMS,
                    f"preempt: no preemptible job of queue {job.queue} has a priority below {job.priority}",
                    {"priority": job.priority})


def _preempt_hopeless(s: Session, triggers: list[JobState], sigs: Signatures) -> bool:
    """Preempt's no-op proof (``memo.py``): when no pending job has a same-queue victim of lower
    priority, the walk only writes notes and records signatures, and a signature's scope is the
    job's queue. The walk visits each leaf queue's jobs in job order (the queue interleaving
    does not matter, as nothing changes), so replaying each leaf in that order gives the same
    notes. Returns False without writing anything when some job has a victim."""
    floor: dict[str, int] = {}  # per queue: the lowest priority of a possible victim
    minrts: dict[str, float] = {}
    for v in s.jobs:
        if v.priority < floor.get(v.queue, v.priority + 1) and _preempt_victim(s, v, minrts):
            floor[v.queue] = v.priority
    by_leaf: dict[str, list[JobState]] = {}
    for job in triggers:
        low = floor.get(job.queue)
        if low is not None and low < job.priority and tasks_to_allocate(job):
            return False
        jobs = by_leaf.get(job.queue)
        if jobs is None:
            jobs = by_leaf[job.queue] = []
        jobs.append(job)
    notes: dict[tuple[str, int], m.Reason] = {}  # one note object per (queue, priority)
    for leaf in sorted(by_leaf):
        # a one-pod job like the one before it (the same priority, preemptibility and pod shape,
        # so the same signature key and request), when that one was skipped by its signature or
        # failed (recording it), is skipped as well: nothing in between changed the signatures
        like: tuple[int, bool, int] | None = None
        for job in sorted(by_leaf[leaf], key=JobState.order_key):  # order keys end with the uid: distinct
            cls = (job.priority, job.preemptible, job.one_shape) if job.one_shape >= 0 and job.n_pending else None
            if cls is not None and cls == like:
                continue
            done = _preempt_without_victims(s, job, sigs)
            if done is not None:
                like = cls if done == SKIPPED else None
                continue
            why = notes.get((job.queue, job.priority))
            if why is None:
                why = notes[(job.queue, job.priority)] = _no_victims(job)
            note_attempt(s, job, why)
            sigs.fail(job.queue, job)
            like = cls
    return True

def run_preempt(s: Session, placer: Placer) -> None:
    """Same-queue eviction of strictly lower-priority preemptible jobs."""
    sigs = Signatures()
    triggers, _ = within_queue_depth(trigger_jobs(s), s.config.queue_depth(m.PREEMPT))
    if s.config.shortcuts and triggers and _preempt_hopeless(s, triggers, sigs):
        return
    order = JobsOrder(s, triggers)
    while True:
        popped = order.pop()
        if popped is None:
            break
        job = popped
        if _preempt_without_victims(s, job, sigs) is not None:
            continue
        victims = []
        for v in s.jobs:
            if v.queue != job.queue or v.priority >= job.priority or not _preempt_victim(s, v):
                continue
            victims.append(v)
        if not victims:
            note_attempt(s, job, _no_victims(job))
            sigs.fail(job.queue, job)
            continue

        def validate(chunks: list[list[TaskState]], attempt: Attempt, job: JobState = job) -> bool:
            why = min_runtime_violation(s, chunks, lambda vj: rc.preempt_min_runtime(
                s.queues, vj.queue, s.config.default_preempt_min_runtime_s).seconds)
            if why:
                attempt.verdict = why
                return False
            return True

        stmt = Statement(s)
        attempt = solve(s, placer, stmt, job, victims, validate)
        if attempt.ok:
            def reason(t: TaskState, job: JobState = job) -> m.Reason:
                return m.Reason(reasons.PREEMPT, f"preempted by higher-priority job {job.uid} (priority {job.priority} > "
                                f"{t.job.priority}) in queue {job.queue}",
                                {"queue": job.queue, "preemptor_priority": job.priority,
                                 "victim_priority": t.job.priority})
            commit_attempt(s, stmt, job, attempt, m.PREEMPT, reason)
        else:
            stmt.discard()
            note_attempt(s, job, m.Reason(reasons.PREEMPT_FAILED, "preempt: " + attempt.verdict, {}))
            sigs.fail(job.queue, job)
