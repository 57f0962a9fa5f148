"""On the real API server: a pod another scheduler placed (here bound by name, as a DaemonSet's
pod is) holds its node's GPUs, and the cycle, fed by the watcher, gives only what is left; once it
finishes, what it held is given."""

from __future__ import annotations

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.invariants import check_cluster
from kaiweb.cluster.models import OtherPod, SchedulingShard
from kaiweb.cluster.watch import ClusterWatcher
from tests.kube.servers import RealServer
from tests.kube.test_stale_events import QUEUE, cycle

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

def bound_to(server: RealServer, node: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in server.list("pods", "default")
                  if p["spec"].get("nodeName") == node and p["spec"].get("schedulerName") == "kai-scheduler")


def test_another_schedulers_pod_keeps_its_gpus_until_it_finishes(server: RealServer,
                                                                 kube_shard: SchedulingShard) -> None:
    cluster = kube_shard.cluster
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=2, sleep=lambda _: None)
    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway), timeout_seconds=1)

    def watch() -> None:
        watcher.run_once()
        mirror.record_heartbeat(cluster)  # the cycle trusts the watcher's mirror

    server.add_queue("team-a", QUEUE)
    server.add_node("gpu-1", gpus=8)
    server.add_pod("daemon", queue=None, scheduler="default-scheduler", node="gpu-1", phase="Running",
                   limits={"nvidia.com/gpu": "6"}, requests={"cpu": "1"})
    for i in range(4):
        server.add_pod(f"one-{i}", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "1"})
    watch()
    assert OtherPod.objects.get(cluster=cluster).gpus == 6

    first = cycle(kube_shard)

    assert first.binds == 2
    assert len(bound_to(server, "gpu-1")) == 2
    assert check_cluster(server.api_client) == []

    daemon = server.get("pods", "daemon")
    assert daemon is not None
    server.put_status("pods", {**daemon, "status": {**daemon.get("status", {}), "phase": "Succeeded"}})
    watch()
    assert not OtherPod.objects.filter(cluster=cluster).exists()
    cycle(kube_shard)
    watch()

    assert len(bound_to(server, "gpu-1")) == 4
    assert check_cluster(server.api_client) == []
