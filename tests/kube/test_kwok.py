"""KWOK nodes on the real API server: they go Ready, run what is bound to them, and finish Job pods.

Skipped, with the reason, without `make kube`'s binaries or without its kwok binary (an envtest
folder in KUBEBUILDER_ASSETS has none). The waits below are bounds on a stuck cluster, not timings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from devkube.localkube import NO_KWOK, LocalKube, find_binaries, find_tool
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.types import ActionOutcome, BindAction
from tests.kube.fixtures import NO_BINARIES

pytestmark = pytest.mark.kube

STUCK = 90.0  # seconds after which a pod that never moved is a failure, not a slow run
TOLERATE_KWOK = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def kwok_kube() -> Iterator[LocalKube]:
    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip(NO_BINARIES)
    if find_tool("kwok", bin_dir) is None:
        pytest.skip(NO_KWOK)
    kube = LocalKube(bin_dir, kwok=True).start()
    try:
        kube.create_kwok_nodes(2)
        client.CoreV1Api(kube.api_client()).create_namespace({"metadata": {"name": "kwok-test"}})
        yield kube
    finally:
        kube.stop()


def _wait_for(what: str, probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + STUCK
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {STUCK:.0f}s")
        time.sleep(0.2)


def _bind(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    # The client cannot decode the server's reply to a Binding (tools/kube-apiserver README).
    core.create_namespaced_binding(namespace, body, _preload_content=False)


def _pod_spec(**extra: Any) -> dict[str, Any]:
    # No scheduler serves this name: only the test's own Binding places the pod.
    return {"schedulerName": "nobody", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "tolerations": TOLERATE_KWOK,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}], **extra}


def test_kwok_nodes_are_ready_untainted_and_carry_eight_gpus(kwok_kube: LocalKube) -> None:
    core = client.CoreV1Api(kwok_kube.api_client())
    nodes = core.list_node(label_selector="type=kwok").items

    assert len(nodes) == 2
    for node in nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
        assert [t.key for t in node.spec.taints] == ["kwok.x-k8s.io/node"]
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"


def test_a_pod_bound_through_the_binding_subresource_goes_running(kwok_kube: LocalKube) -> None:
    core = client.CoreV1Api(kwok_kube.api_client())
    core.create_namespaced_pod("kwok-test", {"metadata": {"name": "bare"}, "spec": _pod_spec()})
    time.sleep(1)  # unbound, KWOK leaves it alone
    assert core.read_namespaced_pod("bare", "kwok-test").status.phase == "Pending"

    _bind(core, "kwok-test", "bare", "kwok-node-0")

    pod = _wait_for("the bound pod Running",
                    lambda: (p := core.read_namespaced_pod("bare", "kwok-test")).status.phase == "Running" and p)
    assert pod.spec.node_name == "kwok-node-0"
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["Ready"] == "True"
    assert conditions["PodScheduled"] == "True"  # the Binding's condition survives KWOK's status merge

    core.delete_namespaced_pod("bare", "kwok-test", grace_period_seconds=30)
    # KWOK plays the kubelet: a pod being deleted is removed without waiting out its grace period.
    _wait_for("the deleted pod gone", lambda: not core.list_namespaced_pod(
        "kwok-test", field_selector="metadata.name=bare").items)


def test_a_job_pod_with_the_completion_delay_goes_succeeded(kwok_kube: LocalKube) -> None:
    api = kwok_kube.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    template = {"metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1s"},
                             "labels": {"test": "finishing-job"}},
                "spec": _pod_spec()}
    batch.create_namespaced_job("kwok-test", {"metadata": {"name": "finishing"},
                                              "spec": {"template": template, "backoffLimit": 0}})
    pod = _wait_for("the Job's pod", lambda: next(iter(core.list_namespaced_pod(
        "kwok-test", label_selector="test=finishing-job").items), None))

    _bind(core, "kwok-test", pod.metadata.name, "kwok-node-1")

    _wait_for("the Job's pod Succeeded",
              lambda: core.read_namespaced_pod(pod.metadata.name, "kwok-test").status.phase == "Succeeded")
    _wait_for("the Job complete", lambda: (batch.read_namespaced_job("finishing", "kwok-test").status.succeeded or 0) == 1)


def test_a_running_pod_without_the_delay_annotation_keeps_running(kwok_kube: LocalKube) -> None:
    api = kwok_kube.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    template = {"metadata": {"labels": {"test": "endless-job"}}, "spec": _pod_spec()}
    batch.create_namespaced_job("kwok-test", {"metadata": {"name": "endless"}, "spec": {"template": template}})
    pod = _wait_for("the Job's pod", lambda: next(iter(core.list_namespaced_pod(
        "kwok-test", label_selector="test=endless-job").items), None))
    _bind(core, "kwok-test", pod.metadata.name, "kwok-node-1")
    _wait_for("the Job's pod Running",
              lambda: core.read_namespaced_pod(pod.metadata.name, "kwok-test").status.phase == "Running")

    time.sleep(3)  # longer than the completion stage's own default delay

    assert core.read_namespaced_pod(pod.metadata.name, "kwok-test").status.phase == "Running"


def test_kube_scheduler_of_the_same_version_binds_a_pod_to_a_kwok_node(kwok_kube: LocalKube) -> None:
    if find_tool("kube-scheduler", kwok_kube.bin_dir) is None:
        pytest.skip("no kube-scheduler binary: run `make kube` (it builds kube-scheduler too)")
    core = client.CoreV1Api(kwok_kube.api_client())
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "type", "operator": "In", "values": ["kwok"]}]}]}}}
    core.create_namespaced_pod("kwok-test", {"metadata": {"name": "by-kube-scheduler"},
                                             "spec": _pod_spec(schedulerName="default-scheduler", affinity=affinity)})

    kwok_kube.start_scheduler()

    pod = _wait_for("kube-scheduler's bind and KWOK's Running", lambda: (
        p := core.read_namespaced_pod("by-kube-scheduler", "kwok-test")).status.phase == "Running" and p)
    assert pod.spec.node_name in {"kwok-node-0", "kwok-node-1"}


def test_wait_for_pods_returns_once_kwok_ran_the_bound_pod_and_removed_the_deleted_one(kwok_kube: LocalKube) -> None:
    core = client.CoreV1Api(kwok_kube.api_client())
    core.create_namespaced_pod("kwok-test", {"metadata": {"name": "awaited"}, "spec": _pod_spec()})
    _bind(core, "kwok-test", "awaited", "kwok-node-0")

    kwok_kube.wait_for_pods(timeout=STUCK)

    assert core.read_namespaced_pod("awaited", "kwok-test").status.phase == "Running"
    core.delete_namespaced_pod("awaited", "kwok-test", grace_period_seconds=30)

    kwok_kube.wait_for_pods(timeout=STUCK)

    assert not core.list_namespaced_pod("kwok-test", field_selector="metadata.name=awaited").items


def test_shared_gpu_binds_wait_for_their_reservation_pods_to_report_the_devices(kwok_kube: LocalKube) -> None:
    """With KAI's allocation timeout set, sharers are bound once KWOK (standing in for the reservation
    image) has reported the device of the reservation pod the binds made, one per device, and each
    sharer's ConfigMap names its device, as KAI's binder writes it."""
    core = client.CoreV1Api(kwok_kube.api_client())
    spec = {**_pod_spec(), "schedulerName": "kai-scheduler"}
    spec["containers"] = [{**spec["containers"][0], "resources": {}}]
    groups = {"sharer-a": "grp-w", "sharer-b": "grp-w", "sharer-c": "grp-x"}
    uids = {name: core.create_namespaced_pod("kwok-test", {"metadata": {"name": name, "annotations": {
        "gpu-fraction": "0.5"}}, "spec": spec}).metadata.uid for name in groups}
    gateway = KubernetesGateway(kwok_kube.api_client(), reservation_timeout=STUCK, bind_concurrency=2)

    results = gateway.apply(binds=[BindAction("kwok-test", name, uids[name], "kwok-node-1", gpu_groups=(group,),
                                              gpu_portion=0.5) for name, group in groups.items()])

    assert [r.outcome for r in results] == [ActionOutcome.BOUND] * 3  # type: ignore[union-attr]
    holders = core.list_namespaced_pod("kai-resource-reservation", label_selector="app=kai-resource-reservation").items
    devices = {h.metadata.labels["runai-gpu-group"]: h.metadata.annotations["run.ai/reserve_for_gpu_index"]
               for h in holders}
    assert sorted(devices) == ["grp-w", "grp-x"]  # one reservation pod per device
    assert all(h.metadata.annotations["run.ai/reserve_for_gpu_index"] == f"GPU-{h.metadata.uid}" for h in holders)
    maps = {m.metadata.owner_references[0].name: m.data for m in core.list_namespaced_config_map("kwok-test").items
            if "GPU_PORTION" in (m.data or {})}
    assert {name: data["NVIDIA_VISIBLE_DEVICES"] for name, data in maps.items()} == {
        name: devices[group] for name, group in groups.items()}
    assert {core.read_namespaced_pod(name, "kwok-test").spec.node_name for name in groups} == {"kwok-node-1"}
