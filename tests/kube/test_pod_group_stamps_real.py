"""A PodGroup's history moves from KAI to kaiweb and back, on a real API server.

KAI keeps a gang's last start, last eviction and staleness as annotations on its PodGroup. Here a
cluster KAI ran (the annotations set by hand, as KAI writes them) is taken over through the product's
own path (watch_cluster's watcher, then a cycle): the engine honours KAI's preemption delay and
staleness. What the cycle does is then on the PodGroups, where KAI reads it back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.parsing import parse_pod_group, read_stamp, stamp_text
from kaiweb.cluster.models import SchedulingShard
from kaiweb.cluster.watch import ClusterWatcher, WatchEvent
from kaiweb.core import clock
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, PendingReason, SchedulingCycle
from kaiweb.scheduling.tasks import run_cycle_task
from kaiweb.workloads.models import Workload
from tests.kube.servers import RealServer

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

START = "kai.scheduler/last-start-timestamp"
EVICTION = "kai.scheduler/last-eviction-timestamp"
STALE = "kai.scheduler/stale-podgroup-timestamp"
GPU = {"nvidia.com/gpu": "1"}


def qspec(gpu_quota: float) -> dict[str, Any]:
    return {"priority": 100, "resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                           "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                           "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}


@pytest.fixture
def scheduling_clock() -> Iterator[None]:
    yield
    clock.reset()


def _group(server: RealServer, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
           ) -> dict[str, Any]:
    return server.put("podgroups", {"metadata": {"name": name, "namespace": "default",
                                                 "annotations": dict(annotations or {})}, "spec": spec})


def _created(group: dict[str, Any]) -> Any:
    return read_stamp(group["metadata"]["creationTimestamp"])


def _stamp(server: RealServer, name: str, key: str) -> str | None:
    group = server.get("podgroups", name, "default") or {}
    return ((group.get("metadata") or {}).get("annotations") or {}).get(key)


def test_a_pod_groups_history_moves_from_kai_and_back(
        server: RealServer, kube_shard: SchedulingShard, scheduling_clock: None) -> None:
    cluster = kube_shard.cluster
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=2, sleep=lambda _: None)
    server.add_queue("owner", qspec(1))
    server.add_queue("borrower", qspec(0))
    server.add_queue("third", qspec(1))
    server.add_node("gpu-1", gpus=1)
    server.add_node("gpu-2", gpus=1)
    # Running for KAI: a job borrowing the owner's GPU, and a gang that lost a member.
    _group(server, "victim", {"queue": "borrower", "minMember": 1})
    server.add_pod("victim-0", queue=None, pod_group="victim", node="gpu-1", phase="Running",
                   requests={"cpu": "1"}, limits=GPU)
    broken = _group(server, "broken", {"queue": "third", "minMember": 2, "stalenessGracePeriod": "60s"})
    server.add_pod("broken-0", queue=None, pod_group="broken", node="gpu-2", phase="Running",
                   requests={"cpu": "1"}, limits=GPU)
    server.add_pod("broken-1", queue=None, pod_group="broken", requests={"cpu": "1"},
                   limits={"nvidia.com/gpu": "2"})  # fits no node: the gang stays below its minimum
    # Waiting: the owner's job, which KAI evicted an hour after it was made; its preemption delay of
    # an hour started again then.
    urgent = _group(server, "urgent", {"queue": "owner", "minMember": 1, "preemptionDelay": "1h"})
    server.add_pod("urgent-0", queue=None, pod_group="urgent", requests={"cpu": "1"}, limits=GPU)
    kai_eviction = _created(urgent) + timedelta(hours=1)
    kai_stale = _created(broken) + timedelta(minutes=30)
    _group(server, "urgent", urgent["spec"], {EVICTION: stamp_text(kai_eviction)})
    _group(server, "broken", broken["spec"], {STALE: stamp_text(kai_stale)})
    # Half an hour after that eviction, kaiweb takes over.
    clock.advance(timedelta(hours=1, minutes=30).total_seconds())

    held: list[WatchEvent] = []
    watcher = ClusterWatcher(gateway, held.append, timeout_seconds=1)
    watcher.run_once()
    mirror.apply_events(held, cluster, gateway)
    mirror.record_heartbeat(cluster)  # the cycle trusts the watcher's mirror
    cycle = SchedulingCycle.objects.get(pk=run_cycle_task(kube_shard.pk, "test"))
    assert cycle.status == CycleStatus.SUCCEEDED, cycle.error

    # KAI's history decided: the urgent job, within its re-armed delay, reclaims nothing; the gang,
    # stale since KAI saw it so an hour ago, is past its grace of a minute and is evicted.
    evicted = Decision.objects.filter(cycle=cycle, kind=DecisionKind.EVICT)
    assert sorted(evicted.values_list("pod_name", "status")) == [("broken-0", DecisionStatus.APPLIED)]
    urgent_row = Workload.objects.get(cluster=cluster, name="urgent")
    assert urgent_row.last_eviction_at == kai_eviction
    waiting = PendingReason.objects.current_of(kube_shard).get(workload=urgent_row)
    assert "may not evict others until its preemption delay of 3600s has passed" in waiting.message
    assert Workload.objects.get(cluster=cluster, name="broken").stale_since == kai_stale

    # And back: what kaiweb recorded is on the PodGroups, in KAI's format, where KAI reads it.
    broken_row = Workload.objects.get(cluster=cluster, name="broken")
    victim_row = Workload.objects.get(cluster=cluster, name="victim")
    assert broken_row.last_eviction_at is not None  # the eviction this cycle made
    assert victim_row.last_start_at is not None  # when the mirror first saw the job running
    assert _stamp(server, "broken", EVICTION) == stamp_text(broken_row.last_eviction_at)
    assert _stamp(server, "victim", START) == stamp_text(victim_row.last_start_at)
    assert _stamp(server, "urgent", EVICTION) == stamp_text(kai_eviction)  # KAI's own, kept
    assert _stamp(server, "broken", STALE) == stamp_text(kai_stale)
    as_kai_reads = parse_pod_group(server.get("podgroups", "victim", "default"))
    assert as_kai_reads.last_start_at == victim_row.last_start_at.replace(microsecond=0)
