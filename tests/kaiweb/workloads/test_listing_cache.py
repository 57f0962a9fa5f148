"""The workloads listing is computed once per committed state of what it shows (core.changes): a
cached page is served until a transaction that changes workloads, pods, why-pending or the names
they show commits, and never after."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from kaiweb.core.changes import listing_version
from kaiweb.core.models import ChangeCounter
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.scheduling.models import PendingReason
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod, Workload
from tests.factories import PodFactory, QueueFactory, UserFactory, WorkloadFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the change counter's triggers are Postgres'"),
]

URL = "/api/v1/workloads/?limit=50"


@pytest.fixture
def api(db):
    from tests.conftest import _client_for

    return _client_for(UserFactory(username="lister"))


def _rows(api) -> dict[str, dict]:
    return {r["name"]: r for r in api.get(URL).json()["results"]}


def _reads_workloads(api) -> bool:
    with CaptureQueriesContext(connection) as ctx:
        assert api.get(URL).status_code == 200
    return any('"workloads_workload"' in q["sql"] for q in ctx.captured_queries)


def test_a_page_is_served_from_the_cache_until_a_change_commits(api):
    queue = QueueFactory(name="leaf")
    job = PodFactory(name="p-0", workload__name="job", workload__queue=queue).workload
    assert _reads_workloads(api)  # computed
    assert not _reads_workloads(api)  # served as computed

    # each kind of committed write is seen by the next request
    WorkloadFactory(name="another", queue=queue)
    assert set(_rows(api)) == {"job", "another"}

    Pod.objects.filter(workload=job).update(state=PodState.RUNNING)  # a bulk UPDATE, no signal
    PodFactory(name="p-1", workload=job)
    assert _rows(api)["job"]["pod_count"] == 2

    PendingReason.objects.create(workload=job, reason="queue-over-limit", message="at its limit",
                                 recorded_at=job.submitted_at, is_current=True)
    assert _rows(api)["job"]["pending_reason"]["message"] == "at its limit"

    Queue.objects.filter(pk=queue.pk).update(name="renamed")
    assert _rows(api)["job"]["queue"] == "renamed"

    PriorityClass.objects.create(name="urgent", value=1000)
    Workload.objects.filter(pk=job.pk).update(priority_class=PriorityClass.objects.get(name="urgent"))
    assert _rows(api)["job"]["priority_class"] == "urgent"

    Workload.objects.filter(name="another").delete()
    assert set(_rows(api)) == {"job"}
    assert not _reads_workloads(api)


def test_the_counter_moves_once_per_committed_transaction_and_not_for_a_rolled_back_one(api):
    queue = QueueFactory(name="leaf")
    before = ChangeCounter.objects.get(name="workloads").value
    with transaction.atomic():
        for i in range(5):
            WorkloadFactory(name=f"w{i}", queue=queue)
    assert ChangeCounter.objects.get(name="workloads").value == before + 1

    with transaction.atomic():
        WorkloadFactory(name="undone", queue=queue)
        transaction.set_rollback(True)
    assert ChangeCounter.objects.get(name="workloads").value == before + 1


def test_a_transaction_that_has_written_is_never_served_a_cached_page(api):
    queue = QueueFactory(name="leaf")
    WorkloadFactory(name="first", queue=queue)
    assert listing_version("workloads") is not None
    assert set(_rows(api)) == {"first"}
    with transaction.atomic():
        WorkloadFactory(name="mine", queue=queue)
        assert listing_version("workloads") is None  # it sees its own change, which no version names
        assert set(_rows(api)) == {"first", "mine"}
        transaction.set_rollback(True)
    assert set(_rows(api)) == {"first"}


def test_a_cluster_row_moves_the_counter_only_when_its_name_changes(api):
    from kaiweb.cluster.models import Cluster

    cluster, _ = Cluster.objects.get_or_create(name="east", defaults={"backend": "simulated"})
    before = ChangeCounter.objects.get(name="workloads").value
    cluster.settings = {"simulation": {"now": 1.0}}
    cluster.save()  # every column, the name unchanged (as the simulated clock does each cycle)
    assert ChangeCounter.objects.get(name="workloads").value == before
    Cluster.objects.filter(pk=cluster.pk).update(name="west")
    assert ChangeCounter.objects.get(name="workloads").value == before + 1
    Cluster.objects.filter(pk=cluster.pk).delete()
    assert ChangeCounter.objects.get(name="workloads").value == before + 2
