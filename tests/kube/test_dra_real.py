"""Dynamic Resource Allocation on the real API server (Kubernetes 1.34: ``resource.k8s.io/v1`` on by default).

KWOK nodes carry no ``nvidia.com/gpu``: their GPUs are the devices of the ResourceSlices the test publishes
for them, as NVIDIA's DRA driver would (driver ``gpu.nvidia.com``, attributes ``productName``, ``type``
and ``profile``), and the controller-manager runs the resource-claim controller (claims from templates,
released when their pods end). Each test names the spec of KAI-Scheduler's end-to-end suite it converts:
``test/e2e/suites/allocate/resources/dra_test.go`` and ``test/e2e/suites/reclaim/reclaim_dra_test.go``.
The cycle is the product's (`run_cycle_task`), fed by the watcher's mirror.
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
from kaiweb.scheduling.models import Decision, PendingReason
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

    def node(self, name: str, gpus: int = 0, *, product: str = "H100", migs: tuple[str, ...] = ()) -> None:
        """A KWOK node without nvidia.com/gpu, and its ResourceSlice: ``gpus`` GPUs and MIG slices."""
        client.CoreV1Api(self.server.api_client).create_node(kwok_node(name, gpus=0))
        devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}, "type": {"string": "gpu"}},
                    "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
        devices += [{"name": f"mig-{i}", "attributes": {"productName": {"string": product}, "type": {"string": "mig"},
                                                         "profile": {"string": profile}}}
                    for i, profile in enumerate(migs)]
        self.server.put("resourceslices", {"metadata": {"name": f"{name}-{DRIVER}"}, "spec": {
            "driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices}})
        self.server.kube.wait_for_nodes([name])

    def claim(self, name: str, count: int = 1, *, selectors: tuple[str, ...] = (), device_class: str = GPU_CLASS,
              namespace: str = "default") -> None:
        self.server.put("resourceclaims", {"metadata": {"name": name, "namespace": namespace},
                                           "spec": self._claim_spec(count, selectors, device_class)})

    def template(self, name: str, count: int = 1, namespace: str = "default") -> None:
        self.server.put("resourceclaimtemplates", {"metadata": {"name": name, "namespace": namespace}, "spec": {
            "spec": self._claim_spec(count, (), GPU_CLASS)}})

    @staticmethod
    def _claim_spec(count: int, selectors: tuple[str, ...], device_class: str) -> dict[str, Any]:
        return {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count,
            "selectors": [{"cel": {"expression": e}} for e in selectors]}}]}}

    def pod(self, name: str, *, claim: str = "", template: str = "", queue: str = "team-a",
            pod_group: str | None = None, node: str | None = None, namespace: str = "default") -> None:
        entry = {"name": "gpu", **({"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template})}
        spec: dict[str, Any] = {
            "schedulerName": "kai-scheduler", "tolerations": [KWOK_TOLERATION], "resourceClaims": [entry],
            "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]}
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        annotations = {"pod-group-name": pod_group} if pod_group else {}
        self.server.put("pods", {"metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                                              "labels": {"kai.scheduler/queue": queue}}, "spec": spec})
        if template:
            self.until(lambda: bool(((self.server.get("pods", name, namespace) or {}).get("status") or {})
                                    .get("resourceClaimStatuses")), f"the claim of pod {name}'s template")

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

    @staticmethod
    def until(done: Any, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"waited {timeout:g}s for {what}")
            time.sleep(0.1)

    # -- what the cluster says -----------------------------------------------------------------

    def node_of(self, pod: str, namespace: str = "default") -> str | None:
        return ((self.server.get("pods", pod, namespace) or {}).get("spec") or {}).get("nodeName")

    def claims(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self.server.list("resourceclaims", namespace)

    def claim_of(self, pod: str, namespace: str = "default") -> dict[str, Any]:
        """The claim a pod uses (by name, or made from its template)."""
        raw = self.server.get("pods", pod, namespace) or {}
        entry = raw["spec"]["resourceClaims"][0]
        name = entry.get("resourceClaimName") or next(
            s["resourceClaimName"] for s in raw["status"]["resourceClaimStatuses"] if s["name"] == entry["name"])
        found = self.server.get("resourceclaims", name, namespace)
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


# ----------------------------------------------------------------------------------------- dra_test.go


def test_allocate_simple_request(dra: Dra) -> None:
    """dra_test.go "Allocate simple request": a pod with a claim of one GPU is bound; its claim was
    allocated on its node and reserved for it, as kube-scheduler writes them."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 2)
    dra.claim("one")
    dra.pod("simple", claim="one")

    dra.cycle()

    assert dra.node_of("simple") == "dra-1"
    assert dra.devices_of("simple") == [("dra-1", "gpu-0")]
    assert dra.reserved_for("simple") == ["simple"]
    selector = dra.claim_of("simple")["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    assert selector["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["dra-1"]}]
    no_device_twice(dra)


def test_fails_to_allocate_request_with_wrong_device_class(dra: Dra) -> None:
    """dra_test.go "Fails to allocate request with wrong device class": the pod stays pending, its
    why-pending names the missing class, and no claim is allocated."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 2)
    dra.claim("wrong", device_class="fake-device-class")
    dra.pod("lost", claim="wrong")

    dra.cycle()

    assert dra.node_of("lost") is None
    assert dra.allocated_devices() == []
    assert 'deviceclass "fake-device-class" not found' in dra.why_pending("lost")


def test_fills_a_node_with_claims_from_a_template(dra: Dra) -> None:
    """dra_test.go "Fills a node": as many pods as the node has devices, each with a claim made from a
    template, are bound to distinct devices; one more pod stays pending."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 3)
    dra.template("one-gpu")
    for i in range(3):
        dra.pod(f"filler-{i}", template="one-gpu", node="dra-1")

    dra.cycle()

    assert [dra.node_of(f"filler-{i}") for i in range(3)] == ["dra-1"] * 3
    assert sorted(d for i in range(3) for d in dra.devices_of(f"filler-{i}")) == [
        ("dra-1", "gpu-0"), ("dra-1", "gpu-1"), ("dra-1", "gpu-2")]

    dra.pod("one-too-many", template="one-gpu", node="dra-1")
    dra.cycle()

    assert dra.node_of("one-too-many") is None
    assert dra.devices_of("one-too-many") == []
    no_device_twice(dra)


def test_tracks_dra_gpus_in_queue_status(dra: Dra) -> None:
    """dra_test.go "Should track DRA GPU resources in queue status": a PodGroup of two pods claiming 1 and
    2 GPUs is bound whole, and its queue reports 3 GPUs requested and allocated."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 4)
    dra.claim("claim-1", 1)
    dra.claim("claim-2", 2)
    dra.server.add_pod_group("books", {"minMember": 2, "queue": "team-a"})
    dra.pod("book-1", claim="claim-1", pod_group="books")
    dra.pod("book-2", claim="claim-2", pod_group="books")

    dra.cycle()
    dra.cycle()  # the queue's status as the cycle after the binds counts it

    assert dra.node_of("book-1") == dra.node_of("book-2") == "dra-1"
    assert dra.queue_gpus("team-a", "allocated") == 3
    assert dra.queue_gpus("team-a", "requested") == 3
    no_device_twice(dra)


def test_mig_devices_are_chosen_by_their_attributes(dra: Dra) -> None:
    """MIG devices via attributes (dra_test.go's requests, with the NVIDIA driver's MIG attributes): a
    claim selecting a 3g.40gb slice gets that slice, on the node that has one."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("plain", 2)
    dra.node("migged", 0, migs=("1g.10gb", "3g.40gb"))
    dra.claim("slice", selectors=(f'device.attributes["{DRIVER}"].type == "mig"',
                                  f'device.attributes["{DRIVER}"].profile == "3g.40gb"'))
    dra.pod("mig-user", claim="slice")

    dra.cycle()

    assert dra.node_of("mig-user") == "migged"
    assert dra.devices_of("mig-user") == [("migged", "mig-1")]


# -------------------------------------------------------------------------------- shared claims, gangs


def test_a_shared_claim_is_counted_once(dra: Dra) -> None:
    """A claim shared by two pods (KAI #1931: a GPU shared by several consumers counts once): both run on
    its node, the claim is reserved for both, and the queue is charged its 2 GPUs, not 4."""
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


def test_a_gang_with_claims_binds_all_or_nothing(dra: Dra) -> None:
    """A gang of three pods, each claiming 2 GPUs, on 4 devices: none is bound and no claim is allocated;
    with a third node's devices published, all three are bound on six distinct devices."""
    dra.server.add_queue("team-a", queue_spec(8))
    dra.node("dra-1", 2)
    dra.node("dra-2", 2)
    dra.server.add_pod_group("gang", {"minMember": 3, "queue": "team-a"})
    for i in range(3):
        dra.claim(f"gang-{i}", 2)
        dra.pod(f"member-{i}", claim=f"gang-{i}", pod_group="gang")

    dra.cycle()

    assert [dra.node_of(f"member-{i}") for i in range(3)] == [None, None, None]
    assert dra.allocated_devices() == []

    dra.node("dra-3", 2)
    dra.cycle()

    assert sorted(dra.node_of(f"member-{i}") or "" for i in range(3)) == ["dra-1", "dra-2", "dra-3"], (
        dra.why_pending("gang"), list(Decision.objects.values_list("kind", "pod_name", "status", "message")))
    assert len(dra.allocated_devices()) == 6
    no_device_twice(dra)


# ------------------------------------------------------------------------------------ reclaim_dra_test.go


def test_reclaim_of_a_dra_pod_and_quota_on_claimed_gpus(dra: Dra) -> None:
    """reclaim_dra_test.go "Under quota and Over fair share -> Over fair share and Over quota - Should not
    reclaim (DRA)": 4 devices; the reclaimee's claims (2+1+1) fill them; the reclaimer, under its quota of
    1, gets its 1-GPU claim by reclaiming; its second pod (2 more GPUs) would put it over its fair share and
    stays pending. The reclaimed pod's claim is released by the resource-claim controller before the
    reclaimer's is allocated: no device is given twice."""
    dra.server.add_queue("parent", queue_spec(4))
    dra.server.add_queue("reclaimee", queue_spec(1, parent="parent"))
    dra.server.add_queue("reclaimer", queue_spec(1, parent="parent"))
    dra.node("dra-1", 4)
    for name, count in (("big", 2), ("small-1", 1), ("small-2", 1)):
        dra.claim(f"claim-{name}", count)
        dra.pod(name, claim=f"claim-{name}", queue="reclaimee")
    dra.cycles_until(lambda: all(dra.node_of(p) for p in ("big", "small-1", "small-2")), "the reclaimee's pods bound",
                     cycles=3)

    dra.claim("claim-running", 1)
    dra.pod("running", claim="claim-running", queue="reclaimer")
    dra.cycles_until(lambda: dra.node_of("running") is not None, "the reclaimer's first pod bound")

    assert sum(1 for p in ("big", "small-1", "small-2") if dra.server.get("pods", p) is not None) == 2
    no_device_twice(dra)

    dra.claim("claim-pending", 2)
    dra.pod("pending", claim="claim-pending", queue="reclaimer")
    for _ in range(3):
        dra.cycle()

    assert dra.node_of("pending") is None
    assert dra.devices_of("pending") == []
    assert dra.queue_gpus("reclaimer", "allocated") == 1
    no_device_twice(dra)


def test_reclaim_based_on_priority_keeps_the_over_quota_weights(dra: Dra) -> None:
    """reclaim_dra_test.go "Reclaim based on priority, maintain over-quota weight proportion": 8 devices;
    two queues (quota 1 each, over-quota weights 1 and 2) of ten pods with a claim from a template each
    fill them 3 and 5; a queue of higher priority, with no quota, claims 3 GPUs and reclaims them, the two
    left with 2 and 3 (KAI's Jobs are single pods here: a reclaimed pod is gone, not made again)."""
    dra.server.add_queue("parent", queue_spec(8))
    dra.server.add_queue("reclaimee-1", queue_spec(1, parent="parent", weight=1))
    dra.server.add_queue("reclaimee-2", queue_spec(1, parent="parent", weight=2))
    dra.server.add_queue("reclaimer", {**queue_spec(0, parent="parent"), "priority": 101})
    dra.node("dra-8", 8)
    dra.template("one-gpu")
    for queue in ("reclaimee-1", "reclaimee-2"):
        for i in range(10):
            dra.pod(f"{queue}-{i}", template="one-gpu", queue=queue, node="dra-8")

    def bound(queue: str) -> int:
        return sum(1 for i in range(10) if dra.server.get("pods", f"{queue}-{i}") is not None
                   and dra.node_of(f"{queue}-{i}") is not None)

    dra.cycles_until(lambda: bound("reclaimee-1") + bound("reclaimee-2") == 8, "8 reclaimee pods bound", cycles=4)
    assert (bound("reclaimee-1"), bound("reclaimee-2")) == (3, 5)

    dra.claim("three", 3)
    dra.pod("reclaimer-pod", claim="three", queue="reclaimer", node="dra-8")
    dra.cycles_until(lambda: dra.node_of("reclaimer-pod") is not None, "the reclaimer bound")

    assert (bound("reclaimee-1"), bound("reclaimee-2")) == (2, 3)
    assert len(dra.devices_of("reclaimer-pod")) == 3
    no_device_twice(dra)
