"""Models convert to the engine's objects and back without losing anything (round trips)."""

from __future__ import annotations

import datetime as dt

import pytest

from kaiweb.cluster.models import Node
from kaiweb.queues.models import PriorityClass, Queue
from scheduler_core import model as m
from tests.factories import ClusterFactory, NodeFactory, QueueFactory

pytestmark = pytest.mark.django_db

FIELDS = (
    "name", "priority", "cpu_quota", "cpu_limit", "cpu_over_quota_weight", "memory_quota", "memory_limit",
    "memory_over_quota_weight", "gpu_quota", "gpu_limit", "gpu_over_quota_weight", "preempt_min_runtime",
    "reclaim_min_runtime", "parent_id",
)


def test_queue_round_trips_through_its_spec(queue_tree):
    queue = queue_tree["team-training"]
    queue.memory_quota, queue.memory_limit = 2048, -1
    queue.reclaim_min_runtime = dt.timedelta(minutes=5)
    queue.save()
    spec = queue.to_spec(queue.parent.name if queue.parent_id else None)
    assert spec.parent == "department-b"
    assert spec.memory.quota == 2048 * 1_000_000  # MB in the CRD, bytes in the engine
    assert spec.memory.limit == -1
    assert spec.reclaim_min_runtime_s == 300
    back = Queue.from_spec(spec)
    assert {f: getattr(back, f) for f in FIELDS} == {f: getattr(queue, f) for f in FIELDS}


def test_unlimited_quota_survives_the_round_trip():
    queue = QueueFactory(name="all", gpu_quota=-1, gpu_limit=-1, memory_quota=-1)
    back = Queue.from_spec(queue.to_spec(queue.parent.name if queue.parent_id else None))
    assert (back.gpu_quota, back.gpu_limit, back.memory_quota) == (-1, -1, -1)


def test_priority_class_round_trip_and_kai_default():
    pc = PriorityClass.objects.get(name="build")
    assert PriorityClass.from_spec(pc.to_spec()).preemptible is False
    assert PriorityClass.from_spec(m.PriorityClass("x", 60)).preemptible is True
    assert PriorityClass.from_spec(m.PriorityClass("y", 150)).preemptible is False


def test_node_round_trip():
    cluster = ClusterFactory()
    node = NodeFactory(cluster=cluster, labels={"kai.scheduler/node-pool": "a"}, ready=True)
    back = Node.from_spec(node.to_spec(), cluster)
    for field in ("name", "labels", "allocatable_cpu", "allocatable_memory", "allocatable_gpu", "gpu_memory_mib", "ready"):
        assert getattr(back, field) == getattr(node, field), field
