"""The assigner in the cycle on the simulated path: a project's workloads are charged to a pool and its
queue, each pool's shard schedules only its own, and one pool's quota is not usable in another."""

from __future__ import annotations

import pytest

from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import services
from kaiweb.org.assigner import assign
from kaiweb.org.choices import NODE_POOL_LABEL, UNASSIGNED_POOL
from kaiweb.queues.models import Queue
from kaiweb.scheduling.cycle import run_and_record_cycle
from kaiweb.workloads.choices import ALLOCATED_POD_STATES
from kaiweb.workloads.models import Pod, Workload
from tests.factories import ClusterFactory, NodeFactory, PodFactory, WorkloadFactory

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu.product"


def gpus(deserved: float, limit: float) -> dict:
    return {"deserved": deserved, "limit": limit, "over_quota_weight": 1}


@pytest.fixture
def org():
    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    for name, product in (("h1", "H100"), ("a1", "A100"), ("c1", "L4")):
        NodeFactory(cluster=cluster, name=name, labels={GPU: product}, allocatable_gpu=8)
    services.create_node_pool({"name": "h100", "label_key": GPU, "label_value": "H100"})
    services.create_node_pool({"name": "a100", "label_key": GPU, "label_value": "A100"})
    unlimited = {"deserved": 0, "limit": -1, "over_quota_weight": 1}
    services.create_department({"name": "research", "queues": [
        {"pool": p, "gpu": unlimited, "cpu": unlimited, "memory": unlimited} for p in ("default", "h100", "a100")]})
    services.create_project({"name": "vision", "department": "research", "queues": [
        {"pool": "h100", "gpu": gpus(8, 8), "cpu": unlimited, "memory": unlimited},
        {"pool": "a100", "gpu": gpus(0, 0), "cpu": unlimited, "memory": unlimited}]})
    return cluster


def workload(cluster, name: str, *, gpu: int = 1, pools: str | None = None, affinity: str | None = None) -> Workload:
    labels = {"kai.scheduler/node-pools": pools} if pools else {}
    w = WorkloadFactory(cluster=cluster, namespace="kai-vision", name=name, labels=labels,
                        queue=Queue.objects.get(name="vision-h100"))
    constraints = {}
    if affinity:
        constraints = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": GPU, "operator": "In", "values": [affinity]}]}]}}}}
    PodFactory(workload=w, name=f"{name}-0", gpu=gpu, cpu=100, memory=0, constraints=constraints)
    return w


def test_workloads_are_charged_by_their_request_and_wait_where_the_project_has_no_queue(org):
    by_affinity = workload(org, "aff", affinity="A100")
    by_annotation = workload(org, "ann", pools="h100")
    nowhere = workload(org, "none")  # default pool: vision has no queue there
    report = assign(None, org)
    assert (report.assigned, report.waiting) == (2, 1)
    by_affinity.refresh_from_db()
    by_annotation.refresh_from_db()
    nowhere.refresh_from_db()
    assert (by_affinity.labels[NODE_POOL_LABEL], by_affinity.queue.name) == ("a100", "vision-a100")
    assert (by_annotation.labels[NODE_POOL_LABEL], by_annotation.queue.name) == ("h100", "vision-h100")
    assert nowhere.labels[NODE_POOL_LABEL] == UNASSIGNED_POOL
    assert not assign(None, org).messages  # a second pass changes nothing


def test_each_pools_shard_schedules_only_its_own_and_h100_quota_is_not_usable_in_a100(org):
    on_h100 = workload(org, "h", pools="h100", gpu=4)
    on_a100 = workload(org, "a", pools="a100", gpu=1)
    waiting = workload(org, "w")
    for shard in SchedulingShard.objects.filter(cluster=org).order_by("name"):
        run_and_record_cycle(shard, trigger="test")
    placed = {p.workload.name: p.node.name for p in Pod.objects.filter(state__in=ALLOCATED_POD_STATES)
              .select_related("workload", "node")}
    assert placed == {"h": "h1"}  # a100's limit is 0 for vision, though a1 is free; "w" goes nowhere
    assert waiting.pods.get().state not in ALLOCATED_POD_STATES
    # With an a100 limit, the a100 shard places it on its own node.
    unlimited = {"deserved": 0, "limit": -1, "over_quota_weight": 1}
    services.update_project(on_h100.queue.org_owner.project, {"queues": [
        {"pool": "h100", "gpu": gpus(8, 8), "cpu": unlimited, "memory": unlimited},
        {"pool": "a100", "gpu": gpus(0, 8), "cpu": unlimited, "memory": unlimited}]})
    for shard in SchedulingShard.objects.filter(cluster=org).order_by("name"):
        run_and_record_cycle(shard, trigger="test")
    assert on_a100.pods.get().node.name == "a1"
