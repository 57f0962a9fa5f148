"""The demo: the example queue tree, a simulated cluster of 16 nodes × 8 GPUs and a workload mix.

`seed_demo()` is idempotent: run it again and it changes nothing that exists (queues already
present keep their settings, nodes are created only when missing, the generator's flood of
jobs is submitted once).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction

from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.models import Cluster, GpuDevice, Node, SchedulingShard
from kaiweb.cluster.workload_generator import DEMO_PRIORITY_CLASSES
from kaiweb.queues.models import PriorityClass, Queue

DEMO_QUEUES_FILE = Path(settings.BASE_DIR) / "deploy" / "examples" / "queues.yaml"
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class SeedReport:
    queues_created: int
    nodes_created: int
    workloads_submitted: int
    cluster: str


def import_demo_queues(path: Path = DEMO_QUEUES_FILE) -> int:
    """Create the demo's queues that do not exist yet, by the Queue CRD import (all-or-nothing, the
    one reader of Queue documents); existing queues of the same names are left as they are."""
    from kaiweb.queues.yaml_io import import_queues

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    existing = set(Queue.objects.values_list("name", flat=True))
    missing = [d for d in docs if (d.get("metadata") or {}).get("name") not in existing]
    if not missing:
        return 0
    return len(import_queues(yaml.safe_dump_all(missing)).created)


# Not in the example tree: a best-effort queue with no guarantee and the lowest priority, which
# soaks up idle GPUs. The example tree's leaf limits (16 GPUs each) can never fill 128 GPUs on
# their own; with this queue the cluster is full, so department A's arrival shows reclaim.
BEST_EFFORT_QUEUE: dict[str, Any] = {
    "name": "best-effort", "display_name": "Best effort (idle GPUs)", "priority": 50,
    "cpu_quota": 0, "cpu_limit": -1, "cpu_over_quota_weight": 1,
    "memory_quota": 0, "memory_limit": -1, "memory_over_quota_weight": 1,
    "gpu_quota": 0, "gpu_limit": -1, "gpu_over_quota_weight": 1,
}


def ensure_best_effort_queue() -> int:
    if Queue.objects.filter(name=BEST_EFFORT_QUEUE["name"]).exists():
        return 0
    from kaiweb.queues.services import create_queue

    create_queue(BEST_EFFORT_QUEUE)
    return 1


def ensure_priority_classes() -> None:
    for name, value, preemptible in DEMO_PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value, "preemptible": preemptible})


def ensure_nodes(cluster: Cluster, count: int = 16, gpus: int = 8, prefix: str = "gpu-node",
                 product: str = "NVIDIA-A100-SXM4-80GB", memory_mib: int = 81920) -> int:
    """`count` nodes of `gpus` GPUs each (A100-80GB-like unless another product is named), created when
    missing."""
    existing = set(Node.objects.filter(cluster=cluster).values_list("name", flat=True))
    now = datetime.now(tz=UTC)
    nodes = []
    for i in range(count):
        name = f"{prefix}-{i:03d}"
        if name in existing:
            continue
        nodes.append(Node(
            cluster=cluster, name=name, allocatable_cpu=128_000, allocatable_memory=1024 * GIB,
            allocatable_gpu=gpus, allocatable_pods=110, gpu_product=product, gpu_memory_mib=memory_mib,
            labels={"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory_mib),
                    "topology.kubernetes.io/zone": f"zone-{'ab'[i % 2]}", "kai.scheduler/rack": f"rack-{i // 4}"},
            topology={"zone": f"zone-{'ab'[i % 2]}", "rack": f"rack-{i // 4}"}, ready=True, observed_at=now,
        ))
    Node.objects.bulk_create(nodes)
    created = {n.name for n in nodes}
    devices = [
        GpuDevice(node=n, index=g, uuid=f"GPU-{n.name}-{g}", product=n.gpu_product, memory_mib=n.gpu_memory_mib)
        for n in Node.objects.filter(cluster=cluster, name__in=created) for g in range(gpus)
    ]
    GpuDevice.objects.bulk_create(devices)
    return len(nodes)


def seed_demo(nodes: int = 16, gpus_per_node: int = 8, seed: int = 7, generate: bool = True,
              seconds_per_cycle: float = 30, clock: str = "real") -> SeedReport:
    """Create (once) what the demo needs; later calls change nothing that exists.

    The demo's cluster runs on the wall clock (`clock="real"`), so every time the product shows,
    a job's submission as much as the cycle that bound it, is on one clock. `clock="simulated"`
    moves the cluster `seconds_per_cycle` per cycle instead (for traces and benchmarks)."""
    if clock not in ("real", "simulated"):
        raise ValueError(f"clock: must be 'real' or 'simulated', not {clock!r}")
    with transaction.atomic():
        cluster, _ = Cluster.objects.get_or_create(
            name="default", defaults={"backend": "simulated", "description": "The embedded simulated cluster."})
        if cluster.backend != "simulated":
            raise ValueError(f"cluster {cluster.name}: backend is {cluster.backend!r}; the demo needs 'simulated'")
        SchedulingShard.objects.get_or_create(cluster=cluster, name="default", defaults={"partition_label_value": ""})
        ensure_priority_classes()
        queues_created = import_demo_queues() + ensure_best_effort_queue()
        nodes_created = ensure_nodes(cluster, nodes, gpus_per_node)
        gateway = SimulatedGateway(cluster)
        sim = (cluster.settings or {}).get("simulation") or {}
        submitted = 0
        if "seed" not in sim:
            # First seeding: configure the clock and the generator, and submit the initial flood.
            gateway.configure(seed=seed, generate=generate, seconds_per_cycle=seconds_per_cycle, clock=clock,
                              now=datetime.now(tz=UTC).timestamp(), tick=0)
            if generate:
                submitted = gateway.advance(seconds=0).submitted_workloads
    return SeedReport(queues_created, nodes_created, submitted, cluster.name)
