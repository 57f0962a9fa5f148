"""KRM's rules restated on plain values: queue derivation, pool membership and phases, placement."""

from __future__ import annotations

from kaiweb.org import rules
from kaiweb.org.choices import DEPARTMENT_LABEL, NODE_POOL_LABEL, PROJECT_ID_LABEL, PROJECT_LABEL

A, E, Owner = rules.Amounts, rules.QueueEntry, rules.OwnerSpec
H100 = rules.PoolSpec("h100", "nvidia.com/gpu.product", "H100")
A100 = rules.PoolSpec("a100", "nvidia.com/gpu.product", "A100")


def by_name(queues):
    return {q.name: q for q in queues}


def test_a_project_queue_is_parented_to_its_departments_queue_of_the_same_pool_and_labelled_as_krm_labels_it():
    eng = Owner("department", "engineering", (E("h100", gpu=A(8, -1, 1)), E("default")))
    research = Owner("project", "research", (E("h100", gpu=A(4, 8, 2)), E("default"), E("a100")),
                 department="engineering", uid="uid-1")
    queues = by_name(rules.derive_queues([research, eng], {}))
    assert set(queues) == {"engineering", "engineering-h100", "research", "research-h100", "research-a100"}
    assert queues["research-h100"].parent == "engineering-h100"
    assert queues["research"].parent == "engineering"
    assert queues["research-a100"].parent is None  # the department has no a100 queue: a root of its own
    assert queues["research-h100"].labels == {PROJECT_LABEL: "research", PROJECT_ID_LABEL: "uid-1",
                                              DEPARTMENT_LABEL: "engineering", NODE_POOL_LABEL: "h100"}
    # The default pool is the label's absence.
    assert NODE_POOL_LABEL not in queues["research"].labels
    assert queues["engineering-h100"].labels == {DEPARTMENT_LABEL: "engineering", NODE_POOL_LABEL: "h100"}
    assert queues["research-h100"].gpu == A(4, 8, 2)


def test_a_name_held_by_another_owner_or_a_hand_made_queue_gets_a_stable_suffix():
    a = Owner("project", "team", (E("h100"),))
    b = Owner("department", "team", (E("h100"),))
    first = rules.derive_queues([a, b], {"team-h100": None})
    names = sorted(q.name for q in first)
    assert "team-h100" not in names  # held by a hand-made queue: left alone
    assert all(n.startswith("team-h100-") and len(n) == len("team-h100-") + 5 for n in names)
    assert len(set(names)) == 2
    # The same specs and queues give the same names.
    assert sorted(q.name for q in rules.derive_queues([b, a], {"team-h100": None})) == names
    # A queue already held by its owner keeps its name.
    mine = rules.derive_queues([a], {"team-h100": ("project", "team")})
    assert [q.name for q in mine] == ["team-h100"]


def test_a_long_owner_name_is_cut_to_63_characters():
    owner = Owner("project", "p" * 63, (E("h100"),))
    (queue,) = rules.derive_queues([owner], {})
    assert len(queue.name) <= 63


def test_spec_errors_name_the_field_and_the_rule():
    pools = ["default", "h100"]
    assert rules.spec_errors(Owner("project", "x", (E("a100"),)), pools, []) == {
        "queues": "node pool 'a100' does not exist"}
    assert "one queue per node pool" in rules.spec_errors(Owner("project", "x", (E("h100"), E("h100"))), pools, [])["queues"]
    assert rules.spec_errors(Owner("project", "x", (), department="nope"), pools, [])["department"] == (
        "department 'nope' does not exist")
    assert "needs one" in rules.spec_errors(Owner("project", "x", (E("h100"),)), pools, [], ["default"])[
        "default_node_pools"]
    assert "below deserved" in rules.spec_errors(Owner("project", "x", (E("h100", gpu=A(4, 2)),)), pools, [])["queues"]
    assert rules.spec_errors(Owner("project", "x", (E("h100", gpu=A(4, -1)),)), pools, []) == {}


def test_a_node_belongs_to_the_pool_whose_label_pair_it_has_else_to_default():
    assert rules.pool_of({"nvidia.com/gpu.product": "H100"}, [A100, H100]) == "h100"
    assert rules.pool_of({"nvidia.com/gpu.product": "H100-SXM"}, [A100, H100]) == "default"
    assert rules.pool_of({}, [A100, H100]) == "default"
    zone = rules.PoolSpec("zone-a", "topology.kubernetes.io/zone", "a")
    both = {"nvidia.com/gpu.product": "H100", "topology.kubernetes.io/zone": "a"}
    assert rules.pool_of(both, [zone, H100]) == rules.pool_of(both, [H100, zone]) == "h100"


def test_pool_phases():
    assert rules.pool_phase([])[0] == "Empty"
    assert rules.pool_phase([("n1", False), ("n2", True)])[0] == "Ready"
    phase, message = rules.pool_phase([("n1", False)])
    assert phase == "Unschedulable"
    assert "n1" in message
    assert rules.pool_phase([("n1", True)], deleting=True)[0] == "Deleting"


def test_candidate_pools_come_from_the_first_source_that_names_any():
    pools = [A100, H100]
    h100_affinity = [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}]}]
    assert rules.candidate_pools(annotation="a100 h100", affinity_terms=h100_affinity, default_pools=["h100"],
                                 pools=pools) == (["a100", "h100"], "annotation")
    assert rules.candidate_pools(affinity_terms=h100_affinity, podgroup_pool="a100", pools=pools) == (
        ["h100"], "node affinity")
    absent = [{"matchExpressions": [{"key": NODE_POOL_LABEL, "operator": "DoesNotExist"}]}]
    assert rules.candidate_pools(affinity_terms=absent, pools=pools) == (["default"], "node affinity")
    assert rules.candidate_pools(podgroup_pool="a100", default_pools=["h100"], pools=pools) == (
        ["a100"], "PodGroup label")
    assert rules.candidate_pools(default_pools=["h100", "a100"], pools=pools) == (
        ["h100", "a100"], "project default pools")
    assert rules.candidate_pools(annotation="nope", pools=pools) == (["default"], "default pool")


def test_the_first_accepting_candidate_wins_and_a_move_goes_round_robin():
    phases = {"h100": "Unschedulable", "a100": "Ready", "default": "Empty"}
    assert rules.choose_pool(["h100", "a100", "default"], phases) == "a100"
    assert rules.choose_pool(["h100"], phases) is None
    phases["h100"] = "Ready"
    assert rules.next_pool(["h100", "a100", "default"], "h100", phases) == ("a100", False)
    assert rules.next_pool(["h100", "a100", "default"], "default", phases) == ("h100", True)
    assert rules.next_pool(["h100"], "h100", phases) == ("h100", False)
