"""The queue depth after a cycle (``scheduler_core.waiting``)."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.waiting import queue_depth
from tests.scheduler_core.engine_builders import NOW, fraction_task, gpu_task, node, queue


def test_pending_jobs_are_counted_per_queue_and_priority_with_their_gpus_and_oldest_submission():
    nodes = (node("n0", 2),)
    queues = (queue("qa", gpu_quota=2, creation=0), queue("qb", gpu_quota=0, creation=1))
    jobs = (
        m.JobSpec("run", "qa", (gpu_task("run-0", 2, m.RUNNING, "n0"),), priority=50, creation=NOW - 500,
                  last_start=NOW - 400),
        m.JobSpec("a1", "qa", (gpu_task("a1-0", 2), gpu_task("a1-1", 2)), priority=50, creation=NOW - 300),
        m.JobSpec("a2", "qa", (gpu_task("a2-0", 1),), priority=50, creation=NOW - 100),
        m.JobSpec("a3", "qa", (gpu_task("a3-0", 1),), priority=125, creation=NOW - 50),
        m.JobSpec("b1", "qb", (fraction_task("b1-0", 0.5),), priority=50, creation=NOW - 200),
    )
    snap = m.ClusterSnapshot(nodes=nodes, queues=queues, jobs=jobs, now=NOW)
    result = run_cycle(snap, m.CycleConfig(actions=(m.ALLOCATE,)))
    assert set(result.pending) == {"a1", "a2", "a3", "b1"}
    depth = queue_depth(snap, result)
    assert [(d.queue, d.priority, d.jobs, d.gpus, d.oldest_submitted) for d in depth] == [
        ("qa", 125, 1, 1.0, NOW - 50),
        ("qa", 50, 2, 5.0, NOW - 300),
        ("qb", 50, 1, 0.5, NOW - 200),
    ]
    # the next job of each row is the first of its jobs in the engine's order
    for d in depth:
        mine = [u for u, p in sorted(result.positions.items(), key=lambda kv: kv[1][0])
                if next(j for j in jobs if j.uid == u).queue == d.queue
                and next(j for j in jobs if j.uid == u).priority == d.priority]
        assert d.next_job == mine[0]


def test_nothing_pending_gives_no_rows():
    snap = m.ClusterSnapshot(nodes=(node("n0", 2),), queues=(queue("q", gpu_quota=2),),
                             jobs=(m.JobSpec("a", "q", (gpu_task("a-0", 1),), creation=NOW - 5),), now=NOW)
    assert queue_depth(snap, run_cycle(snap)) == []
