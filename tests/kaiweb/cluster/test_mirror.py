"""The database mirror of a Kubernetes cluster, filled from the fake API server with the official client."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kaiweb.audit.models import AuditEntry
from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.models import (
    Cluster,
    GpuDevice,
    MirrorState,
    Node,
    PendingReport,
    Topology,
    UnreadableObject,
)
from kaiweb.cluster.watch import ClusterWatcher
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.scheduling import write_back
from kaiweb.scheduling.models import PendingReason
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from tests.factories import QueueFactory, recorded_of
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def qspec(gpu_quota: float = 0, *, parent: str | None = None, gpu_limit: float = -1, priority: int = 100) -> dict:
    """A Queue CRD spec with every value explicit (unset limits would mean a cap of zero)."""
    spec: dict[str, Any] = {"priority": priority, "resources": {
        "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }}
    if parent:
        spec["parentQueue"] = parent
    return spec


@pytest.fixture
def gateway(kube_apiserver: FakeKubeApiServer) -> KubernetesGateway:  # noqa: F811
    return KubernetesGateway(kube_apiserver.api_client, request_timeout=2.0, max_attempts=2, sleep=lambda _: None)


@pytest.fixture
def cluster() -> Cluster:
    return mirror.kubernetes_cluster("k8s")


@pytest.fixture
def server(kube_apiserver: FakeKubeApiServer) -> FakeKubeApiServer:  # noqa: F811
    """A small cluster: two GPU nodes, a queue tree, a gang, a single pod, a fractional pod."""
    s = kube_apiserver
    s.add_node("gpu-1", gpus=4, labels={"nvidia.com/gpu.product": "H100", "nvidia.com/gpu.memory": "81559",
                                        "topology.kubernetes.io/zone": "a"})
    s.add_node("gpu-2", gpus=2)
    s.add_queue("research", qspec(8))
    s.add_queue("team-a", qspec(4, parent="research"))
    s.add_pod_group("train", {"queue": "team-a", "minMember": 2, "priorityClassName": "train"})
    s.add_priority_class("train", 50)
    for i in range(2):
        s.add_pod(f"train-{i}", queue=None, pod_group="train", requests={"cpu": "2", "nvidia.com/gpu": "1"})
    s.add_pod("solo", queue="team-a", requests={"cpu": "500m", "memory": "1Gi"}, node="gpu-2", phase="Running")
    s.add_pod("half", queue="team-a", annotations={"gpu-fraction": "0.5"})
    return s


def mirror_view(cluster: Cluster) -> dict[str, Any]:
    """The mirror as plain data, for comparing two ways of filling it."""
    return {
        "nodes": sorted(Node.objects.filter(cluster=cluster).values_list(
            "name", "allocatable_gpu", "allocatable_cpu", "ready", "gpu_product")),
        "devices": sorted(GpuDevice.objects.filter(node__cluster=cluster).values_list("node__name", "index")),
        "workloads": sorted(Workload.objects.filter(cluster=cluster).values_list(
            "namespace", "name", "queue__name", "state", "min_member")),
        "pods": sorted(Pod.objects.filter(workload__cluster=cluster).values_list(
            "workload__name", "name", "state", "node__name", "gpu", "gpu_fraction", "cpu")),
        "problems": sorted(UnreadableObject.objects.filter(cluster=cluster).values_list(
            "kind", "namespace", "name", "field", "deferred")),
    }


# -- full sync --------------------------------------------------------------------------------


def test_sync_full_mirrors_nodes_devices_workloads_and_pods(server: FakeKubeApiServer, gateway: KubernetesGateway,
                                                            cluster: Cluster) -> None:
    report = mirror.sync_full(gateway, cluster)

    n1 = Node.objects.get(cluster=cluster, name="gpu-1")
    assert (n1.allocatable_gpu, n1.allocatable_cpu, n1.gpu_product, n1.gpu_memory_mib) == (4, 64000, "H100", 81559)
    assert n1.topology == {"zone": "a"}
    assert list(n1.gpus.values_list("index", "product")) == [(i, "H100") for i in range(4)]
    assert GpuDevice.objects.filter(node__name="gpu-2").count() == 2

    train = Workload.objects.get(cluster=cluster, name="train")
    assert (train.queue.name, train.min_member, train.state) == ("team-a", 2, WorkloadState.PENDING)
    assert train.priority_class == PriorityClass.objects.get(name="train")  # imported from the cluster
    assert sorted(train.pods.values_list("name", "gpu", "cpu")) == [("train-0", 1.0, 2000.0), ("train-1", 1.0, 2000.0)]

    solo = Workload.objects.get(cluster=cluster, name__startswith="pod-solo-")
    assert solo.labels[mirror.IMPLICIT_GROUP_LABEL] == "true"
    assert solo.state == WorkloadState.RUNNING
    pod = solo.pods.get()
    assert (pod.state, pod.node.name, pod.memory, pod.started_at is not None) == (PodState.RUNNING, "gpu-2", 2**30,
                                                                                 True)
    half = Pod.objects.get(name="half")
    assert (half.gpu, half.gpu_fraction, half.workload.queue.name) == (0, 0.5, "team-a")
    assert report.nodes["created"] == 2
    assert report.pods["created"] == 4
    assert report.workloads["created"] == 3
    assert report.problems == []


def test_a_second_sync_changes_nothing_and_deletions_in_the_cluster_reach_the_mirror(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.sync_full(gateway, cluster)
    again = mirror.sync_full(gateway, cluster)
    assert again.nodes == again.pods == again.workloads == {"created": 0, "updated": 0, "deleted": 0}

    server.remove("pods", "solo")
    server.remove("nodes", "gpu-2")
    server.remove("podgroups", "train")
    server.add_pod("half", queue="team-a", annotations={"gpu-fraction": "0.5"}, node="gpu-1", phase="Running")
    report = mirror.sync_full(gateway, cluster)

    assert list(Node.objects.filter(cluster=cluster).values_list("name", flat=True)) == ["gpu-1"]
    assert not Workload.objects.filter(name__startswith="pod-solo-").exists()
    assert not Workload.objects.filter(name="train").exists()
    half = Pod.objects.get(name="half")
    assert (half.state, half.node.name, half.workload.state) == (PodState.RUNNING, "gpu-1", WorkloadState.RUNNING)
    # The PodGroup is gone but its pods are not (yet): they wait for it, recorded with the rule.
    waiting = UnreadableObject.objects.get(cluster=cluster, name="train-0")
    assert (waiting.field, waiting.deferred) == ("metadata.annotations[pod-group-name]", True)
    assert "must name an existing PodGroup" in waiting.rule
    assert report.nodes["deleted"] == 1
    assert report.workloads["deleted"] == 2


def test_unknown_queue_and_queue_with_children_are_problems_on_that_workload_and_the_rest_is_applied(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    server.add_pod_group("lost", {"queue": "nowhere", "minMember": 1})
    server.add_pod("lost-0", queue=None, pod_group="lost")
    server.add_pod("on-parent", queue="research")

    mirror.sync_full(gateway, cluster)

    lost = UnreadableObject.objects.get(cluster=cluster, kind="PodGroup", name="lost")
    assert lost.field == "spec.queue"
    assert "must name an existing queue" in lost.rule
    assert "'nowhere'" in lost.message
    parent = UnreadableObject.objects.get(cluster=cluster, kind="Pod", name="on-parent")
    assert parent.field == "metadata.labels[kai.scheduler/queue]"
    assert "must name a leaf queue" in parent.rule
    member = UnreadableObject.objects.get(cluster=cluster, kind="Pod", name="lost-0")
    assert "PodGroup lost, which is not scheduled" in member.rule
    assert not Workload.objects.filter(name="lost").exists()
    assert not Pod.objects.filter(name__in=["lost-0", "on-parent"]).exists()
    assert Workload.objects.filter(cluster=cluster).count() == 3  # the others are mirrored

    # The queue appears: the next sync mirrors the workload and forgets the problem.
    server.add_queue("nowhere", qspec(1))
    mirror.sync_full(gateway, cluster)
    assert Workload.objects.get(name="lost").queue.name == "nowhere"
    assert not UnreadableObject.objects.filter(name__in=["lost", "lost-0"]).exists()


def test_an_unreadable_pod_is_recorded_with_field_and_rule_and_left_out_unless_it_holds_resources(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    server.add_pod("broken", queue="team-a", annotations={"gpu-fraction": "half"})
    mirror.sync_full(gateway, cluster)

    row = UnreadableObject.objects.get(cluster=cluster, kind="Pod", name="broken")
    assert (row.field, row.rule, row.deferred) == ("metadata.annotations[gpu-fraction]", "must be a number in (0, 1]",
                                                   False)
    assert "'half'" in row.message
    assert not Pod.objects.filter(name="broken").exists()
    assert Pod.objects.filter(workload__cluster=cluster).count() == 4

    # A running pod that becomes unreadable keeps its last row: its node is still in use.
    server.add_pod("solo", queue="team-a", node="gpu-2", phase="Running", annotations={"gpu-memory": "-1"})
    mirror.sync_full(gateway, cluster)
    assert Pod.objects.get(name="solo").state == PodState.RUNNING
    assert UnreadableObject.objects.get(name="solo").field == "metadata.annotations[gpu-memory]"

    # Fixed: the record goes away.
    server.add_pod("broken", queue="team-a", annotations={"gpu-fraction": "0.25"})
    mirror.sync_full(gateway, cluster)
    assert not UnreadableObject.objects.filter(name="broken").exists()
    assert Pod.objects.get(name="broken").gpu_fraction == 0.25


def test_an_unreadable_node_is_recorded_and_its_row_is_kept_but_not_ready(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.sync_full(gateway, cluster)
    node = server.get("nodes", "gpu-2")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    server.put("nodes", node)

    mirror.sync_full(gateway, cluster)

    assert Node.objects.get(name="gpu-2").ready is False
    assert UnreadableObject.objects.get(kind="Node", name="gpu-2").field == "status.allocatable[nvidia.com/gpu]"


@pytest.mark.parametrize("size", [3, 40])
def test_a_full_sync_takes_a_bounded_number_of_queries(kube_apiserver: FakeKubeApiServer,  # noqa: F811
                                                       gateway: KubernetesGateway, cluster: Cluster,
                                                       size: int) -> None:
    kube_apiserver.add_queue("q", qspec(8))
    for i in range(size):
        kube_apiserver.add_node(f"n{i}", gpus=8)
        kube_apiserver.add_pod_group(f"g{i}", {"queue": "q", "minMember": 2})
        for j in range(2):
            kube_apiserver.add_pod(f"g{i}-{j}", queue=None, pod_group=f"g{i}", requests={"nvidia.com/gpu": "1"})
        kube_apiserver.add_pod(f"s{i}", queue="q", node=f"n{i}", phase="Running")
    mirror.sync_full(gateway, cluster)  # imports the queue (its own audited writes) and creates the rows

    kube_apiserver.add_node(f"n{size}", gpus=8)
    for i in range(size):
        kube_apiserver.add_pod(f"g{i}-0", queue=None, pod_group=f"g{i}", node=f"n{i}", phase="Running")
    with CaptureQueriesContext(connection) as ctx:
        report = mirror.sync_full(gateway, cluster)

    assert report.pods["updated"] == size
    assert report.nodes["created"] == 1
    # 25 on SQLite and Postgres for both sizes: the same statements whatever the number of objects.
    assert len(ctx.captured_queries) <= 30, [q["sql"][:120] for q in ctx.captured_queries]


# -- Queue CRDs both ways ---------------------------------------------------------------------


def test_queue_sync_creates_imports_and_the_database_wins_on_conflict(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    QueueFactory(name="db-only", gpu_quota=2)
    QueueFactory(name="both", gpu_quota=6, gpu_limit=8, cpu_quota=-1, cpu_limit=-1, memory_quota=-1, memory_limit=-1,
                 cpu_over_quota_weight=1, memory_over_quota_weight=1, gpu_over_quota_weight=1)
    kube_apiserver.add_queue("both", qspec(3, gpu_limit=8))
    kube_apiserver.add_queue("crd-only", qspec(5))

    messages, problems = mirror.sync_queues(gateway, cluster)

    assert problems == []
    assert kube_apiserver.get("queues", "db-only")["spec"]["resources"]["gpu"]["quota"] == 2
    assert kube_apiserver.get("queues", "both")["spec"]["resources"]["gpu"]["quota"] == 6  # the database won
    assert Queue.objects.get(name="crd-only").gpu_quota == 5  # imported
    assert Queue.objects.get(name="both").gpu_quota == 6
    said = " ".join(messages)
    assert "resources.gpu.quota 3 → 6" in said
    assert "crd-only exists only in the cluster: imported" in said
    override = AuditEntry.objects.get(object_type="queues.queue", object_repr="both")
    assert override.changes() == {"cluster spec.resources.gpu.quota": (3.0, 6.0)}
    assert AuditEntry.objects.filter(object_repr="crd-only", action="create").exists()

    # Deleted in the database after both sides had it: deleted in the cluster too.
    Queue.objects.filter(name="db-only").delete()
    messages, _ = mirror.sync_queues(gateway, cluster)
    assert kube_apiserver.get("queues", "db-only") is None
    assert any("db-only was deleted in the database" in m for m in messages)
    # A queue the database never had stays an import, never a deletion.
    assert kube_apiserver.get("queues", "crd-only") is not None


def test_a_crd_only_queue_kaiweb_refuses_is_recorded_with_the_field_and_rule(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:  # noqa: F811
    kube_apiserver.add_queue("fine", qspec(1))
    kube_apiserver.add_queue("orphan", qspec(4, parent="nowhere"))

    mirror.sync_full(gateway, cluster)

    assert Queue.objects.filter(name="fine").exists()
    assert not Queue.objects.filter(name="orphan").exists()
    row = UnreadableObject.objects.get(kind="Queue", name="orphan")
    assert row.field == "spec.parentQueue"
    assert "not imported" in row.rule


# -- watch events -----------------------------------------------------------------------------


def test_watch_events_give_the_same_mirror_as_a_full_sync(server: FakeKubeApiServer, gateway: KubernetesGateway,
                                                         cluster: Cluster) -> None:
    server.add_pod("broken", queue="team-a", annotations={"gpu-fraction": "2"})
    server.add_pod_group("late", {"queue": "team-b", "minMember": 1})
    server.add_pod("late-0", queue=None, pod_group="late")
    # The pods are handed out before their PodGroups and queues: they wait, then are applied.
    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway),
                             kinds=("Node", "Pod", "PodGroup", "Queue"))
    watcher.run_once()
    assert UnreadableObject.objects.get(name="late").deferred
    server.add_queue("team-b", qspec(1, parent="research"))
    watcher.run_once()
    watched = mirror_view(cluster)

    other = mirror.kubernetes_cluster("k8s-full")
    mirror.sync_full(gateway, other)
    assert watched == mirror_view(other)
    assert Workload.objects.get(cluster=cluster, name="late").pods.get().name == "late-0"


def test_a_pod_seen_before_its_node_waits_for_the_node(server: FakeKubeApiServer, gateway: KubernetesGateway,
                                                      cluster: Cluster) -> None:
    def apply(e: Any) -> None:
        mirror.apply_event(e, cluster, gateway)

    ClusterWatcher(gateway, apply, kinds=("Pod", "PodGroup", "Queue")).run_once()
    row = UnreadableObject.objects.get(name="solo")
    assert (row.field, row.deferred) == ("spec.nodeName", True)
    assert "'gpu-2'" in row.message
    assert not Pod.objects.filter(name="solo").exists()  # never counted without the node it uses
    assert Pod.objects.filter(workload__cluster=cluster).count() == 3

    ClusterWatcher(gateway, apply, kinds=("Node",)).run_once()

    assert Pod.objects.get(name="solo").node.name == "gpu-2"
    assert not UnreadableObject.objects.filter(cluster=cluster).exists()


def test_a_pod_deleted_and_a_node_added_reach_the_mirror_through_the_watch(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway))
    watcher.run_once()
    assert Pod.objects.filter(workload__cluster=cluster).count() == 4

    server.remove("pods", "solo")
    server.remove("pods", "train-1")
    server.add_node("gpu-3", gpus=8)
    watcher.run_once()

    assert not Workload.objects.filter(name__startswith="pod-solo-").exists()  # its only pod is gone
    assert list(Workload.objects.get(name="train").pods.values_list("name", flat=True)) == ["train-0"]
    node = Node.objects.get(cluster=cluster, name="gpu-3")
    assert node.allocatable_gpu == 8
    assert node.gpus.count() == 8
    assert MirrorState.objects.get(cluster=cluster).watcher_heartbeat_at is not None  # SYNCED events beat


def test_a_queue_edited_in_the_cluster_is_taken_into_the_database_by_the_watcher(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.sync_full(gateway, cluster)  # both sides agree on team-a (gpu quota 4)
    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway), kinds=("Queue",))
    watcher.run_once()
    server.add_queue("team-a", qspec(1, parent="research"))  # kubectl edit / GitOps

    watcher.run_once()

    assert Queue.objects.get(name="team-a").gpu_quota == 1
    assert server.get("queues", "team-a")["spec"]["resources"]["gpu"]["quota"] == 1
    entry = AuditEntry.objects.filter(object_repr="team-a", action="update").first()
    assert entry is not None  # the database's change is on record, with where it came from


def test_a_queue_edited_in_the_database_goes_to_the_cluster(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.sync_queues(gateway, cluster)
    Queue.objects.filter(name="team-a").update(gpu_quota=7)

    messages, problems = mirror.sync_queues(gateway, cluster)

    assert problems == []
    assert server.get("queues", "team-a")["spec"]["resources"]["gpu"]["quota"] == 7
    assert any("resources.gpu.quota 4 → 7" in m for m in messages)


def test_a_queue_edited_on_both_sides_takes_the_clusters_values_and_says_which_it_replaced(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.sync_queues(gateway, cluster)
    Queue.objects.filter(name="team-a").update(gpu_quota=7)
    server.add_queue("team-a", qspec(2, parent="research"))

    messages, problems = mirror.sync_queues(gateway, cluster)

    assert problems == []
    assert Queue.objects.get(name="team-a").gpu_quota == 2
    assert server.get("queues", "team-a")["spec"]["resources"]["gpu"]["quota"] == 2
    said = " ".join(messages)
    assert "changed in both the cluster and the database; the cluster wins" in said
    assert "resources.gpu.quota 7 → 2" in said
    # Agreed now: the next sync changes nothing.
    again, _ = mirror.sync_queues(gateway, cluster)
    assert not [m for m in again if "team-a" in m]


def test_sync_into_lists_only_queues_while_the_watcher_is_alive(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    mirror.record_heartbeat(cluster)
    before = len(server.requests)
    assert mirror.observe(gateway, cluster)["mode"] == "queues"
    paths = [r.path for r in server.requests[before:] if r.method == "GET"]
    assert paths
    # Only the Queue CRDs, the Topology and SchedulingShard objects (not watched), the PodGroups (their
    # stamps, as of now) and the few reservation pods of shared GPUs: no pod or node listing.
    assert all(p.endswith(("/queues", "/topologies", "/schedulingshards", "/podgroups"))
               or "/namespaces/kai-resource-reservation/pods" in p for p in paths)

    MirrorState.objects.filter(cluster=cluster).update(watcher_heartbeat_at=None)
    assert mirror.observe(gateway, cluster)["mode"] == "full"
    assert Pod.objects.filter(workload__cluster=cluster).count() == 4


def test_a_topology_reaches_the_mirror_while_the_watcher_keeps_it(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    """The watcher does not watch Topologies: the cycle's observe step lists them, so a Topology made
    while watch_cluster runs is known to the scheduler (its constraints are not silently ignored)."""
    server.register("topologies", "Topology", "kai.scheduler/v1alpha1", namespaced=False)
    mirror.record_heartbeat(cluster)
    levels = ["cloud.provider.com/topology-zone", "cloud.provider.com/topology-rack"]
    server.put("topologies", {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                              "metadata": {"name": "tree"}, "spec": {"levels": [{"nodeLabel": k} for k in levels]}})
    assert mirror.observe(gateway, cluster)["mode"] == "queues"
    assert list(Topology.objects.filter(cluster=cluster).values_list("name", "levels")) == [("tree", levels)]

    server.remove("topologies", "tree")
    assert mirror.observe(gateway, cluster)["mode"] == "queues"
    assert not Topology.objects.filter(cluster=cluster).exists()


# -- commands ---------------------------------------------------------------------------------


def test_sync_cluster_command_mirrors_once(server: FakeKubeApiServer) -> None:
    out = StringIO()
    call_command("sync_cluster", "--host", server.url, "--cluster", "prod", stdout=out)
    assert "cluster prod mirrored: nodes: created 2" in out.getvalue()
    assert Pod.objects.filter(workload__cluster__name="prod").count() == 4


def test_watch_cluster_command_fills_the_mirror(server: FakeKubeApiServer) -> None:
    out = StringIO()
    call_command("watch_cluster", "--once", "--host", server.url, "--cluster", "prod", stdout=out)
    assert "into cluster prod" in out.getvalue()
    assert Node.objects.filter(cluster__name="prod").count() == 2
    assert Pod.objects.filter(workload__cluster__name="prod").count() == 4
    assert mirror.watcher_is_current(Cluster.objects.get(name="prod"))


# -- write back -------------------------------------------------------------------------------


class RecordingGateway:
    """Collects what would be written to the cluster."""

    def __init__(self) -> None:
        self.statuses: list[Any] = []
        self.pending: list[tuple[str, str, str]] = []
        self.shard_conditions: list[tuple[str, list[dict[str, str]]]] = []

    def write_queue_status(self, status: Any) -> None:
        self.statuses.append(status)

    def write_shard_conditions(self, name: str, conditions: list[dict[str, str]]) -> bool:
        self.shard_conditions.append((name, conditions))
        return True

    def report_pending(self, pod: Any, reason: str, message: str) -> None:
        self.pending.append((pod.name, reason, message))

    def report_pending_many(self, reports: list[tuple[Any, str, str]]) -> list[None]:
        for pod, reason, message in reports:
            self.report_pending(pod, reason, message)
        return [None] * len(reports)

    def list_pod_groups_raw(self) -> list[dict[str, Any]]:
        return []


def test_write_back_writes_only_what_changed_since_the_last_cycle(cluster: Cluster) -> None:
    from kaiweb.cluster.models import SchedulingShard
    from tests.factories import PendingReasonFactory, PodFactory, QueueStatusFactory, SchedulingCycleFactory

    shard = SchedulingShard.objects.get(cluster=cluster)
    parent = QueueFactory(name="org")
    leaf = QueueFactory(name="leaf", parent=parent)
    job = PodFactory(name="waiting", uid="u1", workload__cluster=cluster, workload__queue=leaf).workload
    gateway = RecordingGateway()

    def cycle(reason: str, message: str, gpus: float) -> Any:
        c = SchedulingCycleFactory(shard=shard)
        PendingReason.objects.filter(workload=job).update(is_current=False)
        PendingReasonFactory(workload=job, cycle=c, reason=reason, message=message)
        QueueStatusFactory(queue=leaf, cycle=c, allocated={"cpu": 500, "memory": 2048, "gpu": gpus},
                           requested={"cpu": 500, "memory": 2048, "gpu": gpus + 1})
        QueueStatusFactory(queue=parent, cycle=c, allocated={"cpu": 500, "memory": 2048, "gpu": gpus})
        return c

    write_back.write_back(gateway, *recorded_of(cycle("OverLimit", "leaf is at its GPU limit", 1)))
    assert gateway.pending == [("waiting", "Unschedulable", "leaf is at its GPU limit")]
    written = {s.name: s for s in gateway.statuses}
    assert written["leaf"].allocated.gpus == 1
    assert written["leaf"].allocated.memory_bytes == 2048 * 10**6  # the CRD's MB → bytes
    assert written["leaf"].requested.gpus == 2
    assert written["org"].child_queues == ("leaf",)

    assert gateway.shard_conditions == [(shard.name, [{
        "type": "FieldsApplied", "status": "True", "reason": "AllApplied",
        "message": "every field the object sets is applied"}])]

    write_back.write_back(gateway, *recorded_of(cycle("OverLimit", "leaf is at its GPU limit", 1)))  # nothing changed
    assert len(gateway.pending) == 1
    assert len(gateway.statuses) == 2
    assert len(gateway.shard_conditions) == 1

    write_back.write_back(gateway, *recorded_of(cycle("NotEnoughResources", "no node has 1 free GPU", 3)))
    assert gateway.pending[-1] == ("waiting", "Unschedulable", "no node has 1 free GPU")
    assert len(gateway.statuses) == 4

    # Bound: no longer pending, so its record goes; pending again later, it is explained again.
    Pod.objects.filter(name="waiting").update(state=PodState.RUNNING)
    write_back.write_back(gateway, *recorded_of(SchedulingCycleFactory(shard=shard)))
    assert not PendingReport.objects.exists()
    Pod.objects.filter(name="waiting").update(state=PodState.PENDING)
    write_back.write_back(gateway, *recorded_of(cycle("NotEnoughResources", "no node has 1 free GPU", 3)))
    assert len(gateway.pending) == 3


def test_write_back_explains_at_most_its_budget_of_pending_pods_a_cycle_never_explained_first(
        cluster: Cluster, settings: Any) -> None:
    from kaiweb.cluster.models import SchedulingShard
    from tests.factories import PendingReasonFactory, PodFactory, SchedulingCycleFactory

    settings.KAI_PENDING_WRITES_PER_CYCLE = 2
    shard = SchedulingShard.objects.get(cluster=cluster)
    leaf = QueueFactory(name="leaf")
    jobs = [PodFactory(name=f"waiting-{i}", uid=f"u{i}", workload__cluster=cluster, workload__queue=leaf).workload
            for i in range(5)]
    gateway = RecordingGateway()

    def cycle(message: str, *, binds: int = 0) -> Any:
        c = SchedulingCycleFactory(shard=shard, binds=binds)
        PendingReason.objects.filter(workload__in=jobs).update(is_current=False)
        for job in jobs:
            PendingReasonFactory(workload=job, cycle=c, reason="NotEnoughResources", message=message)
        return c

    report = write_back.write_back(gateway, *recorded_of(cycle("no node has 1 free GPU")))
    assert [p[0] for p in gateway.pending] == ["waiting-0", "waiting-1"]
    assert (report.pending_reports, report.pending_deferred) == (2, 3)
    write_back.write_back(gateway, *recorded_of(cycle("no node has 1 free GPU")))
    write_back.write_back(gateway, *recorded_of(cycle("no node has 1 free GPU")))
    assert sorted(p[0] for p in gateway.pending) == [f"waiting-{i}" for i in range(5)]  # each once

    # A new explanation for all: the one never explained goes first even after a cycle that bound
    # (a tenth of the budget, at least one).
    PodFactory(name="waiting-new", uid="un", workload__cluster=cluster, workload__queue=leaf)
    jobs.append(Pod.objects.get(name="waiting-new").workload)
    gateway.pending.clear()
    report = write_back.write_back(gateway, *recorded_of(cycle("gang needs 4 pods", binds=3)))
    assert [p[0] for p in gateway.pending] == ["waiting-new"]
    assert report.pending_deferred == 5


def test_a_podgroup_carries_its_own_labels_into_the_shard(kube_apiserver: FakeKubeApiServer,  # noqa: F811
                                                          gateway: KubernetesGateway, cluster: Cluster) -> None:
    kube_apiserver.add_queue("q", qspec(1))
    kube_apiserver.put("podgroups", {"metadata": {"name": "pooled", "namespace": "default",
                                                  "labels": {"kai.scheduler/node-pool": "a100"}},
                                     "spec": {"queue": "q", "minMember": 1}})
    kube_apiserver.add_pod("pooled-0", queue=None, pod_group="pooled", labels={"app": "x"})

    mirror.sync_full(gateway, cluster)
    assert Workload.objects.get(name="pooled").labels == {"kai.scheduler/node-pool": "a100"}

    watched = mirror.kubernetes_cluster("k8s-watched")
    ClusterWatcher(gateway, lambda e: mirror.apply_event(e, watched, gateway), kinds=("Pod", "PodGroup")).run_once()
    assert Workload.objects.get(cluster=watched, name="pooled").labels == {"kai.scheduler/node-pool": "a100"}


def test_sync_cluster_command_speaks_json_and_refuses_a_simulated_cluster(server: FakeKubeApiServer) -> None:
    import json

    from django.core.management import CommandError

    out = StringIO()
    call_command("sync_cluster", "--host", server.url, "--cluster", "prod", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["cluster"] == "prod"
    assert data["nodes"] == {"created": 2, "updated": 0, "deleted": 0}
    assert data["pods"]["created"] == 4

    with pytest.raises(CommandError, match="'default' is a simulated cluster"):
        call_command("sync_cluster", "--host", server.url, "--cluster", "default")


def test_reservations_that_cannot_be_collected_are_reported_and_do_not_fail_the_observe_step(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster, monkeypatch) -> None:
    from kaiweb.cluster.errors import ClusterRejected

    def refused() -> list[str]:
        raise ClusterRejected("list reservation pods", "pods is forbidden", status=403, reason="Forbidden")

    monkeypatch.setattr(gateway, "collect_reservations", refused)
    observed = mirror.observe(gateway, cluster)
    assert observed["mode"] == "full"
    assert Pod.objects.filter(workload__cluster=cluster).count() == 4  # the sync went through
    assert observed["reservations"]["released"] == []
    assert "forbidden" in observed["reservations"]["error"]


def test_a_pod_with_an_owner_is_no_workload_until_the_pod_grouper_names_its_podgroup(
        server: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster) -> None:
    # A Job's pod that carries the queue label, seen before the pod-grouper annotated it: scheduled as
    # a one-pod workload, a member of an 8-pod gang would be bound alone (found by B7's B11).
    mirror.sync_full(gateway, cluster)
    pod = server.add_pod("nccl-0", queue="team-a", requests={"nvidia.com/gpu": "8"})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "nccl",
                                           "uid": "job-uid", "controller": True}]
    server.put("pods", pod)
    mirror.sync_full(gateway, cluster)

    assert not Pod.objects.filter(name="nccl-0").exists()
    row = UnreadableObject.objects.get(cluster=cluster, name="nccl-0")
    assert (row.field, row.deferred) == ("metadata.annotations[pod-group-name]", False)
    assert "pod-grouper" in row.message
    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway))
    watcher.run_once()  # the watch says the same
    assert not Pod.objects.filter(name="nccl-0").exists()
    assert UnreadableObject.objects.filter(cluster=cluster, name="nccl-0").exists()

    server.add_pod_group("pg-nccl", {"queue": "team-a", "minMember": 8})
    pod["metadata"]["annotations"]["pod-group-name"] = "pg-nccl"
    server.put("pods", pod)
    watcher.run_once()

    assert Pod.objects.get(workload__cluster=cluster, name="nccl-0").workload.name == "pg-nccl"
    assert not UnreadableObject.objects.filter(cluster=cluster, name="nccl-0").exists()
