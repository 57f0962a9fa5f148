"""Engine: the allocate action: placement, gangs, limits, pipelining, GPU sharing, topology."""

from __future__ import annotations

import pytest

from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.state import GPU
from tests.scheduler_core.engine_builders import (
    ALLOCATE_ONLY,
    NOW,
    fraction_task,
    gpu_task,
    job,
    node,
    queue,
    snapshot,
    status_of,
)


def test_binpack_places_on_the_fullest_node_and_spread_on_the_emptiest():
    nodes = [node("a", 8), node("b", 8)]
    jobs = [job("r", "q", pods=1, gpus=6, running_on=["a"]), job("p", "q", pods=1, gpus=1)]
    snap = snapshot(nodes, [queue("q", gpu_quota=16)], jobs)
    assert status_of(run_cycle(snap, ALLOCATE_ONLY))["p-0"] == (m.BINDING, "a")
    spread = m.CycleConfig(actions=("allocate",), gpu_placement="spread")
    assert status_of(run_cycle(snap, spread))["p-0"] == (m.BINDING, "b")

def test_equal_scores_break_ties_by_node_name_in_byte_order():
    snap = snapshot([node("node2", 8), node("node10", 8)], [queue("q", gpu_quota=16)], [job("p", "q")])
    assert status_of(run_cycle(snap, ALLOCATE_ONLY))["p-0"] == (m.BINDING, "node10")

def test_a_gang_is_placed_whole_or_not_at_all_and_the_reason_gives_the_numbers():
    nodes = [node("a", 8), node("b", 8), node("c", 8)]
    jobs = [job("r", "q", pods=1, gpus=4, running_on=["c"]), job("g", "q", pods=3, gpus=8)]
    result = run_cycle(snapshot(nodes, [queue("q", gpu_quota=24)], jobs), ALLOCATE_ONLY)
    st = status_of(result)
    assert all(st[f"g-{i}"][0] == m.PENDING for i in range(3))
    assert result.binds == ()
    reason = result.pending["g"]
    assert reason.code == "no-node-fits"
    assert "gang of 3 × 8 GPUs: only 2 nodes have 8 GPUs free" in reason.message

def test_queue_limit_is_enforced_at_every_level_with_a_sentence():
    qs = [queue("dept", gpu_quota=8, gpu_limit=4), queue("team-a", "dept", gpu_quota=8)]
    jobs = [job("r", "team-a", pods=1, gpus=4, running_on=["a"]), job("p", "team-a", pods=1, gpus=1)]
    result = run_cycle(snapshot([node("a", 8)], qs, jobs), ALLOCATE_ONLY)
    assert status_of(result)["p-0"][0] == m.PENDING
    reason = result.pending["p"]
    assert reason.code == "queue-over-limit"
    assert "queue dept would exceed its GPU limit of 4 GPUs: 4 GPUs allocated + 1 GPU requested" in reason.message

def test_non_preemptible_job_stays_within_quota():
    jobs = [job("r", "q", pods=1, gpus=2, running_on=["a"], priority=125),
            job("p", "q", pods=1, gpus=1, priority=125)]
    result = run_cycle(snapshot([node("a", 8)], [queue("q", gpu_quota=2)], jobs), ALLOCATE_ONLY)
    assert status_of(result)["p-0"][0] == m.PENDING
    assert result.pending["p"].code == "non-preemptible-over-quota"

def test_a_task_that_needs_releasing_capacity_is_pipelined_not_bound():
    jobs = [m.JobSpec("old", "q", tasks=(gpu_task("old-0", 8, m.RELEASING, "a"),), creation=NOW - 10),
            job("p", "q", pods=1, gpus=4)]
    result = run_cycle(snapshot([node("a", 8)], [queue("q", gpu_quota=8)], jobs), ALLOCATE_ONLY)
    assert status_of(result)["p-0"] == (m.PIPELINED, "a")
    assert result.binds == ()

def test_a_gang_with_one_pipelined_pod_binds_none():
    jobs = [m.JobSpec("old", "q", tasks=(gpu_task("old-0", 8, m.RELEASING, "b"),), creation=NOW - 10),
            job("g", "q", pods=2, gpus=8)]
    result = run_cycle(snapshot([node("a", 8), node("b", 8)], [queue("q", gpu_quota=16)], jobs), ALLOCATE_ONLY)
    st = status_of(result)
    assert {st["g-0"][0], st["g-1"][0]} == {m.PIPELINED}
    assert result.binds == ()

def test_fractions_share_one_device_and_the_device_leaves_the_idle_pool():
    jobs = [m.JobSpec("f1", "q", tasks=(fraction_task("f1-0", 0.5),), creation=NOW - 2),
            m.JobSpec("f2", "q", tasks=(fraction_task("f2-0", 0.25),), creation=NOW - 1)]
    result = run_cycle(snapshot([node("a", 2)], [queue("q", gpu_quota=2)], jobs), ALLOCATE_ONLY)
    b = {x.task: x for x in result.binds}
    assert b["f1-0"].gpu_groups == b["f2-0"].gpu_groups
    assert b["f2-0"].gpu_portion == pytest.approx(0.25)
    assert result.nodes["a"]["idle_gpus"] == 1
    assert result.queues["q"].allocated[GPU] == pytest.approx(0.75)

def test_elastic_job_gets_its_minimum_then_grows_one_pod_at_a_time_across_queues():
    qs = [queue("q1", gpu_quota=2), queue("q2", gpu_quota=2, creation=1)]
    jobs = [job("e1", "q1", pods=4, min_available=1), job("e2", "q2", pods=4, min_available=1)]
    result = run_cycle(snapshot([node("a", 4)], qs, jobs), ALLOCATE_ONLY)
    st = status_of(result)
    bound = {q: sum(1 for i in range(4) if st[f"{q}-{i}"][0] == m.BINDING) for q in ("e1", "e2")}
    assert bound == {"e1": 2, "e2": 2}  # the round robin shares the node evenly

def test_node_affinity_and_unready_nodes_are_respected():
    t = gpu_task("p-0", 1, node_affinity=("b",))
    jobs = [m.JobSpec("p", "q", tasks=(t,))]
    result = run_cycle(snapshot([node("a", 8), node("b", 8), node("c", 8, ready=False)],
                                [queue("q", gpu_quota=8)], jobs), ALLOCATE_ONLY)
    assert status_of(result)["p-0"] == (m.BINDING, "b")
    t2 = gpu_task("u-0", 1, node_affinity=("c",))
    result = run_cycle(snapshot([node("c", 8, ready=False)], [queue("q", gpu_quota=8)],
                                [m.JobSpec("u", "q", tasks=(t2,))]), ALLOCATE_ONLY)
    assert status_of(result)["u-0"][0] == m.PENDING

def test_required_topology_keeps_a_gang_in_one_rack():
    labels = {"a1": "r1", "a2": "r1", "b1": "r2", "b2": "r2"}
    nodes = [node(n, 2, labels={"rack": r}) for n, r in labels.items()]
    topo = m.TopologySpec("t", ("rack",))
    tc = m.TopologyConstraint("t", required_level="rack")
    jobs = [job("r", "q", pods=1, gpus=2, running_on=["a1"]),  # rack r1 keeps only 2 free GPUs
            m.JobSpec("g", "q", tasks=tuple(gpu_task(f"g-{i}", 1) for i in range(3)),
                      subgroups=m.SubGroupSpec("", None, tc, (m.PodSetSpec("default", 3),)))]
    snap = m.ClusterSnapshot(nodes=tuple(nodes), queues=(queue("q", gpu_quota=8),), jobs=tuple(jobs),
                             topologies=(topo,), now=NOW)
    st = status_of(run_cycle(snap, ALLOCATE_ONLY))
    racks = {labels[st[f"g-{i}"][1]] for i in range(3)}
    assert racks == {"r2"}

def test_a_gpu_memory_request_larger_than_a_device_is_not_placed():
    snapshot = m.ClusterSnapshot(
        nodes=(m.NodeSpec("n1", cpu_millis=64000, memory_bytes=256e9, gpus=8, gpu_memory_mib=40960),),
        queues=(m.QueueSpec("q", gpu=m.QueueResource(quota=-1, limit=-1)),),
        jobs=(m.JobSpec("too-much", "q", tasks=(m.TaskSpec("t", m.TaskRequest(
            cpu_millis=100, gpu_kind=m.GPU_MEMORY, gpu_memory_mib=500_000_000)),)),
              m.JobSpec("fits", "q", tasks=(m.TaskSpec("t", m.TaskRequest(
                  cpu_millis=100, gpu_kind=m.GPU_MEMORY, gpu_memory_mib=20480)),))),
    )
    result = run_cycle(snapshot, m.CycleConfig())
    assert {b.job for b in result.binds} == {"fits"}
    assert "too-much" in result.pending

def test_a_shared_gpu_pod_that_would_open_a_group_without_a_pod_slot_for_its_reservation_says_so():
    snapshot = m.ClusterSnapshot(
        nodes=(m.NodeSpec("n1", cpu_millis=64000, memory_bytes=256e9, gpus=8, gpu_memory_mib=40960, max_pods=1),),
        queues=(m.QueueSpec("q", gpu=m.QueueResource(quota=-1, limit=-1)),),
        jobs=(m.JobSpec("half", "q", tasks=(m.TaskSpec("t", m.TaskRequest(
            cpu_millis=100, gpu_kind=m.GPU_FRACTION, gpu_fraction=0.5)),)),),
    )
    result = run_cycle(snapshot, m.CycleConfig())
    assert result.binds == ()
    assert "pod number exceeded" in result.pending["half"].message


def test_what_other_schedulers_pods_hold_on_a_node_is_not_given_again():
    # Node a: 8 GPUs, 6 held by pods another scheduler placed; b: 8 GPUs, all free.
    other = m.OtherUse(gpus=6, pods=6, cpu_millis=6000, memory_bytes=6 * 2**30)
    nodes = [node("a", 8, other_use=other), node("b", 8)]
    jobs = [job("g", "q", pods=1, gpus=4), job("s", "q", pods=2, gpus=1)]
    result = run_cycle(snapshot(nodes, [queue("q", gpu_quota=16)], jobs), ALLOCATE_ONLY)
    st = status_of(result)
    assert st["g-0"] == (m.BINDING, "b")  # 4 GPUs fit only on b
    # binpack puts the one-GPU pods on the fuller node: a has exactly 2 left, then no more
    assert sorted(st[f"s-{i}"] for i in range(2)) == [(m.BINDING, "a"), (m.BINDING, "a")]


def test_a_node_other_pods_overfill_takes_nothing_even_cpu_only():
    other = m.OtherUse(cpu_millis=70000, pods=3)  # more CPU than the node has
    snap = snapshot([node("a", 8, cpu=64000, other_use=other)], [queue("q", gpu_quota=8)],
                    [job("p", "q", pods=1, gpus=1)])
    result = run_cycle(snap, ALLOCATE_ONLY)
    assert status_of(result)["p-0"][0] == m.PENDING
    assert result.binds == ()


def test_other_pods_use_a_nodes_mig_slices_and_extended_resources():
    n = node("a", 0, mig_instances={"mig-1g.10gb": 2}, extended={"example.com/nic": 1},
             other_use=m.OtherUse(mig_instances={"mig-1g.10gb": 2}, extended={"example.com/nic": 1}))
    mig = m.TaskSpec("p-0", m.TaskRequest(cpu_millis=100, gpu_kind=m.GPU_MIG, mig={"mig-1g.10gb": 1}))
    nic = m.TaskSpec("c-0", m.TaskRequest(cpu_millis=100, extended={"example.com/nic": 1}))
    snap = snapshot([n], [queue("q", gpu_quota=8)], [job("p", "q", tasks=[mig]), job("c", "q", tasks=[nic])])
    st = status_of(run_cycle(snap, ALLOCATE_ONLY))
    assert st["p-0"][0] == m.PENDING
    assert st["c-0"][0] == m.PENDING
    # without the other pods both fit: the test sees the charge, not a node that cannot host them
    free = snapshot([node("a", 0, mig_instances={"mig-1g.10gb": 2}, extended={"example.com/nic": 1})],
                    [queue("q", gpu_quota=8)], [job("p", "q", tasks=[mig]), job("c", "q", tasks=[nic])])
    st = status_of(run_cycle(free, ALLOCATE_ONLY))
    assert st["p-0"][0] == m.BINDING
    assert st["c-0"][0] == m.BINDING
