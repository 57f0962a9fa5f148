"""A PodGroup's subGroups (a flat list naming parents) become the engine's gang tree."""

from __future__ import annotations

from kaiweb.scheduling.adapters import gang_tree
from scheduler_core import model as m


def test_no_subgroups_and_no_topology_is_a_plain_gang():
    assert gang_tree([], None, {}) is None


def test_a_job_topology_constraint_alone_sits_on_the_root():
    tree = gang_tree([], None, {"topology": "t", "requiredTopologyLevel": "rack"})
    assert tree == m.SubGroupSpec(name="", topology_constraint=m.TopologyConstraint("t", "rack", None))


def test_leaves_are_pod_sets_and_parents_are_inner_nodes():
    subgroups = [
        {"name": "decode", "minSubGroup": 1},
        {"name": "decode-leader", "parent": "decode", "minMember": 1},
        {"name": "decode-workers", "parent": "decode", "minMember": 2,
         "topologyConstraint": {"topology": "t", "requiredTopologyLevel": "rack"}},
        {"name": "prefill", "minMember": 3},
    ]
    tree = gang_tree(subgroups, 2, {})
    assert tree is not None
    assert tree.min_subgroups == 2
    assert [p.name for p in tree.pod_sets] == ["prefill"]
    assert tree.pod_sets[0].min_available == 3
    (decode,) = tree.subgroups
    assert decode.name == "decode"
    assert decode.min_subgroups == 1
    assert [(p.name, p.min_available) for p in decode.pod_sets] == [("decode-leader", 1), ("decode-workers", 2)]
    assert decode.pod_sets[1].topology_constraint == m.TopologyConstraint("t", "rack", None)


def test_a_parent_cycle_does_not_recurse_forever():
    tree = gang_tree([{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}], None, {})
    assert tree is not None
    assert tree.subgroups == ()
    assert tree.pod_sets == ()

