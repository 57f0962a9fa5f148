"""Placement predicates: taints and tolerations, node selector and affinity, cordon, MIG, extended
resources, pod count, host ports, pod (anti-)affinity; reasons in KAI's words, counted per node."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core import predicates as pr
from scheduler_core import run_cycle
from scheduler_core.cycle import open_session
from tests.scheduler_core.engine_builders import (
    ALLOCATE_ONLY,
    GIB,
    gpu_task,
    job,
    node,
    queue,
    snapshot,
    status_of,
)

Q = [queue("q", gpu_quota=64)]


def req(key: str, op: str, *values: str) -> m.NodeSelectorRequirement:
    return m.NodeSelectorRequirement(key, op, tuple(values))


def term(*exprs: m.NodeSelectorRequirement, fields: tuple[m.NodeSelectorRequirement, ...] = ()) -> m.NodeSelectorTerm:
    return m.NodeSelectorTerm(match_expressions=tuple(exprs), match_fields=fields)


def one_pod(name: str = "p", gpus: float = 1, **kw) -> m.JobSpec:
    return job(name, "q", tasks=[gpu_task(f"{name}-0", gpus, **kw)])


def run(nodes: list[m.NodeSpec], jobs: list[m.JobSpec], config: m.CycleConfig = ALLOCATE_ONLY) -> m.CycleResult:
    return run_cycle(snapshot(nodes, Q, jobs), config)


# ---- taints and tolerations -------------------------------------------------------------------

TAINT = m.Taint("dedicated", "infer", "NoSchedule")


@pytest.mark.parametrize(("tol", "taint", "expected"), [
    (m.Toleration("dedicated", "Equal", "infer", "NoSchedule"), TAINT, True),
    (m.Toleration("dedicated", "Equal", "train", "NoSchedule"), TAINT, False),
    (m.Toleration("dedicated", "Exists", "", "NoSchedule"), TAINT, True),
    (m.Toleration("dedicated", "Equal", "infer", ""), TAINT, True),  # empty effect matches all
    (m.Toleration("dedicated", "Equal", "infer", "NoExecute"), TAINT, False),
    (m.Toleration("", "Exists"), TAINT, True),  # empty key with Exists tolerates everything
    (m.Toleration("", "Equal", "infer"), TAINT, False),  # empty key needs Exists
    (m.Toleration("other", "Exists"), TAINT, False),
])
def test_toleration_matching_follows_kubernetes(tol, taint, expected):
    assert pr.tolerates(tol, taint) is expected


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_untolerated_taint_keeps_a_pod_off_with_kais_reason(effect):
    tainted = node("a", 8, taints=(m.Taint("dedicated", "infer", effect),))
    result = run([tainted], [one_pod()])
    assert status_of(result)["p-0"] == (m.PENDING, None)
    reason = result.pending["p"]
    assert reason.code == "no-node-matches"
    assert reason.message == "task p-0: 0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}."


def test_tolerated_taint_lets_the_pod_on():
    tainted = node("a", 8, taints=(TAINT,))
    tol = (m.Toleration("dedicated", "Equal", "infer", "NoSchedule"),)
    assert status_of(run([tainted], [one_pod(tolerations=tol)]))["p-0"] == (m.BINDING, "a")


def test_prefer_no_schedule_does_not_block():
    soft = node("a", 8, taints=(m.Taint("spot", "", "PreferNoSchedule"),))
    assert status_of(run([soft], [one_pod()]))["p-0"] == (m.BINDING, "a")


def test_every_taint_must_be_tolerated():
    both = node("a", 8, taints=(TAINT, m.Taint("gpu", "h100", "NoSchedule")))
    tol = (m.Toleration("dedicated", "Exists"),)
    result = run([both], [one_pod(tolerations=tol)])
    assert "1 node(s) had untolerated taint {gpu: h100}" in result.pending["p"].message


# ---- node selector and node affinity --------------------------------------------------------


@pytest.mark.parametrize(("requirement", "value", "expected"), [
    (req("zone", "In", "a", "b"), "a", True),
    (req("zone", "In", "a"), None, False),
    (req("zone", "NotIn", "a"), "b", True),
    (req("zone", "NotIn", "a"), None, True),
    (req("zone", "Exists"), "", True),
    (req("zone", "Exists"), None, False),
    (req("zone", "DoesNotExist"), None, True),
    (req("gen", "Gt", "3"), "4", True),
    (req("gen", "Gt", "4"), "4", False),
    (req("gen", "Lt", "4"), "3", True),
    (req("gen", "Lt", "4"), "x", False),  # not an integer: no match
])
def test_selector_operators(requirement, value, expected):
    assert pr.requirement_matches(requirement, value) is expected


def test_required_node_affinity_is_an_or_of_terms_each_an_and():
    nodes = [node("a", 8, labels={"zone": "a", "gen": "3"}), node("b", 8, labels={"zone": "b", "gen": "5"}),
             node("c", 8, labels={"zone": "c", "gen": "5"})]
    terms = (term(req("zone", "In", "a"), req("gen", "Gt", "4")),  # matches none
             term(req("zone", "In", "b", "c"), req("gen", "Gt", "4")),  # b and c
             term(fields=(req("metadata.name", "In", "a"),)))  # a by name
    snap = snapshot(nodes, Q, [one_pod(required_node_affinity=terms)])
    s, placer = open_session(snap, ALLOCATE_ONLY)
    assert placer._static_mask(s.tasks[0]).tolist() == [True, True, True]
    only_b = (term(req("zone", "In", "b"), req("gen", "Gt", "4")),)
    result = run(nodes, [one_pod(required_node_affinity=only_b, gpus=1)])
    assert status_of(result)["p-0"] == (m.BINDING, "b")


def test_an_empty_term_matches_no_node():
    result = run([node("a")], [one_pod(required_node_affinity=(m.NodeSelectorTerm(),))])
    assert result.pending["p"].message == "task p-0: 0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."


def test_fit_error_counts_nodes_per_reason_sorted_as_kai():
    nodes = [node("a", 8, labels={"pool": "x"}, taints=(TAINT,)), node("b", 8, labels={"pool": "y"}),
             node("c", 8, labels={"pool": "x"}), node("d", 8, labels={"pool": "x"})]
    blockers = [job(f"r{i}", "q", running_on=[n], gpus=8) for i, n in enumerate(["c", "d"])]
    result = run(nodes, [*blockers, one_pod(node_selector={"pool": "x"}, gpus=2)])
    reason = result.pending["p"]
    assert reason.code == "no-node-fits"
    assert reason.message == ("task p-0: 0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                              "1 node(s) had untolerated taint {dedicated: infer}, "
                              "2 node(s) didn't have enough resources: GPUs.")
    assert reason.details["nodes"] == {"node(s) didn't have enough resources: GPUs": 2,
                                       "node(s) didn't match Pod's node affinity/selector": 1,
                                       "node(s) had untolerated taint {dedicated: infer}": 1}


def test_preferred_node_affinity_beats_bin_packing_but_not_availability():
    # binpack alone picks the fuller node "a"; the preference sends the pod to "b"
    nodes = [node("a", 8, labels={"disk": "hdd"}), node("b", 8, labels={"disk": "ssd"})]
    running = job("r", "q", running_on=["a"], gpus=4)
    prefer_ssd = (m.PreferredSchedulingTerm(50, term(req("disk", "In", "ssd"))),)
    assert status_of(run(nodes, [running, one_pod()]))["p-0"] == (m.BINDING, "a")
    assert status_of(run(nodes, [running, one_pod(preferred_node_affinity=prefer_ssd)]))["p-0"] == (m.BINDING, "b")
    # a preferred node that is full does not keep the pod from another node
    full = job("f", "q", running_on=["b"], gpus=8)
    assert status_of(run(nodes, [full, one_pod(preferred_node_affinity=prefer_ssd)]))["p-0"] == (m.BINDING, "a")


# ---- cordon, readiness ------------------------------------------------------------------------


def test_cordoned_node_keeps_running_pods_and_takes_no_new_ones():
    nodes = [node("a", 8, unschedulable=True)]
    result = run(nodes, [job("r", "q", running_on=["a"]), one_pod()])
    assert status_of(result)["r-0"] == (m.RUNNING, "a")
    assert result.pending["p"].message == "task p-0: 0/1 nodes are available: 1 node(s) were unschedulable."
    tol = (m.Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),)
    assert status_of(run(nodes, [one_pod(tolerations=tol)]))["p-0"] == (m.BINDING, "a")


def test_cordoned_node_is_not_part_of_the_fair_share_capacity():
    s, _ = open_session(snapshot([node("a", 8, unschedulable=True), node("b", 4)], Q, []), ALLOCATE_ONLY)
    assert s.total[2] == 4


def test_predicates_off_lets_the_pod_onto_a_tainted_node():
    cfg = m.CycleConfig(actions=("allocate",), predicates=False)
    assert status_of(run([node("a", 8, taints=(TAINT,))], [one_pod()], cfg))["p-0"] == (m.BINDING, "a")


# ---- resources: MIG, extended, pods per node ---------------------------------------------------


def mig_pod(name: str = "p", profile: str = "nvidia.com/mig-1g.10gb") -> m.JobSpec:
    r = m.TaskRequest(cpu_millis=100, memory_bytes=GIB, gpu_kind=m.GPU_MIG, mig={profile: 1})
    return job(name, "q", tasks=[m.TaskSpec(f"{name}-0", r)])


def test_mig_pod_only_goes_to_a_node_offering_the_profile():
    plain = node("a", 8)
    result = run([plain], [mig_pod()])
    assert result.pending["p"].message == (
        "task p-0: 0/1 nodes are available: 1 node(s) didn't have enough of mig profile: nvidia.com/mig-1g.10gb.")
    other = node("b", 0, mig_strategy="mixed", mig_instances={"nvidia.com/mig-3g.40gb": 2})
    assert "didn't have enough of mig profile: nvidia.com/mig-1g.10gb" in run([other], [mig_pod()]).pending["p"].message
    good = node("c", 0, mig_strategy="mixed", mig_instances={"nvidia.com/mig-1g.10gb": 1})
    assert status_of(run([plain, good], [mig_pod()]))["p-0"] == (m.BINDING, "c")


def ext_pod(name: str, amount: float = 1) -> m.JobSpec:
    r = m.TaskRequest(cpu_millis=100, memory_bytes=GIB, extended={"example.com/nic": amount})
    return job(name, "q", tasks=[m.TaskSpec(f"{name}-0", r)])


def test_extended_resources_are_counted_per_node():
    nodes = [node("a", 0, extended={"example.com/nic": 1}), node("b", 0)]
    result = run(nodes, [ext_pod("p1"), ext_pod("p2")])
    placed = status_of(result)
    assert placed["p1-0"] == (m.BINDING, "a")
    assert placed["p2-0"] == (m.PENDING, None)
    assert result.pending["p2"].message == ("task p2-0: 0/2 nodes are available: "
                                            "2 node(s) didn't have enough resources: example.com/nic.")


def test_running_pods_use_up_extended_resources():
    nodes = [node("a", 0, extended={"example.com/nic": 2})]
    r = m.TaskRequest(cpu_millis=100, memory_bytes=GIB, extended={"example.com/nic": 2})
    running = job("r", "q", tasks=[m.TaskSpec("r-0", r, state=m.RUNNING, node="a")])
    assert status_of(run(nodes, [running, ext_pod("p")]))["p-0"] == (m.PENDING, None)


def test_max_pods_per_node_is_enforced_with_kais_reason():
    nodes = [node("a", 8, max_pods=1), node("b", 8, taints=(TAINT,))]
    result = run(nodes, [job("r", "q", running_on=["a"]), one_pod()])
    assert result.pending["p"].message == ("task p-0: 0/2 nodes are available: 1 node(s) had untolerated taint "
                                           "{dedicated: infer}, 1 node(s) pod number exceeded.")


# ---- host ports --------------------------------------------------------------------------------


def test_host_ports_clash_on_one_node():
    assert pr.ports_conflict(("TCP/8080",), ("TCP/8080/10.0.0.1",))
    assert not pr.ports_conflict(("TCP/8080/10.0.0.2",), ("TCP/8080/10.0.0.1",))
    assert not pr.ports_conflict(("UDP/8080",), ("TCP/8080",))
    nodes = [node("a", 8), node("b", 8)]
    gang = job("g", "q", tasks=[gpu_task(f"g-{i}", 1, host_ports=("TCP/8080",)) for i in range(3)])
    result = run(nodes, [gang])
    assert result.pending["g"].message == ("task g-2 of a batch of 3 pods: 0/2 nodes are available: "
                                           "2 node(s) didn't have free ports for the requested pod ports.")
    two = job("g", "q", tasks=[gpu_task(f"g-{i}", 1, host_ports=("TCP/8080",)) for i in range(2)])
    assert sorted(n for _, n in status_of(run(nodes, [two])).values()) == ["a", "b"]


# ---- pod affinity --------------------------------------------------------------------------------

ZONE = "topology.kubernetes.io/zone"
DB = (("app", "db"),)


def test_required_pod_affinity_follows_the_selected_pods_domain():
    nodes = [node("a", 8, labels={ZONE: "east"}), node("b", 8, labels={ZONE: "west"})]
    db = job("db", "q", tasks=[gpu_task("db-0", 1, m.RUNNING, "b", labels={"app": "db"})])
    follower = one_pod(pod_affinity=(m.PodAffinityTerm(ZONE, DB),), gpus=1)
    assert status_of(run(nodes, [db, follower]))["p-0"] == (m.BINDING, "b")
    # nothing selected anywhere and the pod does not select itself: it waits, with the reason
    result = run(nodes, [follower])
    assert result.pending["p"].message == ("task p-0: 0/2 nodes are available: "
                                           "2 node(s) didn't match pod affinity rules.")


def test_first_pod_of_a_self_affine_group_may_start_it():
    nodes = [node("a", 8, labels={ZONE: "east"}), node("b", 8, labels={ZONE: "west"})]
    tasks = [gpu_task(f"g-{i}", 1, labels={"app": "db"}, pod_affinity=(m.PodAffinityTerm(ZONE, DB),))
             for i in range(3)]
    placed = status_of(run(nodes, [job("g", "q", tasks=tasks)]))
    assert len({n for _, n in placed.values()}) == 1


def test_required_anti_affinity_spreads_a_gang_and_existing_pods_keep_others_out():
    nodes = [node("a", 8), node("b", 8)]
    anti = (m.PodAffinityTerm(m.NODE_TYPE_LABEL, DB),)
    tasks = [gpu_task(f"g-{i}", 1, labels={"app": "db"}, pod_anti_affinity=anti) for i in range(2)]
    assert sorted(n for _, n in status_of(run(nodes, [job("g", "q", tasks=tasks)])).values()) == ["a", "b"]
    # a plain db pod may not join a node where a running pod's anti-affinity selects it
    holder = job("h", "q", tasks=[gpu_task("h-0", 1, m.RUNNING, "a", labels={"app": "db"}, pod_anti_affinity=anti)])
    newcomer = one_pod(labels={"app": "db"})
    result = run([node("a", 8)], [holder, newcomer])
    assert result.pending["p"].message == ("task p-0: 0/1 nodes are available: "
                                           "1 node(s) didn't satisfy existing pods anti-affinity rules.")


def test_preferred_pod_anti_affinity_moves_the_pod_away():
    nodes = [node("a", 8), node("b", 8)]
    db = job("db", "q", tasks=[gpu_task("db-0", 1, m.RUNNING, "a", labels={"app": "db"})])
    away = (m.WeightedPodAffinityTerm(100, m.PodAffinityTerm(m.NODE_TYPE_LABEL, DB)),)
    assert status_of(run(nodes, [db, one_pod()]))["p-0"] == (m.BINDING, "a")  # binpack
    assert status_of(run(nodes, [db, one_pod(preferred_pod_anti_affinity=away)]))["p-0"] == (m.BINDING, "b")


# ---- snapshot form, determinism, the mask cache -----------------------------------------------


def test_new_fields_round_trip_through_json_and_decide_the_same():
    nodes = [node("a", 8, taints=(TAINT,), unschedulable=False, extended={"x/y": 2}, labels={"zone": "a"}),
             node("b", 8, labels={"zone": "b"})]
    spec = gpu_task("p-0", 1, tolerations=(m.Toleration("dedicated", "Exists"),),
                    required_node_affinity=(term(req("zone", "In", "a", "b")),),
                    preferred_node_affinity=(m.PreferredSchedulingTerm(10, term(req("zone", "In", "a"))),),
                    host_ports=("TCP/80",), labels={"app": "web"},
                    pod_anti_affinity=(m.PodAffinityTerm("zone", (("app", "web"),)),))
    snap = snapshot(nodes, Q, [job("p", "q", tasks=[spec])])
    again = m.ClusterSnapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert again == snap
    first, second = run_cycle(snap, ALLOCATE_ONLY), run_cycle(again, ALLOCATE_ONLY)
    assert dataclasses.replace(first, timings_ms={}) == dataclasses.replace(second, timings_ms={})
    assert status_of(run_cycle(snap, ALLOCATE_ONLY))["p-0"] == (m.BINDING, "a")


LABELS = st.dictionaries(st.sampled_from(["zone", "gen", "pool"]), st.sampled_from(["a", "b", "3", "5"]), max_size=3)
TAINTS = st.lists(st.builds(m.Taint, st.sampled_from(["gpu", "dedicated"]), st.sampled_from(["", "x"]),
                            st.sampled_from(m.TAINT_EFFECTS)), max_size=2).map(tuple)
TOLS = st.lists(st.builds(m.Toleration, st.sampled_from(["", "gpu", "dedicated"]), st.sampled_from(["Equal", "Exists"]),
                          st.sampled_from(["", "x"]), st.sampled_from(["", "NoSchedule", "NoExecute"])),
                max_size=2).map(tuple)
REQS = st.builds(req, st.sampled_from(["zone", "gen", "pool"]), st.sampled_from(m.SELECTOR_OPERATORS),
                 st.sampled_from(["a", "b", "3", "5"]))
TERMS = st.lists(st.lists(REQS, min_size=1, max_size=2).map(lambda rs: m.NodeSelectorTerm(tuple(rs))),
                 max_size=2).map(tuple)
NODES = st.lists(st.builds(lambda labels, taints, cordon, ready: (labels, taints, cordon, ready),
                           LABELS, TAINTS, st.booleans(), st.booleans()), min_size=1, max_size=6)
SHAPES = st.lists(st.tuples(TOLS, st.one_of(st.none(), TERMS), LABELS), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(NODES, SHAPES)
def test_cached_static_mask_equals_a_fresh_evaluation(node_defs, shapes):
    nodes = [node(f"n{i}", 8, labels=lab, taints=tai, unschedulable=cor, ready=rdy)
             for i, (lab, tai, cor, rdy) in enumerate(node_defs)]
    tasks = [gpu_task(f"t{i}", 1, tolerations=tol, required_node_affinity=aff, node_selector=sel)
             for i, (tol, aff, sel) in enumerate(shapes)]
    s, placer = open_session(snapshot(nodes, Q, [job("j", "q", tasks=tasks)]), ALLOCATE_ONLY)
    for _ in range(2):  # the second pass is served from the cache
        for t in s.tasks:
            fresh = [pr.static_failure(ns.spec, t.spec, True) is None for ns in s.nodes]
            assert placer._static_mask(t).tolist() == fresh
            assert [x is None for x in placer.static_reasons(t)] == fresh
