"""factory_boy factories for the control-plane models (queues, clusters, workloads, history).

Factories build valid rows with sensible KAI-like defaults; pass fields to override. They write
rows directly (no services, no audit entries): use the services when the rules are under test.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from kaiweb.cluster.models import Cluster, GpuDevice, Node, SchedulingShard
from kaiweb.queues.models import PriorityClass, Queue, QueueMembership
from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, QueueStatus, SchedulingCycle
from kaiweb.usage.models import UsageBucket
from kaiweb.workloads.models import Pod, Workload

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class QueueFactory(factory.django.DjangoModelFactory):
    """A top-level queue with 8 GPUs of quota and no limits (pass parent= for a child)."""

    class Meta:
        model = Queue

    name = factory.Sequence(lambda n: f"queue-{n}")
    priority = 100
    gpu_quota = 8
    gpu_limit = -1
    cpu_quota = 64000
    memory_quota = -1


class QueueMembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QueueMembership

    user = factory.SubFactory(UserFactory)
    queue = factory.SubFactory(QueueFactory)
    role = "admin"


class PriorityClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PriorityClass
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"class-{n}")
    value = 60
    preemptible = True


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = "default"
    backend = "simulated"


class SchedulingShardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SchedulingShard

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"shard-{n}")
    partition_label_value = factory.Sequence(lambda n: f"pool-{n}")


class NodeFactory(factory.django.DjangoModelFactory):
    """An 8 × H100 node, ready."""

    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"node-{n}")
    allocatable_cpu = 128000
    allocatable_memory = 1024 * 1024**3
    allocatable_gpu = 8
    gpu_product = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib = 81559
    observed_at = T0


class GpuDeviceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuDevice

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n % 8)
    product = "NVIDIA-H100-80GB-HBM3"
    memory_mib = 81559


class WorkloadFactory(factory.django.DjangoModelFactory):
    """A pending PodGroup in a (leaf) queue."""

    class Meta:
        model = Workload

    cluster = factory.SubFactory(ClusterFactory)
    namespace = "team"
    name = factory.Sequence(lambda n: f"job-{n}")
    queue = factory.SubFactory(QueueFactory)
    submitted_at = T0


class PodFactory(factory.django.DjangoModelFactory):
    """One pod asking for one GPU."""

    class Meta:
        model = Pod

    workload = factory.SubFactory(WorkloadFactory)
    name = factory.Sequence(lambda n: f"pod-{n}")
    uid = factory.Sequence(lambda n: f"uid-pod-{n}")
    gpu = 1
    cpu = 4000
    memory = 16 * 1024**3


class SchedulingCycleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SchedulingCycle

    started_at = factory.LazyFunction(timezone.now)
    status = "succeeded"
    phase_durations = factory.LazyFunction(lambda: {"snapshot": 0.01, "allocate": 0.02})
    duration_seconds = 0.03


class DecisionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Decision

    cycle = factory.SubFactory(SchedulingCycleFactory)
    kind = "bind"
    workload_ref = "team/job"
    pod_name = factory.Sequence(lambda n: f"pod-{n}")
    node_name = "node-0"
    reason = "Allocated"
    idempotency_key = factory.Sequence(lambda n: f"key-{n}")


class PreemptionEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PreemptionEvent

    cycle = factory.SubFactory(SchedulingCycleFactory)
    at = factory.LazyFunction(timezone.now)
    action = "reclaim"
    preemptor_ref = "team-a/job-1"
    victim_ref = "team-b/job-2"
    reason = "ReclaimOverFairShare"


class PendingReasonFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PendingReason

    workload = factory.SubFactory(WorkloadFactory)
    recorded_at = factory.LazyFunction(timezone.now)
    reason = "queue-over-limit"
    message = "queue is at its GPU limit"


class QueueStatusFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QueueStatus

    queue = factory.SubFactory(QueueFactory)
    recorded_at = factory.LazyFunction(timezone.now)
    allocated = factory.LazyFunction(lambda: {"cpu": 0, "memory": 0, "gpu": 0})
    fair_share = factory.LazyFunction(lambda: {"cpu": 0, "memory": 0, "gpu": 0})
    requested = factory.LazyFunction(lambda: {"cpu": 0, "memory": 0, "gpu": 0})
    pending = factory.LazyFunction(lambda: {"cpu": 0, "memory": 0, "gpu": 0})


class UsageBucketFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = UsageBucket

    queue = factory.SubFactory(QueueFactory)
    resource = "gpu"
    start = T0
    width_seconds = 3600
    value = 3600.0


def recorded_of(cycle: SchedulingCycle) -> tuple[SchedulingCycle, Any]:
    """A cycle made with these factories and what its record step would hand the write-back
    (`adapters.Recorded`): its queue status rows and its shard's current why-pending rows."""
    from kaiweb.scheduling.adapters import Recorded

    return cycle, Recorded(
        decisions=[],
        queue_statuses={st.queue.name: st for st in QueueStatus.objects.filter(cycle=cycle).select_related("queue")},
        why_pending={pr.workload_id: (pr.reason, pr.message) for pr in PendingReason.objects.current_of(cycle.shard)})
