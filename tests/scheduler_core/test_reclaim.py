"""Engine: the reclaim action."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.state import GPU
from tests.scheduler_core.engine_builders import (
    NOW,
    job,
    node,
    queue,
    reclaim_example,
    snapshot,
    status_of,
)


def test_reclaim_takes_the_newest_jobs_of_the_queue_over_its_share_on_one_node():
    result = run_cycle(reclaim_example())
    assert sorted(e.task for e in result.evictions) == ["a6-0", "a7-0"]
    assert {e.action for e in result.evictions} == {"reclaim"}
    assert {e.preemptor for e in result.evictions} == {"b"}
    assert "allocatable share 6" in result.evictions[0].reason.message
    assert status_of(result)["b-0"] == (m.PIPELINED, "n2")
    assert result.queues["qA"].fair_share[GPU] == 6
    assert result.queues["qB"].fair_share[GPU] == 2

def test_a_queue_within_its_share_is_not_reclaimed_from():
    nodes = [node("n1", 4)]
    qs = [queue("qA", gpu_quota=4), queue("qB", gpu_quota=0, creation=1)]
    jobs = [job(f"a{i}", "qA", running_on=["n1"]) for i in range(4)] + [job("b", "qB")]
    result = run_cycle(snapshot(nodes, qs, jobs))
    assert result.evictions == ()
    assert "reclaim" in result.pending["b"].message

def test_non_preemptible_jobs_are_never_victims():
    qs = [queue("q", gpu_quota=8)]
    jobs = [job("np", "q", running_on=["n1"], gpus=8, priority=60, preemptible=False, age=10),
            job("high", "q", gpus=4, priority=100, preemptible=True)]
    result = run_cycle(snapshot([node("n1", 8)], qs, jobs))
    assert result.evictions == ()
    assert status_of(result)["high-0"][0] == m.PENDING

def test_min_runtime_protects_a_victim_that_just_started():
    qs = [queue("qA", gpu_quota=0, reclaim_min_runtime_s=3600), queue("qB", gpu_quota=4, creation=1)]
    jobs = [job(f"a{i}", "qA", running_on=["n1"], age=100 - i, last_start=NOW - 60) for i in range(4)]
    jobs.append(job("b", "qB"))
    result = run_cycle(snapshot([node("n1", 4)], qs, jobs))
    assert result.evictions == ()
    assert "minimum runtime" in result.pending["b"].message

def test_without_consolidating_reclaim_victims_are_not_moved():
    # qA's job on n1 could move to n2, but without consolidating reclaim it is simply evicted
    qs = [queue("qA", gpu_quota=0), queue("qB", gpu_quota=4, creation=1)]
    jobs = [job("a", "qA", running_on=["n1"], gpus=2), job("b", "qB", gpus=4)]
    nodes = [node("n1", 4), node("n2", 2)]
    snap = snapshot(nodes, qs, jobs)
    moved = run_cycle(snap, m.CycleConfig(actions=("reclaim",)))
    assert status_of(moved)["a-0"] == (m.PIPELINED, "n2")
    plain = run_cycle(snap, m.CycleConfig(actions=("reclaim",), allow_consolidating_reclaim=False))
    assert status_of(plain)["a-0"] == (m.RELEASING, "n1")
    assert status_of(plain)["b-0"] == (m.PIPELINED, "n1")

def test_a_victim_reclaim_moves_to_another_node_is_evicted_from_its_own():
    """A moved victim leaves its node: without its eviction the cluster would keep it there, and the
    reclaimer, pipelined onto that node, would wait for it for ever."""
    qs = [queue("qA", gpu_quota=0), queue("qB", gpu_quota=4, creation=1)]
    jobs = [job("a", "qA", running_on=["n1"], gpus=2), job("b", "qB", gpus=4)]
    result = run_cycle(snapshot([node("n1", 4), node("n2", 2)], qs, jobs), m.CycleConfig(actions=("reclaim",)))
    assert [(e.task, e.node, e.action, e.preemptor) for e in result.evictions] == [("a-0", "n1", "reclaim", "b")]
    assert {(p.task, p.node, p.moved_from) for p in result.pipelined} == {("a-0", "n2", "n1"), ("b-0", "n1", None)}


def test_a_victim_queue_with_unlimited_quota_is_named_so_in_the_reason_and_the_cycle_goes_on():
    # qA's GPU quota is -1 (unlimited), so all it holds is protected: the reason says "unlimited"
    # (the cycle used to fail formatting the infinite threshold)
    qs = [queue("qA", gpu_quota=-1), queue("qB", gpu_quota=2, creation=1)]
    jobs = [job(f"a{i}", "qA", running_on=["n1"], age=100 + i) for i in range(4)] + [job("b", "qB", gpus=2)]
    result = run_cycle(snapshot([node("n1", 4)], qs, jobs))
    assert result.evictions == ()
    assert status_of(result)["b-0"][0] == m.PENDING
    assert "queue qA may give up at most 0 GPUs (holds 4, protected up to unlimited)" in result.pending["b"].message
