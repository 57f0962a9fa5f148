"""Shared GPUs on a real API server: one reservation pod per device, a ConfigMap per sharer, released
with the last sharer; a pod on several devices labelled once per device, as KAI's binder does."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devkube.localkube import LocalKube
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import ActionOutcome, BindAction
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


def _report_devices_when_made(core: client.CoreV1Api, wanted: int, *, delete: bool = False) -> threading.Thread:
    """A stand-in for the reservation image: once ``wanted`` reservation pods exist, each reports a
    device (or, with ``delete``, is deleted instead)."""
    def run() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            held = [p for p in core.list_namespaced_pod(NS).items if not p.metadata.deletion_timestamp]
            if len(held) >= wanted:
                for p in held:
                    if delete:
                        core.delete_namespaced_pod(p.metadata.name, NS, grace_period_seconds=0)
                    else:
                        core.patch_namespaced_pod(p.metadata.name, NS, {"metadata": {"annotations": {
                            "run.ai/reserve_for_gpu_index": f"GPU-{p.metadata.uid}"}}})
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_binds_waiting_for_devices_learn_the_reports_from_one_watch_not_by_reading_each_pod(
        kube_cluster: LocalKube, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six sharers on three devices: the three reservation pods are made, reported a moment later, and
    every sharer is bound with its device in its ConfigMap, without one read of a reservation pod
    (the reports arrive on the apply's one watch)."""
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    uids = [server.add_pod(f"s-{i}", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"] for i in range(6)]
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, reservation_timeout=20.0)
    core = client.CoreV1Api(server.api_client)
    reads: list[str] = []
    plain_read = gateway.read_pod
    monkeypatch.setattr(gateway, "read_pod", lambda ns, name: reads.append(ns) or plain_read(ns, name))
    reporter = _report_devices_when_made(core, 3)

    results = gateway.apply(binds=[BindAction("default", f"s-{i}", uid, "gpu-1", gpu_groups=(f"g-{i % 3}",),
                                              gpu_portion=0.5) for i, uid in enumerate(uids)])
    reporter.join()

    assert [getattr(r, "outcome", r) for r in results] == [ActionOutcome.BOUND] * 6
    assert NS not in reads
    devices = {p.metadata.labels["runai-gpu-group"]: f"GPU-{p.metadata.uid}" for p in core.list_namespaced_pod(NS).items}
    for i in range(6):
        (config_map,) = [cm for cm in core.list_namespaced_config_map("default").items
                         if cm.metadata.owner_references and cm.metadata.owner_references[0].name == f"s-{i}"]
        assert config_map.data["NVIDIA_VISIBLE_DEVICES"] == devices[f"g-{i % 3}"]
        assert core.read_namespaced_pod(f"s-{i}", "default").spec.node_name == "gpu-1"


def test_a_reservation_pod_deleted_while_its_sharers_wait_refuses_their_binds(kube_cluster: LocalKube) -> None:
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    uids = [server.add_pod(f"d-{i}", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"] for i in range(2)]
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, reservation_timeout=20.0)
    core = client.CoreV1Api(server.api_client)
    reporter = _report_devices_when_made(core, 1, delete=True)

    results = gateway.apply(binds=[BindAction("default", f"d-{i}", uid, "gpu-1", gpu_groups=("g-d",),
                                              gpu_portion=0.5) for i, uid in enumerate(uids)])
    reporter.join()

    assert all(isinstance(r, ClusterRejected) and r.status == 409 for r in results)
    assert "was deleted before it reported its device" in str(results[0])
    assert [core.read_namespaced_pod(f"d-{i}", "default").spec.node_name for i in range(2)] == [None, None]


def test_when_the_reservation_pods_cannot_be_watched_the_waiting_binds_read_them(
        kube_cluster: LocalKube, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watch the server refuses (here: every watch request fails) leaves no bind waiting blind: each
    reads its reservation pod until it reports, as without the watch."""
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    uids = [server.add_pod(f"w-{i}", annotations={"gpu-fraction": "0.5"})["metadata"]["uid"] for i in range(2)]
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, reservation_timeout=20.0)
    core = client.CoreV1Api(server.api_client)
    plain_list = gateway.core.list_namespaced_pod

    def no_watch(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            raise ApiException(status=403, reason="Forbidden")
        return plain_list(*args, **kwargs)

    monkeypatch.setattr(gateway.core, "list_namespaced_pod", no_watch)
    reads: list[str] = []
    plain_read = gateway.read_pod
    monkeypatch.setattr(gateway, "read_pod", lambda ns, name: reads.append(ns) or plain_read(ns, name))
    reporter = _report_devices_when_made(core, 1)

    results = gateway.apply(binds=[BindAction("default", f"w-{i}", uid, "gpu-1", gpu_groups=("g-w",),
                                              gpu_portion=0.5) for i, uid in enumerate(uids)])
    reporter.join()

    assert [getattr(r, "outcome", r) for r in results] == [ActionOutcome.BOUND] * 2
    assert NS in reads


def test_a_one_device_bind_labels_the_pod_guarded_by_the_version_the_mirror_saw_without_reading_it(
        kube_cluster: LocalKube, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the version the mirror saw the pod unbound at, the group label needs no read first; a pod
    changed since (here: bound elsewhere meanwhile) refuses that patch and is read: the bind is refused
    and the pod bound elsewhere gets no group label."""
    server = RealServer(kube_cluster)
    server.wipe()
    server.add_node("gpu-1", gpus=8)
    server.add_node("gpu-2", gpus=8)
    fresh = server.add_pod("fresh", annotations={"gpu-fraction": "0.5"})
    moved = server.add_pod("moved", annotations={"gpu-fraction": "0.5"})
    core = client.CoreV1Api(server.api_client)
    core.create_namespaced_pod_binding("moved", "default", client.V1Binding(
        metadata=client.V1ObjectMeta(name="moved"), target=client.V1ObjectReference(kind="Node", name="gpu-2")),
        _preload_content=False)
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0)
    reads: list[str] = []
    plain_read = gateway.read_pod
    monkeypatch.setattr(gateway, "read_pod", lambda ns, name: reads.append(name) or plain_read(ns, name))

    fresh_result, moved_result = gateway.apply(binds=[
        BindAction("default", p["metadata"]["name"], p["metadata"]["uid"], "gpu-1", gpu_groups=("g-1",),
                   gpu_portion=0.5, resource_version=p["metadata"]["resourceVersion"]) for p in (fresh, moved)])

    assert getattr(fresh_result, "outcome", fresh_result) == ActionOutcome.BOUND
    assert "fresh" not in reads
    assert core.read_namespaced_pod("fresh", "default").metadata.labels["runai-gpu-group"] == "g-1"
    assert isinstance(moved_result, ClusterRejected)
    assert "already bound to gpu-2" in str(moved_result)
    assert "moved" in reads
    assert "runai-gpu-group" not in (core.read_namespaced_pod("moved", "default").metadata.labels or {})
