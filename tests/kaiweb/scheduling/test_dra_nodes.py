"""The DRA devices a cycle read, kept on each node for its page (`kaiweb.scheduling.dra.record_devices`): a
cycle on a simulated cluster whose gateway also serves DRA objects kept in memory."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.errors import Capability, ClusterUnavailable
from kaiweb.cluster.models import MAX_DRA_DEVICES, Node
from kaiweb.scheduling import cycle
from kaiweb.scheduling.models import SchedulingCycle
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from tests.celery.builders import SmallCluster, small_cluster, submit
from tests.kaiweb.cluster.test_dra import GPU_CLASS, claim, exactly, gpu, slice_

pytestmark = pytest.mark.django_db


class DraGateway:
    """The simulated cluster's gateway, serving DRA objects as well: slices and claims as the API server
    would list them, and how often they were read."""

    def __init__(self, inner: SimulatedGateway, slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> None:
        self.inner, self.slices, self.claims = inner, slices, claims
        self.capabilities = inner.capabilities | {Capability.DRA}
        self.reads = 0
        self.fail = False

    def read_dra(self) -> dra.Inventory:
        self.reads += 1
        if self.fail:
            raise ClusterUnavailable("list ResourceSlices", "503 Service Unavailable", status=503)
        return dra.Inventory.read([GPU_CLASS], copy.deepcopy(self.slices), copy.deepcopy(self.claims))

    def list_resource_claims_raw(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.claims)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def held_claim(name: str, node: str, *devices: str, pods: tuple[str, ...] = ()) -> dict[str, Any]:
    """A claim in namespace ``ns`` allocated ``devices`` of ``node`` and reserved for ``pods``."""
    status = {"allocation": dra.allocation_status(
        tuple(dra.Allocated("gpu", "gpu.nvidia.com", node, d) for d in devices), node),
        "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]}
    body = claim(name, exactly(count=len(devices)), status=status)
    body["metadata"]["namespace"] = "ns"
    return body


def running_with_claim(sc: SmallCluster, name: str, claim_name: str, node: Node) -> Pod:
    """A running workload of team-a whose one pod uses ``claim_name`` and no nvidia.com/gpu."""
    workload = submit(sc, "team-a", name, pods=1, gpus_per_pod=0)
    Workload.objects.filter(pk=workload.pk).update(state=WorkloadState.RUNNING)
    pod = Pod.objects.get(workload=workload)
    pod.state, pod.node, pod.constraints = PodState.RUNNING, node, {"resourceClaims": [["gpu", claim_name, ""]]}
    pod.save()
    return pod


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> tuple[SmallCluster, DraGateway]:
    sc = small_cluster(nodes=2)
    gateway = DraGateway(SimulatedGateway(sc.cluster),
                         [slice_("node-0", [gpu("gpu-0"), gpu("gpu-1")]), slice_("node-1", [gpu("gpu-0")])],
                         [held_claim("train", "node-0", "gpu-0", pods=("job-0",))])
    running_with_claim(sc, "job", "train", sc.nodes[0])
    monkeypatch.setattr(cycle, "get_gateway", lambda _: gateway)
    return sc, gateway


def devices_of(name: str) -> list[tuple[str, str, bool, str, list[str]]]:
    node = Node.objects.get(name=name)
    return [(r["pool"], r["device"], r["gpu"], r["claim"], r["pods"]) for r in node.dra_devices]


def test_a_cycle_stores_each_node_s_devices_and_who_holds_them(cluster):
    sc, _ = cluster

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert devices_of("node-0") == [("node-0", "gpu-0", True, "ns/train", ["ns/job-0"]),
                                    ("node-0", "gpu-1", True, "", [])]
    assert devices_of("node-1") == [("node-1", "gpu-0", True, "", [])]
    node = Node.objects.get(name="node-0")
    assert (node.dra_devices_total, node.dra_claimed, node.dra_read_cycle) == (2, 1, outcome.cycle_id)
    assert node.dra_read_at is not None
    assert node.dra_gpus() == (1, 1)
    # the cycle's free GPUs: each node's 8 of the device plugin and the two DRA GPUs no claim holds
    assert SchedulingCycle.objects.get(pk=outcome.cycle_id).free_gpus == 8 + 8 + 2


def test_a_node_whose_devices_are_gone_is_emptied_and_an_unchanged_one_is_not_written_again(cluster):
    sc, gateway = cluster
    first = cycle.run_and_record_cycle(sc.shard, advance=False)
    gateway.slices = gateway.slices[:1]  # node-1's driver took its ResourceSlice away

    second = cycle.run_and_record_cycle(sc.shard, advance=False)

    gone = Node.objects.get(name="node-1")
    assert (gone.dra_devices, gone.dra_devices_total, gone.dra_read_cycle) == ([], 0, second.cycle_id)
    assert Node.objects.get(name="node-0").dra_read_cycle == first.cycle_id  # the same devices: not written


def test_a_claim_released_after_its_pod_ended_is_read_once_more_then_reading_stops(cluster):
    sc, gateway = cluster
    cycle.run_and_record_cycle(sc.shard, advance=False)
    Pod.objects.filter(name="job-0").update(state=PodState.SUCCEEDED, node=None)
    gateway.claims = []  # the resource-claim controller deleted the ended pod's claim
    reads = gateway.reads

    cycle.run_and_record_cycle(sc.shard, advance=False)  # no pod names a claim: read for the stored claim

    assert gateway.reads == reads + 1
    assert devices_of("node-0") == [("node-0", "gpu-0", True, "", []), ("node-0", "gpu-1", True, "", [])]
    assert Node.objects.get(name="node-0").dra_claimed == 0
    cycle.run_and_record_cycle(sc.shard, advance=False)
    assert gateway.reads == reads + 1  # nothing held is stored any more: not read again


def test_devices_that_cannot_be_read_leave_what_was_stored(cluster):
    sc, gateway = cluster
    first = cycle.run_and_record_cycle(sc.shard, advance=False)
    stored = devices_of("node-0")
    gateway.fail = True

    cycle.run_and_record_cycle(sc.shard, advance=False)

    assert devices_of("node-0") == stored
    assert Node.objects.get(name="node-0").dra_read_cycle == first.cycle_id


def test_a_node_keeps_its_first_devices_and_counts_them_all(cluster):
    sc, gateway = cluster
    many = MAX_DRA_DEVICES + 3
    gateway.slices = [slice_("node-1", [gpu(f"gpu-{i:03d}") for i in range(many)])]

    cycle.run_and_record_cycle(sc.shard, advance=False)

    node = Node.objects.get(name="node-1")
    assert (len(node.dra_devices), node.dra_devices_total) == (MAX_DRA_DEVICES, many)
    assert node.dra_devices[0]["device"] == "gpu-000"
