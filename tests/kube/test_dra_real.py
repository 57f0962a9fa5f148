"""Dynamic Resource Allocation on the real API server (Kubernetes 1.34: ``resource.k8s.io/v1`` on by default):
what the DRA scenarios (`tests/dra_scenarios/`, `test_dra_scenarios_real.py`: KAI's DRA e2e specs and
ours) do not show, the product's own records of a DRA cycle: the why-pending row of a pod whose claim
names no class, and the devices the node pages show for a shared claim.

KWOK nodes carry no ``nvidia.com/gpu``: their GPUs are the devices of the ResourceSlices the test publishes
for them, as NVIDIA's DRA driver would (driver ``gpu.nvidia.com``, attributes ``productName``, ``type``),
and the controller-manager runs the resource-claim controller. The cycle is the product's
(`run_cycle_task`), fed by the watcher's mirror (the scenarios' runner runs the cycle without a watcher).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from devkube.localkube import KWOK_CONTROLLERS, NO_KWOK, LocalKube, find_binaries, find_tool, kwok_node
from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.invariants import check_cluster
from kaiweb.cluster.models import Node, SchedulingShard
from kaiweb.cluster.watch import ClusterWatcher
from kaiweb.scheduling.models import PendingReason
from tests.kube.fixtures import start_cluster
from tests.kube.servers import RealServer
from tests.kube.test_stale_events import cycle

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
DRA_KINDS = ("resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses")
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def queue_spec(quota: float, *, limit: float = -1, parent: str | None = None, weight: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"priority": 100, "resources": {
        "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": weight},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return spec


@pytest.fixture(scope="module")
def kube_cluster() -> Iterator[LocalKube]:
    """KWOK nodes and the controllers they need, with the resource-claim controller."""
    if find_tool("kwok", find_binaries()) is None:
        pytest.skip(NO_KWOK)
    kube = start_cluster(kwok=True, controllers=KWOK_CONTROLLERS + ",resourceclaim-controller")
    try:
        yield kube
    finally:
        kube.stop()


class Dra:
    """The test's fake DRA driver and its objects, and the product's watcher and cycle."""

    def __init__(self, server: RealServer, shard: SchedulingShard) -> None:
        self.server, self.shard = server, shard
        self.gateway = KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=2, sleep=lambda _: None)
        self.watcher = ClusterWatcher(self.gateway, lambda e: mirror.apply_event(e, shard.cluster, self.gateway),
                                      timeout_seconds=1)
        for plural in DRA_KINDS:
            for obj in server.list(plural):
                meta = obj["metadata"]
                if meta.get("finalizers"):  # a claim kept allocated by its finalizer
                    server.resource(plural).patch(name=meta["name"], namespace=meta.get("namespace"),
                                                  body={"metadata": {"finalizers": None}},
                                                  content_type="application/merge-patch+json")
                server.remove(plural, meta["name"], meta.get("namespace", ""))
        server.put("deviceclasses", {"metadata": {"name": GPU_CLASS}, "spec": {"selectors": [
            {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})

    # -- the cluster ---------------------------------------------------------------------------

    def node(self, name: str, gpus: int = 0, *, product: str = "H100") -> None:
        """A KWOK node without nvidia.com/gpu, and its ResourceSlice of ``gpus`` GPUs."""
        client.CoreV1Api(self.server.api_client).create_node(kwok_node(name, gpus=0))
        devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}, "type": {"string": "gpu"}},
                    "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
        self.server.put("resourceslices", {"metadata": {"name": f"{name}-{DRIVER}"}, "spec": {
            "driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices}})
        self.server.kube.wait_for_nodes([name])

    def claim(self, name: str, count: int = 1, *, device_class: str = GPU_CLASS, namespace: str = "default") -> None:
        self.server.put("resourceclaims", {"metadata": {"name": name, "namespace": namespace}, "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}}})

    def pod(self, name: str, *, claim: str, queue: str = "team-a", namespace: str = "default") -> None:
        spec: dict[str, Any] = {
            "schedulerName": "kai-scheduler", "tolerations": [KWOK_TOLERATION],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]}
        self.server.put("pods", {"metadata": {"name": name, "namespace": namespace,
                                              "labels": {"kai.scheduler/queue": queue}}, "spec": spec})

    # -- the product ---------------------------------------------------------------------------

    def watch(self) -> None:
        self.watcher.run_once()
        mirror.record_heartbeat(self.shard.cluster)

    def cycle(self) -> None:
        self.watch()
        cycle(self.shard)
        self.watch()

    def cycles_until(self, done: Any, what: str, *, cycles: int = 20) -> None:
        """Run cycles (the controllers working between them) until ``done()``; fail after ``cycles``."""
        for _ in range(cycles):
            self.cycle()
            if done():
                return
            time.sleep(0.5)
        pytest.fail(f"after {cycles} cycles: not {what}")

    # -- what the cluster says -----------------------------------------------------------------

    def node_of(self, pod: str, namespace: str = "default") -> str | None:
        return ((self.server.get("pods", pod, namespace) or {}).get("spec") or {}).get("nodeName")

    def claim_of(self, pod: str, namespace: str = "default") -> dict[str, Any]:
        """The claim a pod names."""
        raw = self.server.get("pods", pod, namespace) or {}
        found = self.server.get("resourceclaims", raw["spec"]["resourceClaims"][0]["resourceClaimName"], namespace)
        assert found is not None
        return found

    def devices_of(self, pod: str, namespace: str = "default") -> list[tuple[str, str]]:
        allocation = (self.claim_of(pod, namespace).get("status") or {}).get("allocation") or {}
        return [(r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])]

    def reserved_for(self, pod: str, namespace: str = "default") -> list[str]:
        return [c["name"] for c in (self.claim_of(pod, namespace).get("status") or {}).get("reservedFor") or []]

    def allocated_devices(self) -> list[tuple[str, str]]:
        return [(r["pool"], r["device"]) for c in self.server.list("resourceclaims")
                for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results", [])]

    def queue_gpus(self, queue: str, field: str) -> float:
        status = (self.server.get("queues", queue) or {}).get("status") or {}
        return float((status.get(field) or {}).get("nvidia.com/gpu", 0))

    def why_pending(self, pod_group_or_pod: str) -> str:
        row = (PendingReason.objects.filter(is_current=True, workload__name__contains=pod_group_or_pod)
               .order_by("-recorded_at").first())
        return row.message if row is not None else ""


@pytest.fixture
def dra(server: RealServer, kube_shard: SchedulingShard) -> Dra:
    return Dra(server, kube_shard)


def no_device_twice(d: Dra) -> None:
    devices = d.allocated_devices()
    assert len(devices) == len(set(devices)), devices
    assert check_cluster(d.server.api_client) == []


# --------------------------------------------------------------------------------- the product's records


def test_fails_to_allocate_request_with_wrong_device_class(dra: Dra) -> None:
    """dra_test.go "Fails to allocate request with wrong device class" (scenario
    ``allocate/resources/dra_test#2``): the pod's current why-pending row names the missing class."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 2)
    dra.claim("wrong", device_class="fake-device-class")
    dra.pod("lost", claim="wrong")

    dra.cycle()

    assert dra.node_of("lost") is None
    assert dra.allocated_devices() == []
    assert 'deviceclass "fake-device-class" not found' in dra.why_pending("lost")


def test_the_node_pages_show_the_devices_of_a_shared_claim(dra: Dra) -> None:
    """A claim shared by two pods (scenario ``kaiweb/dra#shared-claim-counted-once``): the last cycle
    stored, for the node pages, both devices held by the one claim and its two pods, the other node's free."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 2)
    dra.node("dra-2", 2)
    dra.claim("shared", 2)
    dra.pod("sharer-a", claim="shared")
    dra.pod("sharer-b", claim="shared")

    dra.cycles_until(lambda: dra.node_of("sharer-a") is not None and dra.node_of("sharer-b") is not None,
                     "both sharers bound", cycles=3)
    dra.cycle()

    assert dra.node_of("sharer-a") == dra.node_of("sharer-b")
    assert sorted(dra.reserved_for("sharer-a")) == ["sharer-a", "sharer-b"]
    assert len(dra.devices_of("sharer-a")) == 2
    assert dra.queue_gpus("team-a", "allocated") == 2
    no_device_twice(dra)
    # the node pages: the last cycle stored both devices held by the one claim, the other node's free
    there = dra.node_of("sharer-a")
    held_on = Node.objects.get(cluster=dra.shard.cluster, name=there)
    free_on = Node.objects.get(cluster=dra.shard.cluster, name="dra-2" if there == "dra-1" else "dra-1")
    assert [(d["device"], d["gpu"], d["claim"], sorted(d["pods"])) for d in held_on.dra_devices] == [
        (f"gpu-{i}", True, "default/shared", ["default/sharer-a", "default/sharer-b"]) for i in range(2)]
    assert [(d["device"], d["claim"]) for d in free_on.dra_devices] == [("gpu-0", ""), ("gpu-1", "")]
    assert (held_on.dra_gpus(), free_on.dra_gpus()) == ((2, 0), (0, 2))



