"""The cycle and the watcher at the same moment: rows the snapshot read may be gone when the cycle
records its result. The cycle must still succeed and record what it decided, by name."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from kaiweb.cluster import mirror
from kaiweb.scheduling import adapters, cycle
from kaiweb.scheduling.choices import CycleStatus, DecisionKind
from kaiweb.scheduling.models import Decision, PendingReason, SchedulingCycle
from kaiweb.scheduling.signals import cycle_step
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from tests.celery.builders import GIB, T0, small_cluster, submit

pytestmark = pytest.mark.django_db(transaction=True)


def _between_decide_and_record(action: Any) -> Any:
    def receiver(sender: Any, point: str, **kwargs: Any) -> None:
        if point == "after-decide":
            action()

    cycle_step.connect(receiver, weak=False, dispatch_uid="test-race")
    return receiver


@pytest.fixture(autouse=True)
def _disconnect() -> Any:
    yield
    cycle_step.disconnect(dispatch_uid="test-race")


def test_a_workload_deleted_after_the_snapshot_does_not_fail_the_cycle() -> None:
    sc = small_cluster(nodes=1)
    placed = submit(sc, "team-a", "placed")
    waiting = submit(sc, "team-b", "waiting", pods=1, gpus_per_pod=16)  # never fits: a why-pending row
    # The watcher removes both workloads (their pods left) while the engine decides.
    _between_decide_and_record(lambda: Workload.objects.filter(pk__in=[placed.pk, waiting.pk]).delete())

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    row = SchedulingCycle.objects.get(pk=outcome.cycle_id)
    assert row.status == CycleStatus.SUCCEEDED, row.error
    bind = Decision.objects.get(cycle=row, kind=DecisionKind.BIND)
    assert (bind.workload_id, bind.pod_id, bind.workload_ref) == (None, None, "ns/placed")
    assert not PendingReason.objects.exists()


def test_a_workload_kept_is_recorded_with_its_reference() -> None:
    sc = small_cluster(nodes=1)
    kept = submit(sc, "team-a", "kept")
    gone = submit(sc, "team-b", "gone")
    _between_decide_and_record(lambda: Workload.objects.filter(pk=gone.pk).delete())

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert SchedulingCycle.objects.get(pk=outcome.cycle_id).status == CycleStatus.SUCCEEDED
    refs = dict(Decision.objects.filter(kind=DecisionKind.BIND).values_list("workload_ref", "workload_id"))
    assert refs == {"ns/kept": kept.pk, "ns/gone": None}


def test_a_pod_moving_to_its_pod_group_while_the_snapshot_is_read_still_holds_its_node(monkeypatch: Any) -> None:
    """The watcher moves a running pod from its own workload to its PodGroup's (the old one deleted)
    between the snapshot's pod and workload queries: the snapshot still has the pod on its node."""
    sc = small_cluster(nodes=1)
    node = sc.nodes[0]
    own = Workload.objects.create(cluster=sc.cluster, namespace="ns", name="pod-runner", queue=sc.queues["team-a"],
                                  state=WorkloadState.RUNNING, submitted_at=T0)
    group = Workload.objects.create(cluster=sc.cluster, namespace="ns", name="pg-runner", queue=sc.queues["team-a"],
                                    state=WorkloadState.RUNNING, submitted_at=T0)
    pod = Pod.objects.create(workload=own, name="runner", uid="u-runner", gpu=node.allocatable_gpu, cpu=1000,
                             memory=GIB, state=PodState.RUNNING, node=node)

    def move() -> None:
        try:
            with transaction.atomic():
                Pod.objects.filter(pk=pod.pk).update(workload=group)
                Workload.objects.filter(pk=own.pk).delete()
        finally:
            connection.close()

    real, moved = adapters._task_spec, []

    def task_spec_after_a_commit(*args: Any) -> Any:
        if not moved:  # the pod query has run: the watcher commits now, from its own connection
            moved.append(threading.Thread(target=move))
            moved[0].start()
            moved[0].join()
        return real(*args)

    monkeypatch.setattr(adapters, "_task_spec", task_spec_after_a_commit)
    snapshot, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp(), reuse=False)

    assert moved  # the move did happen meanwhile
    assert Pod.objects.get(pk=pod.pk).workload_id == group.pk
    on_node = [(job.name, t.name) for job in snapshot.jobs for t in job.tasks if t.node == node.name]
    assert on_node == [("pod-runner", "runner")]  # as the database was when the snapshot began


def test_pods_the_watcher_holds_locked_do_not_hold_up_the_record_of_the_cycles_decisions() -> None:
    """The watcher keeps the pods of a batch locked until it commits (`mirror.lock_pods`); the cycle
    records a bind on such a pod at once instead of waiting for the batch (with FOR UPDATE there, the
    record's FOR KEY SHARE waited for it, and the two deadlocked when the batch then needed a row the
    record held)."""
    sc = small_cluster(nodes=1)
    placed = submit(sc, "team-a", "placed")
    pod_ids = list(Pod.objects.filter(workload=placed).values_list("pk", flat=True))
    locked, release, seen = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with transaction.atomic():
                assert [p.pk for p in mirror.lock_pods(Pod.objects.filter(pk__in=pod_ids))] == pod_ids
                locked.set()
                if not release.wait(15):
                    seen.append("the watcher's batch let go after 15 s")
        finally:
            connection.close()

    holder = threading.Thread(target=hold)

    def watcher_writes_meanwhile() -> None:
        holder.start()
        assert locked.wait(10)

    def receiver(sender: Any, point: str, **kwargs: Any) -> None:
        if point == "after-decide":
            watcher_writes_meanwhile()
        elif point == "after-record":
            seen.append("recorded")
            release.set()

    cycle_step.connect(receiver, weak=False, dispatch_uid="test-race")
    try:
        outcome = cycle.run_and_record_cycle(sc.shard, advance=False)
    finally:
        release.set()
        holder.join()

    assert seen == ["recorded"]  # the record did not wait for the watcher's batch
    row = SchedulingCycle.objects.get(pk=outcome.cycle_id)
    assert row.status == CycleStatus.SUCCEEDED, row.error
    bind = Decision.objects.get(cycle=row, kind=DecisionKind.BIND)
    assert bind.pod_id == pod_ids[0]
    assert Pod.objects.get(pk=pod_ids[0]).state in (PodState.BINDING, PodState.RUNNING)  # bound after the batch
