"""KAI's PodGroup, Topology and SchedulingShard objects as read from a cluster."""

from __future__ import annotations

import pytest

from kaiweb.cluster.backends.kubernetes.parsing import parse_pod_group, parse_topology, plural_of
from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.backends.types import ObservedPodGroup, ObservedShard, ObservedTopology, Unreadable


def _pg(spec: dict, **meta) -> dict:
    return {"metadata": {"name": "pg", "namespace": "ns", "uid": "u1", **meta}, "spec": {"queue": "q", **spec}}


def test_preemption_delay_and_staleness_grace_are_read_as_seconds():
    pg = parse_pod_group(_pg({"preemptionDelay": "1m30s", "stalenessGracePeriod": "60s"}))
    assert isinstance(pg, ObservedPodGroup)
    assert (pg.preemption_delay_s, pg.staleness_grace_s) == (90.0, 60.0)


@pytest.mark.parametrize("value", ["soon", "10", "-5s", "1e400h", "5d"])
def test_a_bad_duration_names_the_field_and_the_rule(value):
    bad = parse_pod_group(_pg({"preemptionDelay": value}))
    assert isinstance(bad, Unreadable)
    assert bad.field == "spec.preemptionDelay"


def test_subgroups_keep_min_subgroup_and_their_topology_constraint():
    pg = parse_pod_group(_pg({"minSubGroup": 1, "subGroups": [
        {"name": "a", "minSubGroup": 1},
        {"name": "b", "parent": "a", "minMember": 2,
         "topologyConstraint": {"topology": "t", "requiredTopologyLevel": "rack"}}]}))
    assert isinstance(pg, ObservedPodGroup)
    assert pg.min_sub_group == 1
    assert pg.sub_groups[0].min_sub_group == 1
    assert pg.sub_groups[1].topology_constraint.required_level == "rack"


def test_a_subgroup_naming_an_unknown_parent_is_refused():
    bad = parse_pod_group(_pg({"subGroups": [{"name": "b", "parent": "nope", "minMember": 1}]}))
    assert isinstance(bad, Unreadable)
    assert bad.field == "spec.subGroups[0].parent"


def test_duplicate_subgroup_names_are_refused():
    bad = parse_pod_group(_pg({"subGroups": [{"name": "b"}, {"name": "b"}]}))
    assert isinstance(bad, Unreadable)
    assert "unique" in bad.rule


def test_the_owner_of_a_pod_group_is_kept():
    pg = parse_pod_group(_pg({}, ownerReferences=[{"kind": "PyTorchJob", "name": "train", "uid": "o1"}]))
    assert pg.owner == {"kind": "PyTorchJob", "name": "train", "uid": "o1"}


def test_a_topology_lists_its_node_label_keys_outermost_first_with_their_aliases():
    topo = parse_topology({"metadata": {"name": "t"}, "spec": {"levels": [
        {"nodeLabel": "zone"}, {"nodeLabel": "rack", "alias": "r"}, {"nodeLabel": "kubernetes.io/hostname"}]}})
    assert topo == ObservedTopology("t", ("zone", "rack", "kubernetes.io/hostname"), ("", "r", ""))


@pytest.mark.parametrize(("levels", "field", "rule"), [
    ([{"nodeLabel": "zone", "alias": "x"}, {"nodeLabel": "rack", "alias": "x"}], "spec.levels[1].alias",
     "must be unique within the topology: spec.levels[0].alias is 'x' too"),
    ([{"nodeLabel": "zone", "alias": "rack"}, {"nodeLabel": "rack"}], "spec.levels[0].alias",
     "must not be a level's nodeLabel: spec.levels[1].nodeLabel is 'rack'"),
    ([{"nodeLabel": "zone", "alias": 7}], "spec.levels[0].alias", "must be a string: another name of the level"),
])
def test_a_topology_whose_aliases_do_not_name_one_level_each_is_refused(levels, field, rule):
    bad = parse_topology({"metadata": {"name": "t"}, "spec": {"levels": levels}})
    assert isinstance(bad, Unreadable)
    assert (bad.field, bad.rule) == (field, rule)
    assert bad.message.startswith(f"Topology t: {field} = ")


def test_a_topology_level_without_a_label_is_refused():
    bad = parse_topology({"metadata": {"name": "t"}, "spec": {"levels": [{"alias": "x"}]}})
    assert isinstance(bad, Unreadable)
    assert bad.field == "spec.levels[0].nodeLabel"


def test_a_shard_carries_kais_placement_strategy_and_args():
    shard = parse_shard({"metadata": {"name": "default"}, "spec": {
        "placementStrategy": {"gpu": "spread", "cpu": "spread"}, "args": {"restrict-node-scheduling": "true"},
        "minRuntime": {"reclaimMinRuntime": "5m"}}})
    assert isinstance(shard, ObservedShard)
    assert (shard.gpu_placement, shard.cpu_placement) == ("spread", "spread")
    assert shard.args == {"restrict-node-scheduling": "true"}
    assert shard.reclaim_min_runtime_s == 300.0


def test_a_shard_with_an_unknown_strategy_is_refused():
    bad = parse_shard({"metadata": {"name": "default"}, "spec": {"placementStrategy": {"gpu": "random"}}})
    assert isinstance(bad, Unreadable)
    assert bad.field == "spec.placementStrategy.gpu"


@pytest.mark.parametrize(("kind", "plural"), [("PyTorchJob", "pytorchjobs"), ("Topology", "topologies"),
                                               ("RayCluster", "rayclusters"), ("Testcrd", "testcrds")])
def test_plural_names_follow_kubernetes(kind, plural):
    assert plural_of(kind) == plural


@pytest.mark.parametrize(("quota", "limit", "read"), [(-1, 0, 0), (4, 2, 2), (2, 4, 2), (-1, -1, -1), (3, -1, 3)])
def test_a_kai_queue_whose_limit_is_below_its_quota_reads_as_capped_by_the_limit(quota, limit, read):
    from kaiweb.cluster.backends.kubernetes.parsing import parse_queue

    res = {"quota": quota, "limit": limit, "overQuotaWeight": 1}
    parsed = parse_queue({"metadata": {"name": "q"}, "spec": {"resources": {"gpu": res, "cpu": res, "memory": res}}})
    assert parsed.spec.gpu.quota == read
    assert parsed.spec.gpu.limit == limit


def test_a_pod_names_the_config_maps_it_needs_and_the_claims_it_mounts():
    from kaiweb.cluster.backends.kubernetes.parsing import parse_pod

    raw = {"metadata": {"name": "p", "namespace": "ns", "labels": {"kai.scheduler/queue": "q"}}, "spec": {
        "volumes": [{"name": "a", "configMap": {"name": "needed"}},
                    {"name": "b", "configMap": {"name": "maybe", "optional": True}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "data"}}],
        "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "env"}}],
                        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "keys", "key": "x"}}}]}]}}
    pod = parse_pod(raw)
    assert [name for _, name in pod.config_maps] == ["needed", "env", "keys"]
    assert pod.config_maps[0][0] == "spec.volumes[0].configMap.name"
    assert pod.claims == (("spec.volumes[2].persistentVolumeClaim.claimName", "data"),)


@pytest.mark.parametrize(("label", "read"), [("3", 3), ("-1", -1), ("high", None), (None, None)])
def test_the_task_priority_label_orders_pods_inside_their_job(label, read):
    from kaiweb.cluster.backends.kubernetes.parsing import parse_pod

    labels = {"kai.scheduler/queue": "q", **({"kai.scheduler/task-priority": label} if label is not None else {})}
    pod = parse_pod({"metadata": {"name": "p", "namespace": "ns", "labels": labels},
                     "spec": {"priority": 1000, "containers": [{"name": "c"}]}})
    assert pod.task_priority == read  # never the pod's PriorityClass value
