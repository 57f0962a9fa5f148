"""manage.py seed_demo: the demo queue tree, a simulated 16×8-GPU cluster and a workload mix; beside them two
node pools (4 H100 and 4 A100-40GB nodes, by ``nvidia.com/gpu.product``) and a department with two projects
that have queues in both, made through the org services (the org layer stands above the cluster app, so
its part of the demo is made here, not in ``kaiweb.cluster.demo``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

GPU_PRODUCT = "nvidia.com/gpu.product"
# name, node prefix, product, GPU memory (MiB)
DEMO_POOLS = (("h100", "h100-node", "NVIDIA-H100-80GB-HBM3", 81559),
              ("a100", "a100-node", "NVIDIA-A100-SXM4-40GB", 40960))
POOL_NODES = 4


def _quota(deserved: float, limit: float, weight: float = 1) -> dict[str, float]:
    return {"deserved": deserved, "limit": limit, "over_quota_weight": weight}


# KRM's amounts default to 0, and a limit of 0 is a ceiling of zero: CPU and memory are left unbounded.
UNBOUNDED = {"cpu": _quota(0, -1), "memory": _quota(0, -1)}


DEMO_DEPARTMENT = {"name": "research", "display_name": "Research", "queues": [
    {"pool": "h100", "gpu": _quota(16, 32), **UNBOUNDED}, {"pool": "a100", "gpu": _quota(16, -1), **UNBOUNDED}]}
DEMO_PROJECTS = (
    {"name": "vision", "display_name": "Computer vision", "department": "research",
     "default_node_pools": ["h100", "a100"],
     "queues": [{"pool": "h100", "gpu": _quota(8, 16), **UNBOUNDED}, {"pool": "a100", "gpu": _quota(8, -1), **UNBOUNDED}]},
    {"name": "nlp", "display_name": "Language models", "department": "research",
     "default_node_pools": ["a100"],
     "queues": [{"pool": "h100", "gpu": _quota(8, 32), **UNBOUNDED}, {"pool": "a100", "gpu": _quota(4, 16), **UNBOUNDED}]},
)


class Command(BaseCommand):
    help = "Create the demo queues, a simulated cluster and a seeded workload mix (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=16, help="simulated nodes (default 16)")
        parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
        parser.add_argument("--seed", type=int, default=7, help="seed of the workload generator")
        parser.add_argument("--clock", choices=("real", "simulated"), default="real",
                            help="the cluster's clock: the wall clock (default; one clock for everything the "
                                 "product shows) or a simulated one that advances --seconds-per-cycle per cycle")
        parser.add_argument("--seconds-per-cycle", type=float, default=30,
                            help="with --clock simulated: seconds the clock advances per cycle (default 30)")
        parser.add_argument("--no-workloads", action="store_true", help="do not generate workloads")

    def handle(self, *args: Any, **opts: Any) -> None:
        from kaiweb.cluster.demo import seed_demo

        if opts["nodes"] < 1 or opts["gpus_per_node"] < 0:
            raise CommandError("--nodes must be at least 1 and --gpus-per-node not negative")
        try:
            report = seed_demo(nodes=opts["nodes"], gpus_per_node=opts["gpus_per_node"], seed=opts["seed"],
                               generate=not opts["no_workloads"], seconds_per_cycle=opts["seconds_per_cycle"],
                               clock=opts["clock"])
        except (ValueError, LookupError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"demo on cluster {report.cluster}: {report.queues_created} queue(s) created, "
            f"{report.nodes_created} node(s) created, {report.workloads_submitted} workload(s) submitted"
        )
        self.stdout.write(seed_org_demo(report.cluster, generate=not opts["no_workloads"]))


@transaction.atomic
def seed_org_demo(cluster_name: str, generate: bool = True) -> str:
    """The demo's node pools, department and projects (once; later calls change nothing), and a few
    workloads in the projects' queues, each PodGroup labelled with its node pool."""
    from kaiweb.audit.choices import AuditSource
    from kaiweb.cluster.backends.simulated import SimulatedGateway
    from kaiweb.cluster.demo import ensure_nodes
    from kaiweb.cluster.models import Cluster
    from kaiweb.org import services
    from kaiweb.org.choices import NODE_POOL_LABEL
    from kaiweb.org.models import Department, NodePool, Project
    from scheduler_core.sim.traces import Job

    cluster = Cluster.objects.get(name=cluster_name)
    nodes = sum(ensure_nodes(cluster, POOL_NODES, 8, prefix=prefix, product=product, memory_mib=memory)
                for _, prefix, product, memory in DEMO_POOLS)
    made = []
    for name, _, product, _ in DEMO_POOLS:
        if not NodePool.objects.filter(cluster=cluster, name=name).exists():
            services.create_node_pool({"name": name, "label_key": GPU_PRODUCT, "label_value": product},
                                      source=AuditSource.CLI)
            made.append(f"node pool {name}")
    if not Department.objects.filter(name=DEMO_DEPARTMENT["name"]).exists():
        services.create_department(DEMO_DEPARTMENT, source=AuditSource.CLI)
        made.append(f"department {DEMO_DEPARTMENT['name']}")
    submitted = 0
    for spec in DEMO_PROJECTS:
        if Project.objects.filter(name=spec["name"]).exists():
            continue
        project = services.create_project(spec, source=AuditSource.CLI).obj
        made.append(f"project {project.name}")
        if generate:
            jobs = [Job(job_id=f"{project.name}-{pool}-{i}", duration=1800 + 600 * i, num_pods=1, gpu_per_pod=gpus,
                        cpu_millis_per_pod=8000, memory_bytes_per_pod=64 * 2**30, queue=f"{project.name}-{pool}",
                        priority_class="train", kind="train", labels={NODE_POOL_LABEL: pool},
                        namespace=project.namespace_name)
                    for pool, sizes in (("h100", (4, 2)), ("a100", (2, 2, 8))) for i, gpus in enumerate(sizes)]
            submitted += len(SimulatedGateway(cluster).submit(jobs))
    return (f"org demo: {nodes} pool node(s) created; {', '.join(made) or 'nothing new'}; "
            f"{submitted} project workload(s) submitted")
