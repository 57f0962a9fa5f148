"""Which nodes a shard schedules, and the capacity they add up to."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kaiweb.cluster import selectors
from kaiweb.cluster.models import SchedulingShard
from tests.factories import ClusterFactory, NodeFactory, SchedulingShardFactory

pytestmark = pytest.mark.django_db


def test_shard_sees_its_label_value_and_the_default_shard_sees_unlabelled_nodes():
    cluster = ClusterFactory()
    a100 = SchedulingShardFactory(cluster=cluster, name="a100", partition_label_value="a100")
    default = SchedulingShard.objects.get(cluster=cluster, name="default")
    NodeFactory(cluster=cluster, name="n-a", labels={"kai.scheduler/node-pool": "a100"})
    NodeFactory(cluster=cluster, name="n-h", labels={"kai.scheduler/node-pool": "h100"})
    NodeFactory(cluster=cluster, name="n-none", labels={"zone": "a"})
    assert [n.name for n in selectors.nodes_of_shard(a100)] == ["n-a"]
    assert [n.name for n in selectors.nodes_of_shard(default)] == ["n-none"]


def test_capacity_counts_ready_schedulable_nodes_only():
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster, allocatable_gpu=8, allocatable_cpu=1000, allocatable_memory=10)
    NodeFactory(cluster=cluster, allocatable_gpu=4, ready=False)
    NodeFactory(cluster=cluster, allocatable_gpu=2, unschedulable=True)
    assert selectors.capacity() == {"cpu": 1000.0, "memory": 10.0, "gpu": 8.0}


LABEL = "kai.scheduler/node-pool"


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.sampled_from(["", "a100", "a.b/c"]),
    node_labels=st.lists(st.one_of(st.just({}), st.just({"other": "x"}),
                                   st.fixed_dictionaries({LABEL: st.sampled_from(["", "a100", "a.b/c", "h100"])})),
                         min_size=1, max_size=6),
)
def test_shard_membership_is_one_rule_in_memory_and_in_the_database(db, value, node_labels):
    """`matches` (labels in memory) and `label_q` (rows) agree; the unlabelled shard takes only
    objects without the label, so a present-but-empty label belongs to neither kind by accident."""
    from kaiweb.cluster.models import Cluster, Node, SchedulingShard

    cluster = Cluster.objects.get(name="default")
    Node.objects.filter(cluster=cluster).delete()
    shard = SchedulingShard(cluster=cluster, name="s", partition_label_value=value)
    for i, labels in enumerate(node_labels):
        NodeFactory(cluster=cluster, name=f"n{i}", labels=labels)
    in_db = set(Node.objects.filter(shard.label_q(), cluster=cluster).values_list("name", flat=True))
    in_memory = {n.name for n in Node.objects.filter(cluster=cluster) if shard.matches(n.labels)}
    assert in_db == in_memory
    for n in Node.objects.filter(cluster=cluster):
        expected = (n.labels.get(LABEL) == value) if value else (LABEL not in n.labels)
        assert (n.name in in_db) == expected
        assert shard.holds(cluster.pk, n.labels) == expected
        assert not shard.holds(cluster.pk + 1, n.labels)  # another cluster's object never


def test_the_default_shard_is_one_rule(settings):
    from kaiweb.cluster.models import Cluster, SchedulingShard

    settings.KAI_CLUSTER_BACKEND = "simulated"
    assert SchedulingShard.objects.default().name == "default"
    SchedulingShard.objects.update(enabled=False)
    other = Cluster.objects.create(name="b-cluster", backend="simulated")
    SchedulingShard.objects.create(cluster=other, name="z", partition_label_value="z")
    SchedulingShard.objects.create(cluster=other, name="y", partition_label_value="y", enabled=False)
    assert SchedulingShard.objects.default().name == "z"
    Cluster.objects.filter(pk=other.pk).update(enabled=False)
    assert SchedulingShard.objects.default() is None
