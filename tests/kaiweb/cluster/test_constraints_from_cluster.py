"""What a pod and a node say about placement reaches the engine: raw objects → parse → mirror →
snapshot → cycle. Taints, node selectors, node affinity and MIG refuse the pod with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.parsing import parse_node, parse_pod
from kaiweb.cluster.backends.types import ObservedPod, Unreadable
from kaiweb.cluster.models import Cluster, Node, UnreadableObject
from kaiweb.scheduling.adapters import build_snapshot
from kaiweb.workloads.models import Pod
from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture
from tests.scheduler_core.engine_builders import ALLOCATE_ONLY

pytestmark = pytest.mark.django_db

QUEUE = {"priority": 100, "resources": {
    "gpu": {"quota": 16, "limit": -1, "overQuotaWeight": 1},
    "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
}}
ZONE = "topology.kubernetes.io/zone"


def raw_pod(name: str, spec: dict[str, Any] | None = None, requests: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "labels": {"kai.scheduler/queue": "team-a", "app": name}},
        "spec": {"containers": [{"name": "main", "resources": {"requests": requests or {"cpu": "1"}}}],
                 **(spec or {})},
        "status": {"phase": "Pending"},
    }


# ---- parsing -------------------------------------------------------------------------------------


def test_parse_pod_reads_tolerations_affinity_and_host_ports():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 20, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}],
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]},
    }
    pod = parse_pod(raw_pod("p", {
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"}],
        "affinity": affinity,
        "containers": [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 8080},
                                                  {"containerPort": 53, "hostPort": 53, "protocol": "UDP",
                                                   "hostIP": "10.0.0.1"}]}],
    }))
    assert isinstance(pod, ObservedPod)
    assert [(t.key, t.operator, t.effect) for t in pod.tolerations] == [("gpu", "Exists", "NoSchedule"),
                                                                         ("", "Exists", "")]
    assert pod.host_ports == ("TCP/8080", "UDP/53/10.0.0.1")
    terms = pod.affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}], "matchFields": []}]
    anti = pod.affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["labelSelector"]["matchLabels"] == {"app": "db"}


@pytest.mark.parametrize(("spec", "field", "rule"), [
    ({"tolerations": [{"key": "gpu", "operator": "Maybe"}]}, "spec.tolerations[0].operator", "must be Equal or Exists"),
    ({"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]}, "spec.tolerations[0].value",
     "must be empty when the operator is Exists"),
    ({"tolerations": [{"key": "gpu", "effect": "Sometimes"}]}, "spec.tolerations[0].effect", "must be empty or one of"),
    ({"tolerations": "gpu"}, "spec.tolerations", "must be a list"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator", "must be one of In, NotIn"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["new"]}]}]}}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values", "must be one whole number with operator Gt"),
    ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": {}}]}}},
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "from 1 to 100"),
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "is required"),
    ({"containers": [{"name": "c", "ports": [{"hostPort": 70000}]}]}, "spec.containers[0].ports[0].hostPort",
     "must be a port number"),
])
def test_a_malformed_constraint_is_unreadable_naming_the_field(spec, field, rule):
    pod = parse_pod(raw_pod("bad", spec))
    assert isinstance(pod, Unreadable)
    assert pod.field == field
    assert rule in pod.rule
    assert field in pod.message


def test_a_taint_with_an_unknown_effect_makes_the_node_unreadable():
    node = parse_node({"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "Never"}]},
                       "status": {"allocatable": {"cpu": "4"}}})
    assert isinstance(node, Unreadable)
    assert node.field == "spec.taints[0].effect"


# ---- through the mirror and the engine ---------------------------------------------------------


@pytest.fixture
def gateway(kube_apiserver: FakeKubeApiServer) -> KubernetesGateway:  # noqa: F811
    return KubernetesGateway(kube_apiserver.api_client, request_timeout=2.0, max_attempts=2, sleep=lambda _: None)


@pytest.fixture
def cluster() -> Cluster:
    return mirror.kubernetes_cluster("k8s")


def add_pod(server: FakeKubeApiServer, name: str, spec: dict[str, Any] | None = None,
            requests: dict[str, str] | None = None) -> None:
    obj = server.add_pod(name, queue="team-a", requests=requests or {"cpu": "1", "nvidia.com/gpu": "1"})
    obj["spec"].update(spec or {})
    server.put("pods", obj)


def cycle(gateway: KubernetesGateway, cluster: Cluster) -> m.CycleResult:
    mirror.sync_full(gateway, cluster)
    snapshot, _ = build_snapshot(None, now=1_000_000.0)
    return run_cycle(snapshot, ALLOCATE_ONLY)


def bound(result: m.CycleResult) -> dict[str, str | None]:
    return {t.task: t.node for t in result.tasks}


def test_placement_constraints_from_the_cluster_refuse_pods_with_the_reason(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster):  # noqa: F811
    s = kube_apiserver
    s.add_queue("team-a", QUEUE)
    s.add_node("plain", gpus=8, labels={ZONE: "a"})
    tainted = s.add_node("tainted", gpus=8, labels={ZONE: "b"})
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}
    s.put("nodes", tainted)
    s.add_node("mig", gpus=0, labels={ZONE: "a", "nvidia.com/mig.strategy": "mixed",
                                      "node-role.kubernetes.io/mig-enabled": "true"},
               extra_allocatable={"nvidia.com/mig-1g.10gb": "7"})
    # a pod that only tolerates the taint may go anywhere (binpack); one that needs zone b must
    # tolerate the taint; one that selects a missing label waits
    add_pod(s, "selector", {"nodeSelector": {"pool": "missing"}})
    add_pod(s, "zone-b", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]}]}}}})
    add_pod(s, "zone-b-tolerant", {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]}]}}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]})
    add_pod(s, "mig-pod", requests={"cpu": "1", "nvidia.com/mig-1g.10gb": "1"})
    add_pod(s, "mig-too-many", requests={"cpu": "1", "nvidia.com/mig-3g.40gb": "1"})

    result = cycle(gateway, cluster)

    assert not UnreadableObject.objects.filter(cluster=cluster).exists()
    assert Node.objects.get(name="tainted").taints == [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    assert Pod.objects.get(name="selector").constraints["nodeSelector"] == {"pool": "missing"}
    placed = bound(result)
    assert placed["zone-b-tolerant"] == "tainted"
    assert placed["mig-pod"] == "mig"
    pending = {uid.split("/")[-1]: r for uid, r in result.pending.items()}
    assert placed["selector"] is None
    # Kubernetes' filter order: the taint is the tainted node's reason, the selector the others'
    assert pending[next(k for k in pending if "selector" in k)].message == (
        "task selector: 0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}, "
        "2 node(s) didn't match Pod's node affinity/selector.")
    assert placed["zone-b"] is None
    assert pending[next(k for k in pending if k.startswith("pod-zone-b-") and "tolerant" not in k)].message.endswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}, "
        "2 node(s) didn't match Pod's node affinity/selector.")
    assert placed["mig-too-many"] is None
    assert pending[next(k for k in pending if "mig-too-many" in k)].message.endswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}, "
        "2 node(s) didn't have enough of mig profile: nvidia.com/mig-3g.40gb.")


def test_a_cordoned_node_keeps_its_pod_and_takes_no_new_one(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway, cluster: Cluster):  # noqa: F811
    s = kube_apiserver
    s.add_queue("team-a", QUEUE)
    s.add_node("only", gpus=8, unschedulable=True)
    s.add_pod("running", queue="team-a", requests={"cpu": "1", "nvidia.com/gpu": "1"}, node="only", phase="Running")
    add_pod(s, "new")
    result = cycle(gateway, cluster)
    placed = {t.task: (t.status, t.node) for t in result.tasks}
    assert placed["running"] == (m.RUNNING, "only")
    assert placed["new"] == (m.PENDING, None)
    assert any(r.message.endswith("0/1 nodes are available: 1 node(s) were unschedulable.")
               for r in result.pending.values())
