"""A GPU is never given twice when watch events arrive late, on the real API server.

The sequence that double-booked nodes at scale, replayed step by step: the pod-grouper patches a
new pod (a MODIFIED event showing it Pending, on no node), a cycle binds the pod, and the watcher,
lagging, hands that patch's event to the mirror only after the bind was recorded. The next cycle
must still count the pod on its node, and leave a second pod pending."""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.invariants import check_cluster
from kaiweb.cluster.models import SchedulingShard
from kaiweb.cluster.watch import ClusterWatcher, WatchEvent
from kaiweb.scheduling.choices import CycleStatus
from kaiweb.scheduling.models import SchedulingCycle
from kaiweb.scheduling.tasks import run_cycle_task
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod
from tests.kube.servers import RealServer

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

QUEUE = {"priority": 100, "resources": {"gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1},
                                        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}



def cycle(shard: SchedulingShard) -> SchedulingCycle:
    row = SchedulingCycle.objects.get(pk=run_cycle_task(shard.pk, "test"))
    assert row.status == CycleStatus.SUCCEEDED, row.error
    return row


def test_a_late_event_from_before_a_bind_does_not_free_the_node(server: RealServer, kube_shard: SchedulingShard) -> None:
    shard = kube_shard
    cluster = shard.cluster
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=2, sleep=lambda _: None)
    held: list[WatchEvent] = []
    watcher = ClusterWatcher(gateway, held.append, timeout_seconds=1)

    def deliver(keep: Any = lambda e: True) -> None:
        """Hand the held events the filter lets through to the mirror, in order; keep the rest."""
        watcher.run_once()
        late = [e for e in held if not keep(e)]
        mirror.apply_events([e for e in held if keep(e)], cluster, gateway)
        held[:] = late
        mirror.record_heartbeat(cluster)  # the cycle trusts the watcher's mirror

    server.add_queue("team-a", QUEUE)
    server.add_node("one-gpu", gpus=1)
    server.add_pod("first", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "1"})
    deliver()
    assert Pod.objects.get(name="first").state == PodState.PENDING

    # The pod-grouper's patch: a new resourceVersion that still shows the pod unbound.
    gateway.label_pod("default", "first", server.get("pods", "first")["metadata"]["uid"], labels={},
                      annotations={"kaiweb.io/grouped": "true"})
    watcher.run_once()  # the patch's event is held back: the watcher lags
    assert [(e.kind, e.type, e.name) for e in held if e.kind == "Pod"] == [("Pod", "MODIFIED", "first")]

    bound = cycle(shard)
    assert bound.binds == 1
    assert server.get("pods", "first")["spec"]["nodeName"] == "one-gpu"

    # Now the late event arrives (and only it: the bind's own event is held back further).
    patch_rv = next(e.resource_version for e in held if e.name == "first")
    deliver(keep=lambda e: e.name != "first" or e.resource_version == patch_rv)
    first = Pod.objects.select_related("node").get(name="first")
    assert (first.state, first.node.name if first.node else None) == (PodState.BINDING, "one-gpu")

    server.add_pod("second", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "1"})
    deliver(keep=lambda e: e.name == "second" or e.kind != "Pod")
    after = cycle(shard)

    assert after.binds == 0
    assert "nodeName" not in server.get("pods", "second")["spec"]
    assert check_cluster(server.api_client) == []

    deliver()  # the bind's own event: the row is confirmed by the cluster
    assert Pod.objects.get(name="first").state == PodState.BOUND
