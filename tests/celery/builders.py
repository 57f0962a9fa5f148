"""Small simulated clusters for the cycle, task and fault tests (plain ORM, no engine knowledge).

`small_cluster()` gives a default cluster + shard with `nodes` nodes of 8 GPUs, one department
with two leaf queues, and nothing pending; `submit()` adds gangs of whole-GPU pods.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kaiweb.cluster.models import Cluster, Node, SchedulingShard
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
GIB = 1024**3


@dataclass
class SmallCluster:
    cluster: Cluster
    shard: SchedulingShard
    queues: dict[str, Queue] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)


def small_cluster(nodes: int = 2, gpus: int = 8, clock: float | None = None) -> SmallCluster:
    """A simulated cluster on a fixed simulated clock (T0), with queues `team-a` and `team-b`."""
    cluster, _ = Cluster.objects.get_or_create(name="default", defaults={"backend": "simulated"})
    cluster.backend = "simulated"
    cluster.settings = {"simulation": {"clock": "simulated", "now": clock if clock is not None else T0.timestamp(),
                                       "seconds_per_cycle": 60, "tick": 1, "seed": 1, "generate": False}}
    cluster.save()
    shard, _ = SchedulingShard.objects.get_or_create(cluster=cluster, name="default",
                                                     defaults={"partition_label_value": ""})
    dept = Queue.objects.create(name="dept", gpu_quota=-1, gpu_limit=-1, cpu_quota=-1, memory_quota=-1)
    queues = {"dept": dept}
    for name in ("team-a", "team-b"):
        queues[name] = Queue.objects.create(name=name, parent=dept, gpu_quota=gpus * nodes / 2, gpu_limit=-1,
                                            cpu_quota=-1, memory_quota=-1)
    node_rows = [
        Node.objects.create(cluster=cluster, name=f"node-{i}", allocatable_cpu=128_000,
                            allocatable_memory=1024 * GIB, allocatable_gpu=gpus, gpu_memory_mib=81920)
        for i in range(nodes)
    ]
    return SmallCluster(cluster, shard, queues, node_rows)


def submit(sc: SmallCluster, queue: str, name: str, pods: int = 1, gpus_per_pod: float = 1,
           priority_class: str | None = "train", duration: float | None = 3600, min_member: int | None = None,
           fraction: float | None = None) -> Workload:
    """A pending gang of `pods` pods in a leaf queue."""
    pc = PriorityClass.objects.filter(name=priority_class).first() if priority_class else None
    w = Workload.objects.create(cluster=sc.cluster, namespace="ns", name=name, uid=uuid.uuid4().hex,
                                queue=sc.queues[queue], priority_class=pc,
                                min_member=pods if min_member is None else min_member,
                                state=WorkloadState.PENDING, submitted_at=T0)
    Pod.objects.bulk_create([
        Pod(workload=w, name=f"{name}-{i}", uid=uuid.uuid4().hex, gpu=0 if fraction else gpus_per_pod,
            gpu_fraction=fraction, cpu=1000, memory=GIB, state=PodState.PENDING, duration_seconds=duration)
        for i in range(pods)
    ])
    return w


def running_pods(sc: SmallCluster) -> list[Pod]:
    return list(Pod.objects.filter(workload__cluster=sc.cluster, state=PodState.RUNNING).order_by("name"))
