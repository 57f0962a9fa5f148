"""The cycle and the watcher at the same moment: rows the snapshot read may be gone when the cycle
records its result. The cycle must still succeed and record what it decided, by name."""

from __future__ import annotations

from typing import Any

import pytest

from kaiweb.scheduling import cycle
from kaiweb.scheduling.choices import CycleStatus, DecisionKind
from kaiweb.scheduling.models import Decision, PendingReason, SchedulingCycle
from kaiweb.scheduling.signals import cycle_step
from kaiweb.workloads.models import Workload
from tests.celery.builders import small_cluster, submit

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
