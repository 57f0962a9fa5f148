"""The mirror never lets an older observation of a pod undo a newer one.

A watch event can arrive after the cycle recorded a bind (the watcher lags, and the pod-grouper's
own patch makes an event that shows the pod before its bind). Applied as it was, such an event put
a bound pod back to Pending without a node; the next snapshot saw the node free and gave its GPUs
again. These tests replay exactly those sequences on the mirror."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.parsing import parse_pod
from kaiweb.cluster.models import Cluster, Node
from kaiweb.cluster.watch import ADDED, DELETED, MODIFIED, WatchEvent
from kaiweb.queues.models import Queue
from kaiweb.scheduling import adapters, write_back
from kaiweb.scheduling.choices import DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod
from scheduler_core import model as m

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster() -> Cluster:
    c = mirror.kubernetes_cluster("k8s")
    Queue.objects.create(name="team-a", gpu_quota=8)
    for name in ("gpu-1", "gpu-2"):
        Node.objects.create(cluster=c, name=name, allocatable_gpu=8, allocatable_cpu=32000,
                            allocatable_memory=256 * 1024**3, ready=True)
    return c


def raw_pod(rv: int, *, node: str | None = None, phase: str = "Pending", uid: str = "uid-1",
            deleting: bool = False, annotations: dict[str, str] | None = None, name: str = "p") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": uid, "resourceVersion": str(rv),
                            "labels": {"kai.scheduler/queue": "team-a"}, "annotations": dict(annotations or {}),
                            "creationTimestamp": "2026-11-27T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T00:01:00Z"
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler",
                            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def apply(cluster: Cluster, raw: dict[str, Any], type_: str = MODIFIED) -> None:
    meta = raw["metadata"]
    event = WatchEvent("Pod", type_, meta["namespace"], meta["name"], meta["resourceVersion"], parse_pod(raw), None,
                       copy.deepcopy(raw))
    mirror.apply_event(event, cluster)


def record(cluster: Cluster, kind: str, node: str | None = None, name: str = "p") -> None:
    """What a cycle records after the cluster took its action (`write_back.record_actions`)."""
    pod = Pod.objects.get(name=name)
    cycle = SchedulingCycle.objects.create(shard=cluster.shards.get(), status="succeeded",
                                           started_at="2026-11-27T00:00:30Z")
    applied = Decision.objects.create(
        cycle=cycle, kind=kind, status=DecisionStatus.APPLIED, pod=pod, workload=pod.workload,
        node=Node.objects.get(name=node) if node else None, workload_ref="x", pod_name=name,
        node_name=node or "", reason="r", idempotency_key=f"{kind}:{name}:{cycle.pk}")
    write_back.record_actions([applied])


def row(name: str = "p") -> tuple[str, str | None, str]:
    p = Pod.objects.select_related("node").get(name=name)
    return p.state, p.node.name if p.node else None, p.resource_version


def charged_gpus(cluster: Cluster) -> dict[str, float]:
    """What the engine is told each node holds: its tasks in states that use the node."""
    snapshot, _ = adapters.build_snapshot(cluster.shards.get(), now=0.0)
    used: dict[str, float] = {}
    for job in snapshot.jobs:
        for task in job.tasks:
            if task.node and task.state in m.ACTIVE_USED_STATES:
                used[task.node] = used.get(task.node, 0.0) + task.request.gpus
    return used


def test_an_event_from_before_the_bind_arriving_after_it_does_not_unbind_the_pod(cluster: Cluster) -> None:
    apply(cluster, raw_pod(100), ADDED)
    assert row() == (PodState.PENDING, None, "100")
    record(cluster, DecisionKind.BIND, "gpu-1")
    assert row()[:2] == (PodState.BINDING, "gpu-1")

    # The pod-grouper's annotation patch (rv 101) was made before the bind (rv 102) but arrives after
    # the cycle recorded it: it shows the pod Pending, on no node.
    apply(cluster, raw_pod(101, annotations={"kaiweb.io/seen": "yes"}))
    assert row()[:2] == (PodState.BINDING, "gpu-1")
    assert charged_gpus(cluster) == {"gpu-1": 1.0}

    apply(cluster, raw_pod(102, node="gpu-1"))
    assert row() == (PodState.BOUND, "gpu-1", "102")
    apply(cluster, raw_pod(101))  # replayed after a reconnect: older than the row
    assert row() == (PodState.BOUND, "gpu-1", "102")
    apply(cluster, raw_pod(103, node="gpu-1", phase="Running"))
    assert row() == (PodState.RUNNING, "gpu-1", "103")
    apply(cluster, raw_pod(102, node="gpu-1"))
    assert row() == (PodState.RUNNING, "gpu-1", "103")
    assert charged_gpus(cluster) == {"gpu-1": 1.0}


def test_a_finished_pod_and_a_new_incarnation_are_applied(cluster: Cluster) -> None:
    apply(cluster, raw_pod(100), ADDED)
    record(cluster, DecisionKind.BIND, "gpu-1")
    apply(cluster, raw_pod(110, node="gpu-1", phase="Succeeded"))
    assert row() == (PodState.SUCCEEDED, "gpu-1", "110")
    assert charged_gpus(cluster) == {}

    # The same name, another uid: the old pod was deleted and a new one made; it is pending anew.
    apply(cluster, raw_pod(120, uid="uid-2"))
    assert row() == (PodState.PENDING, None, "120")


def test_an_evicted_pod_stays_releasing_until_the_cluster_says_more(cluster: Cluster) -> None:
    apply(cluster, raw_pod(100, node="gpu-2", phase="Running"), ADDED)
    record(cluster, DecisionKind.EVICT)
    assert row()[:2] == (PodState.RELEASING, "gpu-2")
    apply(cluster, raw_pod(101, node="gpu-2", phase="Running"))  # from before the eviction
    assert row()[:2] == (PodState.RELEASING, "gpu-2")
    assert charged_gpus(cluster) == {"gpu-2": 1.0}  # still counted while it releases
    apply(cluster, raw_pod(102, node="gpu-2", phase="Running", deleting=True))
    assert row() == (PodState.RELEASING, "gpu-2", "102")
    apply(cluster, raw_pod(102, node="gpu-2", phase="Running", deleting=True), DELETED)
    assert not Pod.objects.filter(name="p").exists()


def test_a_bound_pod_whose_podgroup_is_not_known_keeps_its_row(cluster: Cluster) -> None:
    apply(cluster, raw_pod(100), ADDED)
    record(cluster, DecisionKind.BIND, "gpu-1")
    # The pod-grouper has moved it to a PodGroup whose event has not arrived yet.
    apply(cluster, raw_pod(105, node="gpu-1", annotations={"pod-group-name": "pg-p"}))
    assert row()[:2] == (PodState.BINDING, "gpu-1")
    assert charged_gpus(cluster) == {"gpu-1": 1.0}


def test_a_full_sync_of_an_unchanged_listing_keeps_the_recorded_bind(cluster: Cluster) -> None:
    apply(cluster, raw_pod(100), ADDED)
    record(cluster, DecisionKind.BIND, "gpu-1")
    plan = mirror._plan([], [parse_pod(raw_pod(100))], mirror._QueueIndex(), {})
    report = mirror.SyncReport()
    mirror._apply_plan(cluster, plan, full=False, report=report)
    assert report.stale == 1
    assert row()[:2] == (PodState.BINDING, "gpu-1")


@pytest.mark.django_db(transaction=True)
def test_a_bind_recorded_while_the_watcher_writes_an_older_event_stands(cluster: Cluster,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle records its bind (another process) in the very moment the watcher has read the
    pod's row and is about to write what an older event says: the row lock orders the two."""
    import threading

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row locks between two sessions: run on Postgres (DATABASE_URL), as CI does")
    apply(cluster, raw_pod(100), ADDED)
    pod = Pod.objects.get(name="p")
    cycle_row = SchedulingCycle.objects.create(shard=cluster.shards.get(), status="succeeded",
                                               started_at="2026-11-27T00:00:30Z")
    applied = Decision.objects.create(
        cycle=cycle_row, kind=DecisionKind.BIND, status=DecisionStatus.APPLIED, pod=pod, workload=pod.workload,
        node=Node.objects.get(name="gpu-1"), workload_ref="x", pod_name="p", node_name="gpu-1", reason="r",
        idempotency_key="bind:p")

    def cycle_records() -> None:
        try:
            write_back.record_actions([applied])
        finally:
            connection.close()

    other = threading.Thread(target=cycle_records)
    stamp = mirror._stamp_times

    def between_read_and_write(row: Pod, now: Any) -> bool:
        if not other.is_alive() and other.ident is None:
            other.start()
            other.join(timeout=1.0)  # blocked by the watcher's row lock, it waits for the commit
        return stamp(row, now)

    monkeypatch.setattr(mirror, "_stamp_times", between_read_and_write)
    apply(cluster, raw_pod(101, annotations={"kaiweb.io/seen": "yes"}))
    other.join(timeout=30)
    assert not other.is_alive()

    assert row()[:2] == (PodState.BINDING, "gpu-1")
