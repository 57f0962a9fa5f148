"""Shared GPUs on a real API server: one reservation pod per device, a ConfigMap per sharer, released
with the last sharer."""

from __future__ import annotations

import pytest
from kubernetes import client

from kaiweb.cluster.backends.kubernetes import KubernetesGateway
from kaiweb.cluster.backends.types import BindAction
from kaiweb.cluster.localkube import LocalKube
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
        gateway.bind(BindAction("default", name, uids[name], "gpu-1", gpu_group="g-1", gpu_portion=0.5))
    gateway.bind(BindAction("default", "half-a", uids["half-a"], "gpu-1", gpu_group="g-1", gpu_portion=0.5))  # retried
    gateway.bind(BindAction("default", "other", uids["other"], "gpu-1", gpu_group="g-2", gpu_portion=0.5))

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
