"""A waiting PodGroup says where it stands, for kubectl users, on a real API server.

Through the product's own path (watch_cluster's watcher, the cycles, the estimates' refresh): a gang
waiting behind others gets its place in line (in its queue and in its shard) on its PodGroup, then,
after the start estimates are refreshed, its p50/p80 start and the reason; once it starts, they are
taken away and the gang behind it moves up. Read back with the kubernetes client."""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.models import SchedulingShard
from kaiweb.cluster.watch import ClusterWatcher, WatchEvent
from kaiweb.scheduling import estimates, status_writer
from kaiweb.scheduling.adapters import Recorded
from kaiweb.scheduling.choices import CycleStatus
from kaiweb.scheduling.models import SchedulingCycle, WaitingLine, line_key
from kaiweb.scheduling.selectors import places
from kaiweb.scheduling.tasks import run_cycle_task
from kaiweb.scheduling.write_back import write_back
from kaiweb.workloads.models import Workload
from tests.kube.servers import RealServer

pytestmark = [pytest.mark.kube, pytest.mark.django_db]

QUEUE_POS, SHARD_POS = "kaiweb.io/queue-position", "kaiweb.io/shard-position"
P50, P80, REASON = "kaiweb.io/start-estimate-p50", "kaiweb.io/start-estimate-p80", "kaiweb.io/start-estimate-reason"
LINE = (QUEUE_POS, SHARD_POS, P50, P80, REASON)


def qspec(gpu_quota: float) -> dict[str, Any]:
    return {"priority": 100, "resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                           "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                           "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}


def said(server: RealServer, name: str) -> dict[str, str]:
    """The line annotations the PodGroup holds, as the API server returns it."""
    group = server.get("podgroups", name, "default") or {}
    annotations = (group.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in LINE}


def observe_and_cycle(watcher: ClusterWatcher, held: list[WatchEvent], shard: SchedulingShard,
                      gateway: KubernetesGateway) -> SchedulingCycle:
    """What the watcher saw since it last looked, into the mirror; then a cycle."""
    watcher.run_once()
    mirror.apply_events(held, shard.cluster, gateway)
    held.clear()
    mirror.record_heartbeat(shard.cluster)
    cycle = SchedulingCycle.objects.get(pk=run_cycle_task(shard.pk, "test"))
    assert cycle.status == CycleStatus.SUCCEEDED, cycle.error
    return cycle


def test_a_waiting_gang_says_its_place_and_estimate_on_its_pod_group_until_it_starts(
        server: RealServer, kube_shard: SchedulingShard) -> None:
    cluster = kube_shard.cluster
    gateway = KubernetesGateway(server.api_client, request_timeout=5.0, max_attempts=2, sleep=lambda _: None)
    held: list[WatchEvent] = []
    watcher = ClusterWatcher(gateway, held.append, timeout_seconds=1)
    server.add_queue("team", qspec(2))
    server.add_node("gpu-1", gpus=2)
    # The node is taken by a job that says it runs for an hour; two gangs of two one-GPU pods wait.
    server.put("podgroups", {"metadata": {"name": "runner", "namespace": "default",
                                          "labels": {"kaiweb.io/expected-runtime": "1h"}},
                             "spec": {"queue": "team", "minMember": 1}})
    server.add_pod("runner-0", queue=None, pod_group="runner", node="gpu-1", phase="Running",
                   requests={"cpu": "1"}, limits={"nvidia.com/gpu": "2"})
    for gang in ("first", "second"):
        server.add_pod_group(gang, {"queue": "team", "minMember": 2})
        for i in range(2):
            server.add_pod(f"{gang}-{i}", queue=None, pod_group=gang, requests={"cpu": "1"},
                           limits={"nvidia.com/gpu": "1"})

    observe_and_cycle(watcher, held, kube_shard, gateway)
    ids = {w.name: w.pk for w in Workload.objects.filter(cluster=cluster, name__in=("first", "second"))}
    where = places(ids.values())
    # The engine's own order, on the PodGroups: one gang first, the other behind it, in the queue and the shard.
    for name, wid in ids.items():
        assert said(server, name) == {QUEUE_POS: str(where[wid].in_queue), SHARD_POS: str(where[wid].in_shard)}
    ahead, behind = sorted(ids, key=lambda n: where[ids[n]].in_queue)
    assert said(server, behind)[QUEUE_POS] == "2"
    assert said(server, ahead)[QUEUE_POS] == "1"
    assert said(server, "runner") == {}

    # The estimates are refreshed (on the worker); the next cycle's write-back puts them on the PodGroups.
    assert estimates.refresh(kube_shard) == 2
    cycle = observe_and_cycle(watcher, held, kube_shard, gateway)
    line = WaitingLine.objects.get(shard=kube_shard)
    texts = status_writer.estimate_texts(kube_shard.pk, line.estimated_at)
    for name, wid in ids.items():
        p50, p80, reason = texts[line_key(wid)]
        assert p50 is not None  # the runner declared its end: within the horizon
        got = said(server, name)
        assert (got[P50], got.get(P80), got[REASON]) == (p50, p80, reason)
        assert got[QUEUE_POS] == str(where[wid].in_queue)
    assert said(server, behind)[REASON].startswith("Behind 1 job of team")
    # Nothing changed since: the write-back writes no place and no estimate again.
    assert write_back(gateway, cycle, Recorded(decisions=[])).pod_group_lines == 0

    # The runner goes: the gang ahead starts and no longer says it waits; the one behind moves up.
    server.remove("pods", "runner-0", "default")
    observe_and_cycle(watcher, held, kube_shard, gateway)
    assert said(server, ahead) == {}
    assert said(server, behind)[QUEUE_POS] == "1"
    assert said(server, behind)[SHARD_POS] == "1"
