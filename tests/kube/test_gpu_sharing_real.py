"""Shared GPUs on a real API server: one reservation pod per device, a ConfigMap per sharer, released
with the last sharer; a pod on several devices labelled once per device, as KAI's binder does."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from devkube.localkube import LocalKube
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import BindAction
from kaiweb.cluster.gateway import ClusterRejected
from kaiweb.cluster.models import SchedulingShard
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.scheduling.tasks import run_cycle_task
from tests.kube.servers import RealServer

pytestmark = pytest.mark.kube
NS = "kai-resource-reservation"


def test_two_sharers_of_one_gpu_hold_it_with_one_reservation_pod_until_both_leave(kube_cluster: LocalKube) -> None:
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    uids = {name: server.add_pod(name, annotations={"gpu-fraction": "0.5"})["metadata"]["uid"]
            for name in ("half-a", "half-b", "other")}
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, sleep=lambda _: None)
    core = client.CoreV1Api(server.api_client)
    # As the Helm chart makes it: the reservation pods must pass the restricted Pod Security Standard.
    restricted = {"metadata": {"name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    if NS in {ns.metadata.name for ns in core.list_namespace().items}:
        core.patch_namespace(NS, restricted)
    else:
        core.create_namespace(restricted)

    for name in ("half-a", "half-b"):
        gateway.bind(BindAction("default", name, uids[name], "gpu-1", gpu_groups=("g-1",), gpu_portion=0.5))
    gateway.bind(BindAction("default", "half-a", uids["half-a"], "gpu-1", gpu_groups=("g-1",), gpu_portion=0.5))  # retried
    gateway.bind(BindAction("default", "other", uids["other"], "gpu-1", gpu_groups=("g-2",), gpu_portion=0.5))

    held = core.list_namespaced_pod(NS).items
    assert sorted(p.metadata.labels["runai-gpu-group"] for p in held) == ["g-1", "g-2"]  # one per device
    assert all(p.spec.node_name == "gpu-1" for p in held)
    assert all(p.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"} for p in held)
    maps = {cm.metadata.owner_references[0].name: cm.data for cm in core.list_namespaced_config_map("default").items
            if cm.metadata.owner_references}
    assert maps["half-a"] == {"GPU_PORTION": "0.5"}
    assert set(maps) == {"half-a", "half-b", "other"}

    core.delete_namespaced_pod("half-a", "default", grace_period_seconds=0)
    assert gateway.collect_reservations() == []  # half-b still shares g-1; other holds g-2
    core.delete_namespaced_pod("half-b", "default", grace_period_seconds=0)
    (released,) = gateway.collect_reservations()
    assert [p.metadata.labels["runai-gpu-group"] for p in core.list_namespaced_pod(NS).items
            if p.metadata.name != released and not p.metadata.deletion_timestamp] == ["g-2"]


def _group_labels(pod: Any) -> dict[str, str]:
    return {k: v for k, v in (pod.metadata.labels or {}).items() if k.startswith("runai-gpu-group")}


def test_a_pod_on_two_shared_gpus_is_labelled_per_device_as_kai_does_and_holds_both(
        kube_cluster: LocalKube) -> None:
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    pair = server.add_pod("pair", annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})
    uid = pair["metadata"]["uid"]
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, sleep=lambda _: None)
    core = client.CoreV1Api(server.api_client)

    gateway.bind(BindAction("default", "pair", uid, "gpu-1", gpu_groups=("g-a", "g-b"), gpu_portion=0.5))

    pod = core.read_namespaced_pod("pair", "default")
    assert pod.spec.node_name == "gpu-1"
    # A label value cannot list two groups: one label per device, and no plain runai-gpu-group.
    assert _group_labels(pod) == {"runai-gpu-group/g-a": "g-a", "runai-gpu-group/g-b": "g-b"}
    assert [(p.name, p.gpu_groups) for p in gateway.list_pods()] == [("pair", ("g-a", "g-b"))]
    held = core.list_namespaced_pod(NS).items
    assert sorted((p.spec.node_name, p.metadata.labels["runai-gpu-group"]) for p in held) == [
        ("gpu-1", "g-a"), ("gpu-1", "g-b")]
    assert gateway.collect_reservations() == []  # the pair still holds both devices

    core.delete_namespaced_pod("pair", "default", grace_period_seconds=0)
    assert sorted(gateway.collect_reservations()) == sorted(p.metadata.name for p in held)


def test_a_bind_that_gives_a_pod_other_than_the_devices_it_asks_for_is_refused(
        kube_cluster: LocalKube) -> None:
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    pair = server.add_pod("pair", annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})
    uid = pair["metadata"]["uid"]
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, sleep=lambda _: None)

    with pytest.raises(ClusterRejected, match="asks for 2 shared devices"):
        gateway.bind(BindAction("default", "pair", uid, "gpu-1", gpu_groups=("g-a",), gpu_portion=0.5))
    with pytest.raises(ClusterRejected, match="one device twice"):
        gateway.bind(BindAction("default", "pair", uid, "gpu-1", gpu_groups=("g-a", "g-a"), gpu_portion=0.5))

    pod = client.CoreV1Api(server.api_client).read_namespaced_pod("pair", "default")
    assert (pod.spec.node_name, _group_labels(pod)) == (None, {})


@pytest.mark.django_db
def test_a_cycle_binds_a_pod_on_two_shared_gpus_with_one_label_per_device(
    server: RealServer, kube_shard: SchedulingShard,
) -> None:
    server.add_node("gpu-1", gpus=2, labels={"nvidia.com/gpu.memory": "81559"})
    server.add_queue("team-a", {"priority": 100, "resources": {
        r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}})
    server.add_pod("pair", annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})
    server.add_pod("single", annotations={"gpu-fraction": "0.5"})

    cycle = SchedulingCycle.objects.get(pk=run_cycle_task(kube_shard.pk, "test"))

    assert cycle.status == CycleStatus.SUCCEEDED, cycle.error
    decided = dict(Decision.objects.filter(kind=DecisionKind.BIND, status=DecisionStatus.APPLIED)
                   .values_list("pod_name", "gpu_groups"))
    assert set(decided) == {"pair", "single"}
    pair, (single,) = decided["pair"], decided["single"]
    assert len(set(pair)) == 2
    core = client.CoreV1Api(server.api_client)
    assert _group_labels(core.read_namespaced_pod("pair", "default")) == {f"runai-gpu-group/{g}": g for g in pair}
    assert _group_labels(core.read_namespaced_pod("single", "default")) == {"runai-gpu-group": single}
    # Two devices on the node: the single sharer shares one of the pair's (the invariants after the
    # cycle hold that neither is given more than whole).
    assert single in pair
    assert sorted(p.metadata.labels["runai-gpu-group"] for p in core.list_namespaced_pod(NS).items) == sorted(pair)


def test_a_reservation_that_never_reports_its_device_is_deleted_and_the_bind_refused(kube_cluster: LocalKube) -> None:
    """With KAI's allocation timeout set and nothing running the reservation pod (no node agent here),
    the device is never reported: as KAI's binder does, the reservation pod made for the bind is
    deleted and the pod is not bound; the other sharers of that device in the same apply fail at once
    with it, without waiting again."""
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    uids = [server.add_pod(f"late-{i}", annotations={"gpu-fraction": "0.25"})["metadata"]["uid"] for i in range(3)]
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, reservation_timeout=1.0)
    core = client.CoreV1Api(server.api_client)

    results = gateway.apply(binds=[BindAction("default", f"late-{i}", uid, "gpu-1", gpu_groups=("g-late",),
                                              gpu_portion=0.25) for i, uid in enumerate(uids)])

    assert all(isinstance(r, ClusterRejected) and r.status == 504 for r in results)
    assert "did not report its device (run.ai/reserve_for_gpu_index) within 1 s; it was deleted" in str(results[0])
    assert len({str(r) for r in results}) == 1  # one wait for the device, its failure given to every sharer
    assert [p for p in core.list_namespaced_pod(NS).items if not p.metadata.deletion_timestamp] == []
    assert [core.read_namespaced_pod(f"late-{i}", "default").spec.node_name for i in range(3)] == [None] * 3
