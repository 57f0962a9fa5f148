"""Which nodes a shard schedules, and the capacity they add up to."""

from __future__ import annotations

import pytest

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
