"""What only a real kube-apiserver shows: PodDisruptionBudgets, CRD schemas, watch expiry, controllers.

Each test gets the cluster it needs from `LocalKube` (skipped without ``make kube``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from devkube.localkube import LocalKube
from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import EvictAction
from kaiweb.cluster.gateway import ClusterUnavailable
from kaiweb.cluster.models import SchedulingShard
from kaiweb.cluster.watch import ResourceWatch, WatchEvent, resource_kinds
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.scheduling.tasks import run_cycle_task
from tests.kube.fixtures import start_cluster
from tests.kube.servers import RealServer, pod_ready_status

pytestmark = pytest.mark.kube


def wait_for(what: str, check: Callable[[], Any], seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f}s"
        time.sleep(0.05)
    return value



@pytest.fixture
def gateway(server: RealServer) -> KubernetesGateway:
    return KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=2, backoff_base=0.01,
                             sleep=lambda _: None)


# -- our CRDs, validated by their own schemas ---------------------------------------------------


def test_a_valid_queue_and_pod_group_are_accepted(server: RealServer, gateway: KubernetesGateway) -> None:
    server.add_queue("team-a", {"priority": 100, "resources": {"gpu": {"quota": 2.5, "limit": -1,
                                                                       "overQuotaWeight": 1}}})
    server.add_pod_group("pg", {"queue": "team-a", "minMember": 2, "preemptibility": "preemptible"})

    assert [q.spec.gpu.quota for q in gateway.list_queues()] == [2.5]
    assert [(g.name, g.min_member) for g in gateway.list_pod_groups()] == [("pg", 2)]


def test_a_patch_for_a_pod_that_was_made_again_under_its_name_is_refused_as_gone(
        server: RealServer, gateway: KubernetesGateway) -> None:
    server.add_pod("again", requests={"cpu": "1"})
    old_uid = server.get("pods", "again")["metadata"]["uid"]
    server.remove("pods", "again", "default")
    server.add_pod("again", requests={"cpu": "1"})

    # The real server answers 422 on metadata.uid: the pod-grouper's mark is for a pod that is gone.
    assert gateway.label_pod("default", "again", old_uid, labels={"x": "1"}, annotations={}) is False
    assert (server.get("pods", "again")["metadata"].get("labels") or {}).get("x") is None
    assert gateway.annotate_pod_groups([("default", "nowhere", "", {"a": "b"})]) == [None]


@pytest.mark.parametrize(
    ("plural", "spec", "field"),
    [
        ("queues", {"resources": {"gpu": {"quota": "lots"}}}, "spec.resources.gpu.quota"),
        ("queues", {"priority": 1}, "spec.resources"),
        ("podgroups", {"queue": "team-a", "preemptibility": "sometimes"}, "spec.preemptibility"),
        ("podgroups", {"queue": "team-a", "minMember": "two"}, "spec.minMember"),
    ],
)
def test_an_invalid_object_is_refused_by_the_crd_schema(
    server: RealServer, plural: str, spec: dict[str, Any], field: str,
) -> None:
    body: dict[str, Any] = {"metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(client.ApiException) as refused:
        server.put(plural, body)

    assert refused.value.status == 422
    assert field in refused.value.body
    assert server.list(plural) == []


# -- PodDisruptionBudget: a blocked eviction is "not now", never done twice ---------------------


def _borrowers(server: RealServer, count: int) -> None:
    server.add_node("gpu-1", gpus=4)
    for i in range(count):
        pod = server.add_pod(f"borrowed-{i}", queue="borrower", node="gpu-1", labels={"app": "borrowed"},
                             requests={"cpu": "1", "nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})
        pod["status"] = pod_ready_status()
        server.put_status("pods", pod)


def _pdb_settled(server: RealServer, name: str, allowed: int) -> Callable[[], bool]:
    def check() -> bool:
        pdb = server.get("poddisruptionbudgets", name) or {}
        status = pdb.get("status") or {}
        return (status.get("observedGeneration") == pdb["metadata"].get("generation")
                and status.get("disruptionsAllowed") == allowed)
    return check


def test_an_eviction_blocked_by_a_pdb_is_refused_as_retry_later(server: RealServer, gateway: KubernetesGateway) -> None:
    _borrowers(server, 2)
    server.add_pdb("keep-all", {"app": "borrowed"}, min_available=2)
    wait_for("the disruption controller computes the budget", _pdb_settled(server, "keep-all", 0))
    uid = server.get("pods", "borrowed-0")["metadata"]["uid"]
    sleeps: list[float] = []
    patient = KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=4, sleep=sleeps.append)

    with pytest.raises(ClusterUnavailable, match="PodDisruptionBudget") as err:
        patient.evict(EvictAction("default", "borrowed-0", uid, grace_seconds=30))

    assert err.value.status == 429
    assert sleeps == []  # a budget's refusal is not waited out while the cycle holds its shard's lock
    assert "deletionTimestamp" not in server.get("pods", "borrowed-0")["metadata"]


def _run_cycle(shard: SchedulingShard) -> SchedulingCycle:
    cycle = SchedulingCycle.objects.get(pk=run_cycle_task(shard.pk, "test"))
    assert cycle.status == CycleStatus.SUCCEEDED, cycle.error
    return cycle


def _qspec(gpu_quota: float) -> dict[str, Any]:
    return {"priority": 100, "resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                           "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                           "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}


@pytest.mark.django_db
def test_a_reclaim_blocked_by_a_pdb_fails_this_cycle_and_succeeds_once_the_budget_allows(
    server: RealServer, kube_shard: SchedulingShard,
) -> None:
    from kaiweb.cluster.services import save_shard

    save_shard(kube_shard, {"eviction_mode": "evict"})  # the Eviction API (KAI deletes: tests/kube/test_eviction_modes_real.py)
    server.add_queue("borrower", _qspec(0))
    server.add_queue("owner", _qspec(4))
    _borrowers(server, 4)
    server.add_pod("owners-job", queue="owner", requests={"cpu": "1", "nvidia.com/gpu": "2"},
                   limits={"nvidia.com/gpu": "2"})
    server.add_pdb("borrowers", {"app": "borrowed"}, min_available=4)
    wait_for("the disruption controller computes the budget", _pdb_settled(server, "borrowers", 0))

    _run_cycle(kube_shard)

    evictions = Decision.objects.filter(kind=DecisionKind.EVICT)
    assert evictions.count() == 2
    assert set(evictions.values_list("status", flat=True)) == {DecisionStatus.FAILED}
    assert all("PodDisruptionBudget" in d.message for d in evictions)
    assert [p for p in server.list("pods") if p["metadata"].get("deletionTimestamp")] == []

    # The budget is relaxed: the next cycle evicts two, and the one after evicts nobody more.
    pdb = server.get("poddisruptionbudgets", "borrowers")
    pdb["spec"]["minAvailable"] = 2
    server.resource("poddisruptionbudgets").replace(body=pdb, namespace="default")
    wait_for("the budget allows two", _pdb_settled(server, "borrowers", 2))
    _run_cycle(kube_shard)
    _run_cycle(kube_shard)

    applied = Decision.objects.filter(kind=DecisionKind.EVICT, status=DecisionStatus.APPLIED)
    assert applied.count() == 2
    terminating = {p["metadata"]["name"] for p in server.list("pods") if p["metadata"].get("deletionTimestamp")}
    assert terminating == set(applied.values_list("pod_name", flat=True))
    assert len(terminating) == 2


# -- watch expiry after an etcd compaction -------------------------------------------------------


@pytest.fixture(scope="module")
def uncached_cluster() -> Iterator[LocalKube]:
    """Pod watches served by etcd itself (no watch cache): a compaction expires old resourceVersions."""
    kube = start_cluster(controllers=None, apiserver_args=["--watch-cache-sizes=pods#0"])
    try:
        yield kube
    finally:
        kube.stop()


def test_after_an_etcd_compaction_the_watch_gets_410_and_relists(uncached_cluster: LocalKube) -> None:
    server = RealServer(uncached_cluster)
    server.wipe()
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, backoff_base=0.01, sleep=lambda _: None)
    events: list[WatchEvent] = []
    (kind,) = resource_kinds(gateway, ["Pod"])
    watch = ResourceWatch(gateway, kind, events.append, timeout_seconds=1, backoff_base=0.01, sleep=lambda _: None)
    for name in ("keep", "change", "drop"):
        server.add_pod(name)
    assert watch.step() is True
    listed_rv = watch.resource_version
    events.clear()
    # Changes while the watcher is away, then etcd forgets the history they were written in.
    server.add_pod("new")
    client.CoreV1Api(server.api_client).patch_namespaced_pod("change", "default",
                                                             {"metadata": {"labels": {"moved": "yes"}}})
    server.remove("pods", "drop")
    server.compact()

    assert watch.step() is True

    assert [(e.type, e.name) for e in events if e.type != "SYNCED"] == [
        ("MODIFIED", "change"), ("ADDED", "new"), ("DELETED", "drop")]
    assert watch.relists == 2
    assert int(watch.resource_version) > int(listed_rv)
    assert set(watch.known) == {("default", "keep"), ("default", "change"), ("default", "new")}
    events.clear()
    server.add_pod("later")
    watch.step()
    assert [(e.type, e.name) for e in events] == [("ADDED", "later")]


def test_stop_ends_a_watch_whose_connection_is_quiet(server: RealServer) -> None:
    """A watcher being stopped (SIGTERM) must not wait for a quiet kind's next event: its connection,
    open for minutes, is shut down by stop(), and the thread ends without logging a failure."""
    server.wipe()
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0)
    (kind,) = resource_kinds(gateway, ["Queue"])
    watch = ResourceWatch(gateway, kind, lambda _: None, timeout_seconds=600)
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    thread.start()
    wait_for("the first list", lambda: watch.resource_version)
    time.sleep(0.5)  # then the watch connection, with nothing to read

    stop.set()
    watch.stop()
    thread.join(timeout=60)  # far below the connection's 600 s: only stop() can end it

    assert not thread.is_alive()
    assert watch.errors == 0


# -- real workload controllers create the pods the mirror reads ----------------------------------


@pytest.fixture(scope="module")
def controllers_cluster() -> Iterator[LocalKube]:
    kube = start_cluster(controllers="job,replicaset,deployment,garbagecollector,namespace,disruption")
    try:
        yield kube
    finally:
        kube.stop()


def _template(app: str, restart: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app, "kai.scheduler/queue": "team-a"}},
            "spec": {"schedulerName": "kai-scheduler", "restartPolicy": restart,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                   "limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.mark.django_db
def test_pods_made_by_job_and_deployment_controllers_reach_the_mirror(
    controllers_cluster: LocalKube, settings: Any,
) -> None:
    server = RealServer(controllers_cluster)
    server.wipe()
    server.ensure_namespace("ml")
    server.add_queue("team-a", _qspec(4))
    server.add_node("gpu-1", gpus=8)
    batch, apps = client.BatchV1Api(server.api_client), client.AppsV1Api(server.api_client)
    batch.create_namespaced_job("ml", {"metadata": {"name": "train"}, "spec": {
        "parallelism": 2, "completions": 2, "template": _template("train", "Never")}})
    apps.create_namespaced_deployment("ml", {"metadata": {"name": "serve"}, "spec": {
        "replicas": 3, "selector": {"matchLabels": {"app": "serve"}}, "template": _template("serve", "Always")}})
    core = client.CoreV1Api(server.api_client)
    wait_for("the controllers create 5 pods", lambda: len(core.list_namespaced_pod("ml").items) == 5)
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0)
    cluster = mirror.kubernetes_cluster("k8s")

    # Before the pod-grouper has named their PodGroups, pods with an owner belong to no workload (a
    # gang's pod is never scheduled alone): each is a problem saying so.
    report = mirror.sync_full(gateway, cluster)
    assert report.pods["created"] == 0
    assert len(report.problems) == 5
    assert all("pod-grouper" in p for p in report.problems)

    report = mirror.observe(gateway, cluster)  # the observe step: pod-grouper, then the mirror

    assert report["pods"]["created"] == 5
    assert report["problems"] == []
    from kaiweb.workloads.models import Pod

    owners = sorted(name.rsplit("-", 1)[0] for name in Pod.objects.values_list("name", flat=True))
    assert owners.count("train") == 2
    assert sum(1 for o in owners if o.startswith("serve-")) == 3


@pytest.mark.django_db
def test_the_pod_grouper_groups_what_real_controllers_create(controllers_cluster: LocalKube, settings: Any) -> None:
    server = RealServer(controllers_cluster)
    server.wipe()
    server.ensure_namespace("grouped")
    server.add_queue("team-a", _qspec(4))
    server.add_node("gpu-1", gpus=8)
    batch, apps = client.BatchV1Api(server.api_client), client.AppsV1Api(server.api_client)
    batch.create_namespaced_job("grouped", {"metadata": {"name": "train"}, "spec": {
        "parallelism": 2, "completions": 2, "template": _template("train", "Never")}})
    apps.create_namespaced_deployment("grouped", {"metadata": {"name": "serve"}, "spec": {
        "replicas": 2, "selector": {"matchLabels": {"app": "serve"}}, "template": _template("serve", "Always")}})
    core = client.CoreV1Api(server.api_client)
    wait_for("the controllers create 4 pods", lambda: len(core.list_namespaced_pod("grouped").items) == 4)
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0)
    cluster = mirror.kubernetes_cluster("k8s")

    mirror.observe(gateway, cluster)  # the observe step: pod-grouper, then the mirror

    groups = client.CustomObjectsApi(server.api_client).list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", "grouped", "podgroups")["items"]
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        by_owner.setdefault(g["metadata"]["ownerReferences"][0]["kind"], []).append(g)
    (job_group,) = by_owner["Job"]  # one gang for the Job's pods
    assert job_group["spec"]["queue"] == "team-a"
    assert len(by_owner["Pod"]) == 2  # a Deployment's pods are each their own workload...
    assert {g["spec"]["priorityClassName"] for g in by_owner["Pod"]} == {"inference"}  # ...of inference class
    from kaiweb.workloads.models import Workload

    assert Workload.objects.filter(cluster=cluster, namespace="grouped").count() == 3
    assert set(Workload.objects.filter(cluster=cluster, namespace="grouped").values_list("name", flat=True)) == {
        g["metadata"]["name"] for g in groups}
