"""Engine mechanisms one by one: model, allocate, GPU sharing, explanations, bad input, evictions."""

from __future__ import annotations

import json

import pytest

from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.cycle import open_session
from scheduler_core.session import GPU, Statement
from tests.scheduler_core.engine_builders import (
    NOW,
    fraction_task,
    gpu_task,
    job,
    node,
    queue,
    snapshot,
    status_of,
)

ALLOCATE_ONLY = m.CycleConfig(actions=("allocate",))


# ---- model ------------------------------------------------------------------------------------


def test_snapshot_and_result_round_trip_through_json():
    snap = snapshot([node("n1", 4, labels={"zone": "a"})], [queue("q", gpu_quota=2)],
                    [job("j", "q", pods=2), job("r", "q", running_on=["n1"])])
    again = m.ClusterSnapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert again == snap
    result = run_cycle(snap)
    assert m.CycleResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_from_dict_names_the_bad_field():
    data = snapshot([node("n1")], [], []).to_dict()
    data["nodes"][0]["gpus"] = "eight"
    with pytest.raises(ValueError, match=r"nodes\[0\]\.gpus: expected an integer"):
        m.ClusterSnapshot.from_dict(data)
    data = snapshot([node("n1")], [], []).to_dict()
    data["nodes"][0]["colour"] = "red"
    with pytest.raises(ValueError, match="unknown field"):
        m.ClusterSnapshot.from_dict(data)


@pytest.mark.parametrize(("name", "explicit", "expected"), [
    ("train", None, (50, True)),
    ("build-preemptible", None, (75, True)),
    ("build", None, (100, False)),
    ("inference", None, (125, False)),
    ("inference", "preemptible", (125, True)),
    ("train", "non-preemptible", (50, False)),
    (None, None, (50, True)),
    ("no-such-class", None, (50, True)),
])
def test_priority_classes_resolve_like_kai(name, explicit, expected):
    assert m.resolve_priority(name, None, explicit) == expected


def test_unknown_preemptibility_is_refused_with_the_field_name():
    with pytest.raises(ValueError, match="preemptibility"):
        m.resolve_priority("train", None, "sometimes")


# ---- allocate -----------------------------------------------------------------------------------


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


# ---- bad input ------------------------------------------------------------------------------


def test_bad_objects_are_reported_on_the_object_and_the_rest_is_scheduled():
    qs = [queue("q", gpu_quota=8), queue("orphan", "missing-parent"), queue("parent"), queue("leaf", "parent")]
    bad_fraction = m.JobSpec("frac", "q", tasks=(fraction_task("frac-0", 1.5),))
    negative = m.JobSpec("neg", "q", tasks=(m.TaskSpec("neg-0", m.TaskRequest(cpu_millis=-5)),))
    jobs = [bad_fraction, negative, job("on-orphan", "orphan"), job("on-parent", "parent"),
            job("nowhere", "no-such-queue"), job("good", "q")]
    result = run_cycle(snapshot([node("a", 8)], qs, jobs))
    errors = {(e.kind, e.name): e for e in result.errors}
    assert "parent queue 'missing-parent' does not exist" in errors[("queue", "orphan")].message
    assert errors[("job", "frac")].field == "tasks.request.gpu_fraction"
    assert errors[("job", "neg")].field == "tasks.request"
    assert "not usable" in errors[("job", "on-orphan")].message
    assert "has child queues" in errors[("job", "on-parent")].message
    assert "does not exist" in errors[("job", "nowhere")].message
    assert status_of(result)["good-0"][0] == m.BINDING
    assert result.pending["frac"].code == "invalid"


def test_the_same_snapshot_gives_the_same_result():
    nodes = [node(f"n{i}", 8) for i in range(6)]
    qs = [queue("a", gpu_quota=20), queue("b", gpu_quota=20, creation=1)]
    jobs = [job(f"j{i}", "ab"[i % 2], pods=1 + i % 3, gpus=1 + i % 4, age=i) for i in range(30)]
    snap = snapshot(nodes, qs, jobs)
    r1, r2 = run_cycle(snap), run_cycle(snap)
    assert r1.binds == r2.binds
    assert r1.pipelined == r2.pipelined
    assert r1.evictions == r2.evictions
    assert r1.pending == r2.pending


def test_run_cycle_refuses_an_unknown_action():
    with pytest.raises(ValueError, match="unknown action"):
        run_cycle(snapshot([], [], []), m.CycleConfig(actions=("allocate", "teleport")))


# ---- statement --------------------------------------------------------------------------------


def test_statement_rollback_restores_nodes_queues_and_tasks_exactly():
    jobs = [job("r", "q", pods=2, gpus=2, running_on=["a", "a"]), job("p", "q", pods=1, gpus=2)]
    s, _ = open_session(snapshot([node("a", 8)], [queue("q", gpu_quota=8)], jobs), m.CycleConfig())
    idle, rel = s.idle.copy(), s.rel.copy()
    alloc = list(s.queues["q"].allocated)
    stmt = Statement(s)
    r0 = s.jobs[0].tasks[0]
    p0 = s.jobs[1].tasks[0]
    stmt.evict(r0)
    assert s.queues["q"].allocated[GPU] == alloc[GPU] - 2  # releasing pods stop counting
    stmt.move(p0, m.PIPELINED, 0)
    assert s.rel[0, GPU] == 0  # 2 released, 2 taken by the pipelined task
    assert s.queues["q"].allocated[GPU] == alloc[GPU]  # a pod pipelined in-session counts
    stmt.discard()
    assert (s.idle == idle).all()
    assert (s.rel == rel).all()
    assert s.queues["q"].allocated == alloc
    assert (r0.status, p0.status) == (m.RUNNING, m.PENDING)


# ---- evictions --------------------------------------------------------------------------------


def _reclaim_example():
    nodes = [node("n1", 4), node("n2", 4)]
    qs = [queue("qA", gpu_quota=2), queue("qB", gpu_quota=2, creation=1)]
    jobs = [job(f"a{i}", "qA", running_on=["n1" if i < 4 else "n2"], age=100 - i) for i in range(8)]
    jobs += [job(f"ap{i}", "qA", age=50 - i) for i in range(4)]
    jobs.append(job("b", "qB", pods=1, gpus=2))
    return snapshot(nodes, qs, jobs)


def test_reclaim_takes_the_newest_jobs_of_the_queue_over_its_share_on_one_node():
    result = run_cycle(_reclaim_example())
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


def test_preempt_evicts_only_lower_priority_jobs_of_the_same_queue():
    qs = [queue("q", gpu_quota=8), queue("other", gpu_quota=0, creation=1)]
    jobs = [job("low", "q", running_on=["n1"], gpus=4, priority=50, age=10),
            job("equal", "q", running_on=["n1"], gpus=2, priority=100, preemptible=True, age=10),
            job("foreign", "other", running_on=["n1"], gpus=2, priority=10, age=10),
            job("high", "q", gpus=4, priority=100, preemptible=True)]
    result = run_cycle(snapshot([node("n1", 8)], qs, jobs), m.CycleConfig(actions=("allocate", "preempt")))
    assert [e.task for e in result.evictions] == ["low-0"]
    assert result.evictions[0].action == "preempt"
    assert status_of(result)["high-0"] == (m.PIPELINED, "n1")


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


def test_preemption_delay_stops_a_new_job_from_evicting():
    qs = [queue("q", gpu_quota=8)]
    jobs = [job("low", "q", running_on=["n1"], gpus=8, priority=50, age=10),
            job("high", "q", gpus=8, priority=100, preemptible=True, preemption_delay_s=300)]
    result = run_cycle(snapshot([node("n1", 8)], qs, jobs))
    assert result.evictions == ()
    assert "preemption delay" in result.pending["high"].message


def test_consolidation_moves_a_pod_to_open_a_whole_node():
    qs = [queue("q", gpu_quota=16)]
    jobs = [job("small", "q", running_on=["a"], gpus=2, age=10), job("filler", "q", running_on=["b"], gpus=4, age=10),
            job("big", "q", gpus=8)]
    result = run_cycle(snapshot([node("a", 8), node("b", 8)], qs, jobs))
    st = status_of(result)
    assert st["small-0"] == (m.PIPELINED, "b")
    assert st["big-0"] == (m.PIPELINED, "a")
    moved = [p for p in result.pipelined if p.task == "small-0"]
    assert moved[0].moved_from == "a"
    assert [e.action for e in result.evictions] == ["consolidation"]


def test_stale_gang_is_evicted_after_its_grace_period_only():
    def snap(stale_for: float) -> m.ClusterSnapshot:
        tasks = (gpu_task("g-0", 1, m.RUNNING, "a"), gpu_task("g-1", 1, m.FAILED, "a"))
        return snapshot([node("a", 8)], [queue("q", gpu_quota=8)],
                        [m.JobSpec("g", "q", tasks=tasks, stale_since=NOW - stale_for, priority=125,
                                   preemptible=False)])
    cfg = m.CycleConfig(default_staleness_grace_s=60)
    assert run_cycle(snap(10), cfg).evictions == ()
    result = run_cycle(snap(120), cfg)
    assert [(e.task, e.action) for e in result.evictions] == [("g-0", "stalegangeviction")]
    assert "grace period of 60s" in result.evictions[0].reason.message


def test_session_caps_stop_binds_and_evictions_with_a_reason():
    jobs = [job(f"p{i}", "q", age=10 - i) for i in range(4)]
    result = run_cycle(snapshot([node("a", 8)], [queue("q", gpu_quota=8)], jobs), m.CycleConfig(max_binds=2))
    assert len(result.binds) == 2
    assert result.pending["p2"].code == "session-cap"
    assert "cap of 2 binds" in result.pending["p2"].message
    capped = run_cycle(_reclaim_example(), m.CycleConfig(max_evictions=1))
    assert capped.evictions == ()
    assert "cap of 1 evictions" in capped.pending["b"].message


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
