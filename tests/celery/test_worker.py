"""A real Celery worker (subprocess) against Redis and Postgres runs the scheduling cycle."""

from __future__ import annotations

import json

import pytest

from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from tests.celery.builders import running_pods, small_cluster, submit
from tests.celery.conftest import wait_for

pytestmark = [pytest.mark.celery, pytest.mark.timeout(120)]


def task_result(task_id: str):
    from django_celery_results.models import TaskResult

    row = TaskResult.objects.filter(task_id=task_id, status__in=["SUCCESS", "FAILURE"]).first()
    return row


def test_a_worker_runs_the_cycle_task_from_the_broker(celery_harness):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=2)
    celery_harness.start_worker()

    task_id = celery_harness.send("scheduling.run_cycle", sc.shard.pk, "test")

    done = wait_for(lambda: task_result(task_id), 60, "the task result")
    assert done.status == "SUCCESS"
    cycle_id = json.loads(done.result)
    row = SchedulingCycle.objects.get(pk=cycle_id)
    assert (row.status, row.trigger, row.binds) == (CycleStatus.SUCCEEDED, "test", 2)
    assert len(running_pods(sc)) == 2


def test_a_second_worker_returns_at_once_while_the_shard_is_being_decided(celery_harness):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=1)
    worker = celery_harness.start_worker(concurrency=2, pause_at="after-decide")

    first = celery_harness.send("scheduling.run_cycle", sc.shard.pk, "first")
    worker.wait_paused()
    second = celery_harness.send("scheduling.run_cycle", sc.shard.pk, "second")
    skipped = wait_for(lambda: task_result(second), 60, "the second task to return")
    assert skipped.status == "SUCCESS"
    assert json.loads(skipped.result) is None  # returned at once: another worker holds the lock
    worker.resume()
    finished = wait_for(lambda: task_result(first), 60, "the first task to finish")

    assert json.loads(finished.result) == SchedulingCycle.objects.get().pk
    assert Decision.objects.filter(kind=DecisionKind.BIND, status=DecisionStatus.APPLIED).count() == 1
    assert len(running_pods(sc)) == 1


def test_beat_and_worker_schedule_cycles_on_their_own(celery_harness):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=1)
    celery_harness.start_worker()
    celery_harness.start_beat(KAI_CYCLE_SECONDS="1", KAI_USAGE_SECONDS="1")

    wait_for(lambda: SchedulingCycle.objects.filter(trigger="beat", status=CycleStatus.SUCCEEDED).count() >= 2,
             60, "two cycles started by beat")

    from kaiweb.usage.models import UsageBucket

    wait_for(lambda: UsageBucket.objects.filter(queue=sc.queues["team-a"], resource="gpu", value__gt=0).exists(),
             60, "usage accounting started by beat")
    assert len(running_pods(sc)) == 1
    assert Decision.objects.filter(kind=DecisionKind.BIND).count() == 1


def test_a_worker_runs_a_whatif_the_api_accepted_and_the_api_returns_its_result(celery_harness, viewer):
    from rest_framework.test import APIClient

    from kaiweb.whatif.models import WhatIfRun
    from tests.kaiweb.whatif.test_whatif import build_contended

    build_contended()
    celery_harness.start_worker()
    api = APIClient()
    api.force_authenticate(viewer)
    from kaiweb.whatif import runs as whatif_runs

    # checked and stored as the API does, then published to the harness's broker as the web process would
    run = whatif_runs.submit(viewer, changes={"alpha": {"gpu_quota": 8}}, window_hours=72)
    celery_harness.send("whatif.run", run.pk)
    wait_for(lambda: WhatIfRun.objects.filter(pk=run.pk, state="done").first(), 90, "the what-if to finish")
    body = api.get(f"/api/v1/what-if/{run.pk}/").json()
    assert body["state"] == "done"
    assert body["started_at"]
    assert body["finished_at"]
    alpha = next(r for r in body["result"]["queues"] if r["queue"] == "alpha")
    assert alpha["difference"]["queueing_delay_mean_s"] < 0
