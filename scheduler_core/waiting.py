"""What waits after a cycle: the queue depth per leaf queue and priority.

Read from a snapshot and the result the engine gave for it: the jobs still pending
(``CycleResult.pending``), how many GPUs their pending pods ask for, and since when the oldest of
them waits. The places of the pending jobs in the engine's order are the engine's own
(``CycleResult.positions``, recorded while allocate tries the jobs); this module only counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core import model as m


@dataclass(frozen=True, slots=True)
class Depth:
    """The pending jobs of one leaf queue at one priority."""

    queue: str
    priority: int
    jobs: int
    gpus: float  # what their pending pods ask for (whole devices, fractions as parts of one)
    oldest_submitted: float  # the submission time of the job that waits longest (epoch seconds)
    next_job: str | None  # the first of them in the engine's order (None: the cycle tried none of them)


def pending_gpus(job: m.JobSpec) -> float:
    """GPUs the pending pods of a job ask for."""
    return sum(t.request.gpu_required for t in job.tasks if t.state == m.PENDING)


def queue_depth(snapshot: m.ClusterSnapshot, result: m.CycleResult) -> list[Depth]:
    """The queue depth after a cycle, one row per (leaf queue, priority) with pending jobs,
    ordered by queue name then priority, highest first."""
    rows: dict[tuple[str, int], list[m.JobSpec]] = {}
    for job in snapshot.jobs:
        if job.uid in result.pending:
            rows.setdefault((job.queue, job.priority), []).append(job)
    out = []
    positions = result.positions
    for (queue, priority), jobs in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        placed = [j.uid for j in jobs if j.uid in positions]
        out.append(Depth(
            queue=queue, priority=priority, jobs=len(jobs), gpus=sum(pending_gpus(j) for j in jobs),
            oldest_submitted=min(j.creation for j in jobs),
            next_job=min(placed, key=lambda uid: positions[uid][0]) if placed else None,
        ))
    return out
