"""`core.queries.update_rows`: each row's named fields written as `save` would write them (JSON,
times, foreign keys, nulls), nothing else touched."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kaiweb.core.queries import update_rows
from kaiweb.queues.models import Queue
from kaiweb.workloads.models import Workload
from tests.factories import WorkloadFactory

pytestmark = pytest.mark.django_db


def test_update_rows_writes_only_the_named_fields_of_each_row() -> None:
    queue = Queue.objects.create(name="team-a", gpu_quota=8)
    other = Queue.objects.create(name="team-b", gpu_quota=8)
    a, b, untouched = (WorkloadFactory(queue=queue, name=n, state="Pending", labels={"x": "1"}) for n in "abc")
    when = datetime(2026, 11, 27, 12, 30, tzinfo=UTC)
    a.state, a.last_start_at, a.labels, a.queue = "Running", when, {"y": [1, 2]}, other
    b.state, b.last_start_at, b.labels = "Failed", None, {"z": None}
    b.name = "renamed-in-memory-only"

    assert update_rows(Workload, [b, a], ["state", "last_start_at", "labels", "queue_id"]) == 2
    assert update_rows(Workload, [], ["state"]) == 0

    a2, b2, c2 = (Workload.objects.get(pk=w.pk) for w in (a, b, untouched))
    assert (a2.state, a2.last_start_at, a2.labels, a2.queue_id) == ("Running", when, {"y": [1, 2]}, other.pk)
    assert (b2.state, b2.last_start_at, b2.labels, b2.queue_id) == ("Failed", None, {"z": None}, queue.pk)
    assert b2.name == "b"  # a field not named is left as the database has it
    assert (c2.state, c2.labels) == ("Pending", {"x": "1"})
