"""The fair-share division of a snapshot (`fair_share`): what it divides, and that `divide` gives the
fair shares the cycle records, whatever the snapshot."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.fair_share import capacity, divide, queue_attrs
from scheduler_core.proportion import usage_adjusted_share, usage_adjusted_weights
from tests.scheduler_core.engine_builders import GIB, job, node, queue, snapshot


def test_capacity_counts_ready_uncordoned_nodes_with_their_mig_slices():
    nodes = [
        node("a", gpus=8),
        node("cordoned", gpus=8, unschedulable=True),
        node("down", gpus=8, ready=False),
        node("mig", gpus=0, mig_instances={"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 1}),
    ]
    cpu, memory, gpus = capacity(nodes)
    assert gpus == 8 + 3 * 2 + 1
    assert cpu == 2 * 64000
    assert memory == 2 * 512 * GIB
    assert capacity(nodes, (1.0, 2.0, 3.0)) == [1.0, 2.0, 3.0]


def test_queue_attrs_reads_unlimited_and_negative_weights_as_kai_does():
    q = m.QueueSpec(name="q", parent=None, gpu=m.QueueResource(2, 4, -1), cpu=m.QueueResource(-1, -1, 3),
                    memory=m.QueueResource(0, -1, -5))
    attrs = queue_attrs(q, (0.1, 0.2, 0.3))
    assert attrs.deserved == [-1.0, 0.0, 2.0]
    assert attrs.limit == [-1.0, -1.0, 4.0]
    assert attrs.weight == [3.0, 0.0, 1.0]
    assert attrs.usage == [0.1, 0.2, 0.3]


def test_usage_lowers_the_weight_of_a_queue_that_used_more_than_its_share():
    a = queue_attrs(queue("a", weight=1), (0.0, 0.0, 0.9))
    b = queue_attrs(queue("b", weight=1), (0.0, 0.0, 0.1))
    weights = usage_adjusted_weights([a, b], 2, k=1.0)
    assert weights["a"][0] == weights["b"][0] == 0.5
    assert weights["a"][1] < 0.5 < weights["b"][1]
    assert weights["a"][1] == usage_adjusted_share(0.5, 1.0, 0.9)
    assert usage_adjusted_weights([a, b], 2, k=0.0) == {"a": (0.5, 0.5), "b": (0.5, 0.5)}
    assert usage_adjusted_weights([queue_attrs(queue("z", weight=0))], 2, k=1.0) == {}


@st.composite
def snapshots(draw):
    nodes = [node(f"n{i}", gpus=draw(st.integers(0, 8)), unschedulable=draw(st.booleans()),
                  ready=draw(st.booleans()))
             for i in range(draw(st.integers(1, 4)))]
    leaves = ["a", "b", "c"]
    queues = [queue("root", gpu_quota=-1)]
    for name in leaves:
        quota = draw(st.sampled_from([0, 1, 2, 4]))
        queues.append(queue(name, parent="root", gpu_quota=quota,
                            gpu_limit=draw(st.sampled_from([-1, max(quota, 6)])),
                            weight=draw(st.sampled_from([0, 1, 2])), priority=draw(st.sampled_from([100, 200]))))
    usage = {name: (0.0, 0.0, draw(st.floats(0, 1))) for name in leaves if draw(st.booleans())}
    jobs = []
    for i in range(draw(st.integers(0, 6))):
        placed = draw(st.booleans())
        where = [n.name for n in nodes if n.gpus >= 2 and n.ready][:1] if placed else None
        jobs.append(job(f"j{i}", draw(st.sampled_from(leaves)), pods=1, gpus=draw(st.sampled_from([1, 2])),
                        running_on=where or None))
    return snapshot(nodes, queues, jobs, usage=usage)


@settings(max_examples=60, deadline=None)
@given(snap=snapshots(), k=st.sampled_from([0.0, 1.0, 2.0]))
def test_divide_gives_the_fair_shares_the_cycle_records(snap, k):
    config = m.CycleConfig(k_value=k)
    division = divide(snap, config)
    result = run_cycle(snap, config)
    assert division.errors == []
    assert {name: tuple(q.fair) for name, q in division.queues.items()} == {
        name: st_.fair_share for name, st_ in result.queues.items()}
    assert {name: tuple(q.request) for name, q in division.queues.items()} == {
        name: st_.request for name, st_ in result.queues.items()}
