"""Victim search shortcuts: when the node-local pass may be skipped, and the kept victim order."""

from __future__ import annotations

from scheduler_core import model as m
from scheduler_core.actions.victims import VictimOrder, _local_hopeless, victim_entry
from scheduler_core.cycle import open_session, run_cycle
from tests.scheduler_core.engine_builders import job, node, queue, snapshot


def _session(jobs):
    nodes = [node(f"n{i}", 8) for i in range(3)]
    qs = [queue("a", gpu_quota=0), queue("b", gpu_quota=24)]
    s, _ = open_session(snapshot(nodes, qs, jobs), m.CycleConfig())
    return s


def test_node_local_pass_is_skipped_only_when_no_node_could_free_enough():
    s = _session([job(f"a{i}", "a", gpus=4, running_on=[f"n{i % 3}"]) for i in range(6)])
    victims = list(s.jobs)
    # each node holds 8 GPUs of victims: a 16-GPU demand can never come from one node
    assert _local_hopeless(s, victims, 0.0, 16.0)
    # 8 GPUs could come from one node's victims
    assert not _local_hopeless(s, victims, 0.0, 8.0)
    # free GPUs elsewhere count towards every node-local scenario
    assert not _local_hopeless(s, victims, 9.0, 16.0)


def test_node_local_pass_is_kept_when_a_victim_spans_nodes():
    s = _session([job("wide", "a", pods=2, gpus=8, running_on=["n0", "n1"])])
    assert not _local_hopeless(s, list(s.jobs), 0.0, 16.0)


def test_a_kept_victim_order_gives_the_chunks_of_a_fresh_one():
    s = _session([job(f"a{i}", "a", gpus=2, age=i, running_on=[f"n{i % 3}"]) for i in range(9)])
    fresh = [(v.job.uid, [t.name for t in c]) for v, c in VictimOrder(s, list(s.jobs))]
    heaps: dict = {}
    for j in s.jobs:
        e = victim_entry(s, j)
        heaps.setdefault(j.queue, []).append(e)
    for h in heaps.values():
        h.sort()
    kept = [(v.job.uid, [t.name for t in c]) for v, c in VictimOrder(s, list(s.jobs), heaps)]
    assert kept == fresh
    assert len(fresh) == 9
    # the newest job (smallest age) is the first victim
    assert fresh[0][0] == "a0"


def test_a_gang_reclaims_across_nodes_after_the_node_local_pass_is_skipped():
    jobs = [job(f"a{i}", "a", gpus=1, running_on=[f"n{i // 8}"], age=100 + i) for i in range(24)]
    jobs.append(job("g", "b", pods=2, gpus=8, priority=50))
    result = run_cycle(snapshot([node(f"n{i}", 8) for i in range(3)],
                                [queue("a", gpu_quota=0), queue("b", gpu_quota=24)], jobs),
                       m.CycleConfig(actions=("allocate", "reclaim")))
    assert len(result.evictions) == 16
    assert sorted(p.task for p in result.pipelined) == ["g-0", "g-1"]
    evicted_nodes = {e.node for e in result.evictions}
    assert len(evicted_nodes) == 2
