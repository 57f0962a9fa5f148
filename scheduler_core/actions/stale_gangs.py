"""KAI's stale-gang eviction: a gang below its minimum for longer than its grace is evicted whole."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core.allocate import Placer
from scheduler_core.session import Session
from scheduler_core.state import JobState
from scheduler_core.statement import Statement
from scheduler_core.units import number


def is_stale(job: JobState) -> bool:
    """No finished pod, some pod holding resources, and a pod set below its minimum (by active use)."""
    # the three conditions are independent; the two per pod set (cheapest) are checked first
    used = below = False
    for ps in job.pod_sets.values():
        used = used or ps.active_used > 0
        below = below or ps.active_used < ps.min_available
    if not (used and below):
        return False
    return not any(t.status == m.SUCCEEDED for t in job.tasks)

def run_stale_gangs(s: Session, placer: Placer) -> None:
    """Evict every active pod of a job that has been below its gang minimum past its grace period."""
    for job in s.jobs:
        if not job.valid and job.queue not in s.queues:
            continue
        # a change of the job's staleness is a change of its state (``JobState.version``)
        if not is_stale(job):
            if job.stale_since is not None:
                job.stale_since = None
                job.version += 1
            continue
        if job.stale_since is None:
            job.stale_since = s.now
            job.version += 1
            s.reads_clock()  # the result reports when the job became stale
        grace = job.spec.staleness_grace_s
        if grace is None:
            grace = s.config.default_staleness_grace_s
        if grace < 0 or s.before(job.stale_since + grace):
            continue
        s.reads_clock()  # the eviction's reason says for how long the job has been stale
        stmt = Statement(s)
        victims = [t for t in job.tasks if t.status in m.ACTIVE_ALLOCATED_STATES]
        short = [f"{ps.name}: {ps.active_used} of {ps.min_available}" for ps in job.pod_sets.values()
                 if ps.active_used < ps.min_available]
        for t in victims:
            stmt.evict(t)
        delta = s.statement_delta(stmt)
        over = s.cap_problem(delta)
        if over is not None:
            stmt.discard()
            continue
        s.add_counts(delta)
        for t in victims:
            s.eviction_reasons[t.index] = (m.STALE_GANG_EVICTION, None, m.Reason(
                reasons.STALE_GANG, f"job {job.uid} has been below its gang minimum ({', '.join(short)}) for "
                f"{number(s.now - job.stale_since)}s, longer than its grace period of {number(grace)}s",
                {"stale_for_s": s.now - job.stale_since, "grace_s": grace}))
        stmt.commit()
