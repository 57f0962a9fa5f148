"""The scheduling cycle end to end on the simulated cluster: observe → decide → record → apply,
idempotency, crash recovery (reconciliation), why-pending history and the query budget."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.gateway import Capability
from kaiweb.scheduling import adapters, cycle
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, QueueStatus, SchedulingCycle
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod
from scheduler_core import reasons as reason_codes
from tests.celery.builders import running_pods, small_cluster, submit

pytestmark = pytest.mark.django_db


def test_a_cycle_binds_a_pending_gang_and_records_what_it_did():
    sc = small_cluster(nodes=2)
    job = submit(sc, "team-a", "train-1", pods=2, gpus_per_pod=4)

    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)

    assert outcome.status == CycleStatus.SUCCEEDED
    assert outcome.binds == 2
    pods = running_pods(sc)
    assert [p.name for p in pods] == ["train-1-0", "train-1-1"]
    assert all(p.node_id is not None and p.started_at is not None for p in pods)
    job.refresh_from_db()
    assert job.state == WorkloadState.RUNNING
    assert job.last_start_at is not None

    row = SchedulingCycle.objects.get(pk=outcome.cycle_id)
    assert (row.status, row.binds, row.evictions, row.trigger) == (CycleStatus.SUCCEEDED, 2, 0, "test")
    assert {"snapshot", "engine", "record", "apply"} <= set(row.phase_durations)
    binds = Decision.objects.filter(cycle=row, kind=DecisionKind.BIND)
    assert binds.count() == 2
    assert set(binds.values_list("status", flat=True)) == {DecisionStatus.APPLIED}
    assert all(d.idempotency_key.startswith("bind:") and d.node_name for d in binds)

    status = QueueStatus.objects.get(cycle=row, queue=sc.queues["team-a"])
    assert status.allocated["gpu"] == 8
    assert status.running_workloads == 1
    dept = QueueStatus.objects.get(cycle=row, queue=sc.queues["dept"])
    assert dept.allocated["gpu"] == 8
    assert dept.running_workloads == 1  # a parent counts its subtree


def test_running_the_cycle_again_never_binds_a_pod_twice():
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    nodes_before = {p.name: p.node_id for p in running_pods(sc)}

    second = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert second.binds == 0
    assert Decision.objects.filter(kind=DecisionKind.BIND).count() == 2
    assert {p.name: p.node_id for p in running_pods(sc)} == nodes_before


def test_a_decision_already_recorded_is_not_recorded_or_applied_again():
    """A duplicated task deciding from a stale view produces the same keys: nothing doubles."""
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=1, gpus_per_pod=1)
    snapshot, index = adapters.build_snapshot(sc.shard, now=SimulatedGateway(sc.cluster).now())
    result = cycle.engine_run_cycle(snapshot, cycle.cycle_config(sc.shard))
    first = SchedulingCycle.objects.create(shard=sc.shard, started_at=adapters.from_epoch(snapshot.now))
    second = SchedulingCycle.objects.create(shard=sc.shard, started_at=adapters.from_epoch(snapshot.now))

    to_apply_first = adapters.persist_result(first, result, snapshot, index).decisions
    to_apply_second = adapters.persist_result(second, result, snapshot, index).decisions

    assert len(to_apply_first) == 1
    assert to_apply_second == []
    assert Decision.objects.filter(kind=DecisionKind.BIND).count() == 1


def test_bind_through_the_gateway_twice_is_one_bind():
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=1)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    d = Decision.objects.get(kind=DecisionKind.BIND)

    outcomes = cycle.apply_decisions(SimulatedGateway(sc.cluster), [d])

    assert outcomes[d.pk].outcome == "already-bound"
    assert len(running_pods(sc)) == 1


def test_crash_after_recording_intent_is_reconciled_and_decided_once(monkeypatch):
    """Worker killed between recording the decisions and applying them."""
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)

    def die(*args, **kwargs):
        raise SystemExit("killed")

    monkeypatch.setattr(cycle, "apply_decisions", die)
    with pytest.raises(SystemExit):
        cycle.run_and_record_cycle(sc.shard, advance=False)
    monkeypatch.undo()
    # What a SIGKILL leaves: the cycle row still says running (the except clause never ran).
    crashed = SchedulingCycle.objects.get()
    SchedulingCycle.objects.filter(pk=crashed.pk).update(status=CycleStatus.RUNNING, error="")
    assert set(Decision.objects.values_list("status", flat=True)) == {DecisionStatus.PLANNED}
    assert running_pods(sc) == []

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    crashed.refresh_from_db()
    assert crashed.status == CycleStatus.FAILED
    assert "interrupted" in crashed.error
    assert Decision.objects.filter(cycle=crashed, status=DecisionStatus.FAILED).count() == 2
    assert outcome.binds == 2
    assert len(running_pods(sc)) == 2
    assert Decision.objects.filter(status=DecisionStatus.APPLIED, kind=DecisionKind.BIND).count() == 2


def test_crash_after_applying_is_confirmed_and_nothing_is_bound_again(monkeypatch):
    """Worker killed after the cluster took the binds but before they were marked applied."""
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)

    def die(*args, **kwargs):
        raise SystemExit("killed")

    monkeypatch.setattr(cycle, "mark_applied", die)
    with pytest.raises(SystemExit):
        cycle.run_and_record_cycle(sc.shard, advance=False)
    monkeypatch.undo()
    SchedulingCycle.objects.update(status=CycleStatus.RUNNING, error="")
    assert len(running_pods(sc)) == 2

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert outcome.binds == 0
    binds = Decision.objects.filter(kind=DecisionKind.BIND)
    assert binds.count() == 2
    assert set(binds.values_list("status", flat=True)) == {DecisionStatus.APPLIED}
    assert all("confirmed by reconciliation" in d.message for d in binds)


def test_a_failing_engine_marks_the_cycle_failed_with_the_error(monkeypatch):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j")

    def boom(snapshot, config, shard_id=None):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(cycle, "engine_run_cycle", boom)
    with pytest.raises(RuntimeError):
        cycle.run_and_record_cycle(sc.shard, advance=False)

    row = SchedulingCycle.objects.get()
    assert row.status == CycleStatus.FAILED
    assert row.error == "RuntimeError: engine exploded"
    assert running_pods(sc) == []


def test_why_pending_keeps_one_current_reason_and_history_only_on_change():
    sc = small_cluster(nodes=1)
    queue = sc.queues["team-b"]
    queue.gpu_quota, queue.gpu_limit = 2, 2
    queue.save()
    job = submit(sc, "team-b", "big", pods=1, gpus_per_pod=4)

    for _ in range(3):
        cycle.run_and_record_cycle(sc.shard, advance=False)

    reasons = PendingReason.objects.filter(workload=job)
    assert reasons.count() == 1
    current = reasons.get()
    assert current.is_current
    assert reason_codes.is_known(current.reason)  # a code of the engine's vocabulary
    assert current.message
    first_reason = current.reason

    # A different obstacle: the limit is lifted but the job no longer fits any node.
    queue.gpu_limit = -1
    queue.save()
    Pod.objects.filter(workload=job).update(gpu=16)
    cycle.run_and_record_cycle(sc.shard, advance=False)

    reasons = PendingReason.objects.filter(workload=job).order_by("pk")
    assert reasons.count() == 2
    assert [r.is_current for r in reasons] == [False, True]
    assert reasons[1].reason != first_reason

    Pod.objects.filter(workload=job).update(gpu=1)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    assert not PendingReason.objects.filter(workload=job, is_current=True).exists()


def _persist_queries(workloads: int) -> int:
    sc = small_cluster(nodes=8)
    for i in range(workloads):
        submit(sc, "team-a" if i % 2 else "team-b", f"j{i}", pods=1, gpus_per_pod=1)
    gateway = SimulatedGateway(sc.cluster)
    with CaptureQueriesContext(connection) as ctx:
        snapshot, index = adapters.build_snapshot(sc.shard, now=gateway.now())
    snapshot_queries = len(ctx.captured_queries)
    result = cycle.engine_run_cycle(snapshot, cycle.cycle_config(sc.shard))
    row = SchedulingCycle.objects.create(shard=sc.shard, started_at=adapters.from_epoch(snapshot.now))
    with CaptureQueriesContext(connection) as ctx:
        adapters.persist_result(row, result, snapshot, index)
    return snapshot_queries + len(ctx.captured_queries)


def test_snapshot_and_record_use_a_bounded_number_of_queries():
    small = _persist_queries(4)
    Pod.objects.all().delete()
    from kaiweb.workloads.models import Workload

    Workload.objects.all().delete()
    SchedulingCycle.objects.all().delete()
    from kaiweb.cluster.models import Node
    from kaiweb.queues.models import Queue

    Node.objects.all().delete()
    Queue.objects.filter(parent__isnull=False).delete()
    Queue.objects.all().delete()
    large = _persist_queries(40)
    assert large == small
    assert large <= 21


def test_evictions_record_preemption_events_with_both_queues_figures():
    sc = small_cluster(nodes=1, gpus=4)
    # team-b uses the whole node although its quota is 2; team-a (quota 2) then asks for 2.
    for q in ("team-a", "team-b"):
        sc.queues[q].gpu_quota = 2
        sc.queues[q].save()
    submit(sc, "team-b", "hog", pods=4, gpus_per_pod=1, min_member=1)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    assert len(running_pods(sc)) == 4
    submit(sc, "team-a", "needy", pods=2, gpus_per_pod=1)

    outcomes = [cycle.run_and_record_cycle(sc.shard, advance=False) for _ in range(3)]

    assert sum(o.evictions for o in outcomes) >= 1
    event = PreemptionEvent.objects.order_by("pk").first()
    assert event.action == "reclaim"
    assert event.victim_ref == "ns/hog"
    assert event.preemptor_ref == "ns/needy"
    assert event.victim_queue_id == sc.queues["team-b"].pk
    # The figures are the queues' after the cycle: the victim is back at its fair share.
    assert event.victim_queue_figures["allocated"]["gpu"] == 2
    assert event.victim_queue_figures["fair_share"]["gpu"] == 2
    assert event.preemptor_queue_figures["fair_share"]["gpu"] == 2
    assert event.preemptor_queue_figures["quota"]["gpu"] == 2
    assert event.decision.kind == DecisionKind.EVICT
    needy_running = Pod.objects.filter(workload__name="needy", state=PodState.RUNNING).count()
    assert needy_running == 2


def test_a_workload_the_engine_cannot_read_is_marked_and_the_cycle_goes_on():
    sc = small_cluster(nodes=1)
    bad = submit(sc, "dept", "on-a-parent", pods=1)  # workloads belong in leaf queues
    good = submit(sc, "team-a", "fine", pods=1)

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert outcome.status == CycleStatus.SUCCEEDED
    assert outcome.binds == 1
    good.refresh_from_db()
    assert good.state == WorkloadState.RUNNING
    mark = PendingReason.objects.get(workload=bad, is_current=True)
    assert mark.reason == reason_codes.INVALID
    assert "child queues" in mark.message
    assert mark.details["field"] == "queue"
    row = SchedulingCycle.objects.get(pk=outcome.cycle_id)
    assert "job ns/on-a-parent: queue" in row.error


class _ProtocolOnlyGateway:
    """A backend with only the gateway protocol (bind/evict) and no way to check an action itself."""

    capabilities = frozenset({Capability.OWN_CLOCK})

    def __init__(self, inner: SimulatedGateway) -> None:
        self.inner = inner

    def now(self) -> float:
        return self.inner.now()

    def bind(self, action):
        return self.inner.bind(action)

    def evict(self, action):
        return self.inner.evict(action)


def test_a_backend_without_its_own_check_is_reconciled_from_the_database_mirror(monkeypatch):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)
    monkeypatch.setattr(cycle, "get_gateway", lambda cluster: _ProtocolOnlyGateway(SimulatedGateway(cluster)))

    def die(*args, **kwargs):
        raise SystemExit("killed")

    with monkeypatch.context() as m:
        m.setattr(cycle, "mark_applied", die)
        with pytest.raises(SystemExit):
            cycle.run_and_record_cycle(sc.shard, advance=False)
    SchedulingCycle.objects.update(status=CycleStatus.RUNNING, error="")

    outcome = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert outcome.binds == 0
    assert set(Decision.objects.filter(kind=DecisionKind.BIND).values_list("status", flat=True)) == {
        DecisionStatus.APPLIED}
    assert len(running_pods(sc)) == 2


def _current_reasons(sc) -> dict[int, tuple]:
    return {r.workload_id: (r.reason, r.message, r.details, r.cycle_id)
            for r in PendingReason.objects.filter(is_current=True, workload__queue__in=sc.queues.values())}


def test_a_quiet_cycle_repeats_the_last_record_and_writes_no_reason(monkeypatch):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "fits", pods=1, gpus_per_pod=8)
    waiting = [submit(sc, "team-b", f"w{i}", pods=1, gpus_per_pod=16) for i in range(3)]  # never fit
    first = cycle.run_and_record_cycle(sc.shard, advance=False)  # binds "fits": not quiet
    with CaptureQueriesContext(connection) as full:
        second = cycle.run_and_record_cycle(sc.shard, advance=False)  # quiet, runs in full
    assert "reused" not in second.result.counts
    before = _current_reasons(sc)
    assert set(before) == {w.pk for w in waiting}
    # the same reasons in the same words: read and compared, not written again
    reason_table = PendingReason._meta.db_table
    assert [q["sql"].split()[0] for q in full.captured_queries if reason_table in q["sql"]] == ["SELECT"]
    assert {v[3] for v in before.values()} == {first.cycle_id}

    measured: list[object] = []
    monkeypatch.setattr(cycle, "shard_fragmentation", lambda shard: measured.append(shard) or (0.0, 0.0))
    with CaptureQueriesContext(connection) as ctx:
        third = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert third.result.counts["reused"] == 1
    # the same nodes and pods as the cycle it repeats: its fragmentation figures, not measured again
    assert measured == []
    figures = SchedulingCycle.objects.filter(pk__in=(second.cycle_id, third.cycle_id)).order_by("pk")
    (free, stranded), again = list(figures.values_list("free_gpus", "stranded_gpus"))
    assert free is not None
    assert again == (free, stranded)
    # the repeat neither reads nor writes a reason: they hold as they are, as of the third cycle
    assert [q for q in ctx.captured_queries if reason_table in q["sql"]] == []
    assert _current_reasons(sc) == before
    assert PendingReason.objects.count() == 3
    assert list(PendingReason.objects.current_of(sc.shard).order_by("workload_id").values_list(
        "workload_id", flat=True)) == sorted(before)


def test_a_quiet_cycle_records_in_full_when_another_cycle_recorded_since():
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "fits", pods=1, gpus_per_pod=8)
    waiting = submit(sc, "team-b", "w", pods=1, gpus_per_pod=16)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    cycle.run_and_record_cycle(sc.shard, advance=False)
    # another worker's cycle recorded a different reason for the waiting job meanwhile
    other = SchedulingCycle.objects.create(shard=sc.shard, started_at=adapters.from_epoch(0),
                                           status=CycleStatus.SUCCEEDED)
    PendingReason.objects.filter(workload=waiting, is_current=True).update(message="stale words", cycle=other)

    third = cycle.run_and_record_cycle(sc.shard, advance=False)

    assert third.result.counts["reused"] == 1
    current = PendingReason.objects.get(workload=waiting, is_current=True)
    assert current.message != "stale words"
    assert current.cycle_id == third.cycle_id
