"""Pods that other schedulers placed (DaemonSets, kube-scheduler's, static pods) hold their nodes'
resources too: the mirror keeps them as `OtherPod` rows and the cycle never gives what they hold.

Against the fake API server with the official client: the cycle's own listing (no watcher), and
the watcher's events, which must give the same rows.
"""

from __future__ import annotations

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.models import Cluster, OtherPod, SchedulingShard
from kaiweb.cluster.watch import ClusterWatcher
from kaiweb.scheduling.choices import CycleStatus
from kaiweb.scheduling.models import SchedulingCycle
from kaiweb.scheduling.tasks import run_cycle_task
from tests.contract.test_kubernetes_cycle import qspec, shard  # noqa: F401 - fixture
from tests.fakes.kube_apiserver import FakeKubeApiServer, kube_apiserver  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def cycle(shard: SchedulingShard) -> SchedulingCycle:  # noqa: F811
    done = SchedulingCycle.objects.get(pk=run_cycle_task(shard.pk, "test"))
    assert done.status == CycleStatus.SUCCEEDED, done.error
    return done


def gpus_bound_on(server: FakeKubeApiServer, node: str) -> int:
    return sum(1 for b in server.bindings if b["node"] == node)


def test_the_cycle_gives_only_what_other_schedulers_pods_left_free(kube_apiserver: FakeKubeApiServer,  # noqa: F811
                                                                 shard: SchedulingShard) -> None:  # noqa: F811  # noqa: F811
    s = kube_apiserver
    s.add_node("gpu-1", gpus=8)
    s.add_queue("team-a", qspec(8))
    # Another scheduler's pod holds 6 of gpu-1's 8 GPUs; a finished one and an unbound one hold nothing.
    s.add_pod("daemon", queue=None, scheduler="default-scheduler", node="gpu-1", phase="Running",
              requests={"cpu": "1", "nvidia.com/gpu": "6"})
    s.add_pod("done", queue=None, scheduler="default-scheduler", node="gpu-1", phase="Succeeded",
              requests={"cpu": "1", "nvidia.com/gpu": "8"})
    s.add_pod("waiting", queue=None, scheduler="default-scheduler", requests={"cpu": "1", "nvidia.com/gpu": "8"})
    for i in range(4):
        s.add_pod(f"one-{i}", queue="team-a", requests={"cpu": "1", "nvidia.com/gpu": "1"})

    cycle(shard)

    assert gpus_bound_on(s, "gpu-1") == 2
    row = OtherPod.objects.get()
    assert (row.namespace, row.name, row.node_name, row.gpus, row.cpu_millis) == ("default", "daemon", "gpu-1", 6.0,
                                                                                  1000)
    assert row.scheduler_name == "default-scheduler"

    # The other pod finishes: what it held is free at the next cycle.
    daemon = s.get("pods", "daemon", "default")
    assert daemon is not None
    s.put("pods", {**daemon, "status": {"phase": "Succeeded"}})
    cycle(shard)
    assert gpus_bound_on(s, "gpu-1") == 4
    assert not OtherPod.objects.exists()


def test_reservation_pods_of_shared_gpus_are_not_counted_twice(kube_apiserver: FakeKubeApiServer,  # noqa: F811
                                                              shard: SchedulingShard) -> None:  # noqa: F811
    s = kube_apiserver
    s.add_node("gpu-1", gpus=2)
    s.add_queue("team-a", qspec(2))
    s.add_pod("half", queue="team-a", requests={"cpu": "1"}, annotations={"gpu-fraction": "0.5"})
    cycle(shard)  # makes the reservation pod (another scheduler's name, bound to gpu-1)
    assert s.list("pods", "kai-resource-reservation")
    s.add_pod("whole", queue="team-a", requests={"cpu": "1", "nvidia.com/gpu": "1"})
    cycle(shard)
    assert not OtherPod.objects.exists()
    assert any(b["name"] == "whole" and b["node"] == "gpu-1" for b in s.bindings)


@pytest.fixture
def gateway(kube_apiserver: FakeKubeApiServer) -> KubernetesGateway:  # noqa: F811
    from kubernetes import client

    return KubernetesGateway(client.ApiClient(kube_apiserver.configuration()))


def test_the_watchers_events_keep_the_same_rows_and_drop_what_a_restart_left(
        kube_apiserver: FakeKubeApiServer, gateway: KubernetesGateway) -> None:  # noqa: F811
    s = kube_apiserver
    cluster = mirror.kubernetes_cluster("k8s")
    s.add_node("gpu-1", gpus=8)
    s.add_pod("daemon", queue=None, scheduler="default-scheduler", node="gpu-1", phase="Running",
              requests={"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"})
    # A row left by a watcher that ran before, for a pod that is gone since.
    OtherPod.objects.create(cluster=cluster, namespace="default", name="gone", node_name="gpu-1", gpus=4)

    watcher = ClusterWatcher(gateway, lambda e: mirror.apply_event(e, cluster, gateway), kinds=("OtherPod",))
    watcher.run_once()
    assert list(OtherPod.objects.values_list("name", "gpus", "cpu_millis", "memory_bytes")) == [
        ("daemon", 2.0, 500, 2**30)]

    # Changes come as events: a new one, then the first one finishing.
    s.add_pod("kube", queue=None, scheduler="default-scheduler", node="gpu-1", phase="Pending",
              requests={"cpu": "2"})
    daemon = s.get("pods", "daemon", "default")
    assert daemon is not None
    s.put("pods", {**daemon, "status": {"phase": "Failed"}})
    watcher.run_once()
    assert sorted(OtherPod.objects.values_list("name", "cpu_millis")) == [("kube", 2000)]

    # The same rows as the cycle's own listing gives.
    listed = mirror.kubernetes_cluster("k8s-listed")
    mirror.sync_full(gateway, listed)
    assert (sorted(OtherPod.objects.filter(cluster=listed).values_list("name", "node_name", "cpu_millis"))
            == sorted(OtherPod.objects.filter(cluster=cluster).values_list("name", "node_name", "cpu_millis")))


def test_use_by_node_sums_every_resource_per_node() -> None:
    cluster = Cluster.objects.create(name="c")
    rows = [OtherPod(cluster=cluster, namespace="a", name="x", node_name="n1", cpu_millis=100, memory_bytes=10,
                     gpus=1, mig={"nvidia.com/mig-1g.10gb": 1}, other={"example.com/nic": 1}),
            OtherPod(cluster=cluster, namespace="a", name="y", node_name="n1", cpu_millis=50, gpus=2,
                     mig={"nvidia.com/mig-1g.10gb": 2}),
            OtherPod(cluster=cluster, namespace="a", name="z", node_name="n2", cpu_millis=7)]
    use = OtherPod.use_by_node(rows)
    one = use[(cluster.pk, "n1")]
    assert (one.cpu_millis, one.memory_bytes, one.gpus, one.pods) == (150, 10, 3, 2)
    assert one.mig_instances == {"nvidia.com/mig-1g.10gb": 3}
    assert one.extended == {"example.com/nic": 1}
    assert use[(cluster.pk, "n2")].pods == 1
