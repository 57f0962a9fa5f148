"""A pending job's place in the order (``CycleResult.positions``) is the order in which the
allocate action tries the jobs: observed here by watching every attempt it makes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import allocate, run_cycle
from scheduler_core import model as m
from scheduler_core.cycle import open_session
from scheduler_core.ordering import JobsOrder
from tests.scheduler_core.engine_builders import NOW, gpu_task, node, queue
from tests.scheduler_core.test_invariants import clusters
from tests.scheduler_core.test_shortcut_properties import crowded

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PLAIN = m.CycleConfig(shortcuts=False)


def tried_order(snap: m.ClusterSnapshot, config: m.CycleConfig, monkeypatch: pytest.MonkeyPatch) -> tuple[
        list[tuple[str, str]], m.CycleResult]:
    """Run a cycle and return (job uid, queue) in the order allocate first attempted each job."""
    seen: list[tuple[str, str]] = []
    real = allocate.allocate_job

    def watched(s, placer, stmt, job, *args, **kwargs):
        if job.uid not in {u for u, _ in seen}:
            seen.append((job.uid, job.queue))
        return real(s, placer, stmt, job, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(allocate, "allocate_job", watched)
        result = run_cycle(snap, config)
    return seen, result


def expected_positions(seen: list[tuple[str, str]], pending: dict[str, m.Reason]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    per_queue: dict[str, int] = {}
    for uid, q in seen:
        if uid in pending:
            per_queue[q] = per_queue.get(q, 0) + 1
            out[uid] = (len(out) + 1, per_queue[q])
    return out


@SETTINGS
@given(st.one_of(clusters(), crowded()))
def test_every_tried_pending_job_has_the_place_allocate_tried_it_in(snap):
    with pytest.MonkeyPatch.context() as mp:
        seen, result = tried_order(snap, PLAIN, mp)
    assert result.positions == expected_positions(seen, result.pending)
    # every pending job allocate attempted has a place, and only those
    tried = {u for u, _ in seen}
    assert set(result.positions) == {u for u in result.pending if u in tried}


@SETTINGS
@given(st.one_of(clusters(), crowded()))
def test_the_shortcut_past_hopeless_jobs_keeps_their_places(snap):
    """With the shortcut, jobs certain to fail are not attempted one by one; their places are
    still those of the full walk."""
    assert run_cycle(snap).positions == run_cycle(snap, PLAIN).positions


def test_places_follow_queue_order_and_skip_jobs_placed_in_the_cycle():
    # one 4-GPU node, two queues of 2 GPUs' quota each
    nodes = (node("n0", 4),)
    queues = (queue("qa", gpu_quota=2, creation=0), queue("qb", gpu_quota=2, creation=1))
    jobs = (
        m.JobSpec("a1", "qa", (gpu_task("a1-0", 4),), priority=50, creation=NOW - 50),
        m.JobSpec("a2", "qa", (gpu_task("a2-0", 4),), priority=50, creation=NOW - 40),
        m.JobSpec("b1", "qb", (gpu_task("b1-0", 2),), priority=50, creation=NOW - 30),
        m.JobSpec("b2", "qb", (gpu_task("b2-0", 4),), priority=50, creation=NOW - 20),
    )
    result = run_cycle(m.ClusterSnapshot(nodes=nodes, queues=queues, jobs=jobs, now=NOW),
                       m.CycleConfig(actions=(m.ALLOCATE,)))
    # qb's 2-GPU job is within its quota (starved first) and is placed; it has no place any more
    assert {b.job for b in result.binds} == {"b1"}
    assert set(result.positions) == {"a1", "a2", "b2"}
    # places in the shard are 1..n without gaps; within each queue too
    shard = sorted(p for p, _ in result.positions.values())
    assert shard == list(range(1, len(result.positions) + 1))
    for q in ("qa", "qb"):
        mine = sorted(p[1] for u, p in result.positions.items() if u.startswith(q[1]))
        assert mine == list(range(1, len(mine) + 1))
    # within a queue the older job of the same priority goes first
    assert result.positions["a1"][1] == 1
    assert result.positions["a2"][1] == 2
    assert result.positions["b2"][1] == 1


def test_jobs_beyond_the_queue_depth_have_no_place():
    nodes = (node("n0", 1),)
    jobs = tuple(m.JobSpec(f"j{i}", "q", (gpu_task(f"j{i}-0", 2),), creation=NOW - 10 + i) for i in range(5))
    config = m.CycleConfig(actions=(m.ALLOCATE,), queue_depth_per_action=((m.ALLOCATE, 2),))
    result = run_cycle(m.ClusterSnapshot(nodes=nodes, queues=(queue("q", gpu_quota=1),), jobs=jobs, now=NOW), config)
    assert set(result.pending) == {f"j{i}" for i in range(5)}
    assert result.positions == {"j0": (1, 1), "j1": (2, 2)}


def test_positions_survive_the_json_form():
    nodes = (node("n0", 1),)
    jobs = tuple(m.JobSpec(f"j{i}", "q", (gpu_task(f"j{i}-0", 1),), creation=NOW - 10 + i) for i in range(3))
    result = run_cycle(m.ClusterSnapshot(nodes=nodes, queues=(queue("q", gpu_quota=1),), jobs=jobs, now=NOW))
    assert result.positions == {"j1": (1, 1), "j2": (2, 2)}
    assert m.CycleResult.from_dict(result.to_dict()).positions == result.positions


@st.composite
def backlogs(draw):
    """A random cluster and a deep backlog of jobs that are often alike (runs of the same request)."""
    snap = draw(clusters())
    leaves = sorted({q.name for q in snap.queues if q.parent is not None})
    extra = []
    for i in range(draw(st.integers(0, 30))):
        pods = draw(st.sampled_from([1, 1, 1, 2]))
        gpus = draw(st.sampled_from([1, 1, 2]))
        extra.append(m.JobSpec(f"x{i}", draw(st.sampled_from(leaves)),
                               tasks=tuple(gpu_task(f"x{i}-{p}", gpus) for p in range(pods)),
                               priority=draw(st.sampled_from([50, 100])), creation=NOW - draw(st.integers(0, 5))))
    return dataclasses.replace(snap, jobs=snap.jobs + tuple(extra))


@SETTINGS
@given(st.one_of(backlogs(), crowded()))
def test_draining_the_order_gives_the_jobs_as_popping_them_one_by_one_does(snap):
    session, _ = open_session(snap, m.CycleConfig())
    jobs = [j for j in session.jobs if j.n_pending and j.valid and j.ready()]
    popped = []
    one_by_one = JobsOrder(session, jobs, local_changes=True)
    while (job := one_by_one.pop()) is not None:
        popped.append(job.uid)
    drained = JobsOrder(session, jobs, local_changes=True).drain()
    assert [j.uid for j in drained] == popped
