"""A worker that survives its dependencies (issue 13): with its database gone it stops taking tasks and
/readyz says so; it takes them again when the database answers; the broker settings retry for ever."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kaiweb.core import workerhealth


class FakeConsumer:
    """The part of Celery's consumer the gate uses: its queues, cancel and add."""

    def __init__(self, queues: list[str]) -> None:
        self.hostname = "celery@test-worker"
        self.task_consumer = SimpleNamespace(queues=[SimpleNamespace(name=q) for q in queues])
        self.calls: list[tuple[str, str]] = []

    def cancel_task_queue(self, name: str) -> None:
        self.calls.append(("cancel", name))
        self.task_consumer.queues = [q for q in self.task_consumer.queues if q.name != name]

    def add_task_queue(self, name: str) -> None:
        self.calls.append(("add", name))
        self.task_consumer.queues.append(SimpleNamespace(name=name))


@pytest.fixture
def reports_in_files(settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.VAR_DIR = tmp_path
    settings.KAI_WORKER_HEALTH_SECONDS = 10


def test_a_worker_without_its_database_stops_taking_tasks_and_resumes(monkeypatch, reports_in_files):
    consumer = FakeConsumer(["celery", "reports"])
    gate = workerhealth.DatabaseGate(consumer)
    monkeypatch.setattr(workerhealth, "database_reachable", lambda: (False, "database unreachable: OperationalError"))

    assert gate.check() is False
    assert gate.check() is False  # still down: nothing cancelled twice
    assert consumer.calls == [("cancel", "celery"), ("cancel", "reports")]
    assert consumer.task_consumer.queues == []
    check = workerhealth.check_workers()
    assert not check["ok"]
    assert "celery@test-worker (database unreachable: OperationalError; not taking tasks)" in check["detail"]

    monkeypatch.setattr(workerhealth, "database_reachable", lambda: (True, "database reachable"))
    assert gate.check() is True
    assert consumer.calls[2:] == [("add", "celery"), ("add", "reports")]
    assert workerhealth.check_workers() == {"ok": True, "detail": "1 worker(s) healthy"}


@pytest.mark.django_db
def test_readyz_reports_a_worker_that_cannot_reach_its_database(client, monkeypatch, reports_in_files):
    monkeypatch.setattr(workerhealth, "database_reachable", lambda: (False, "database unreachable: OperationalError"))
    workerhealth.DatabaseGate(FakeConsumer(["celery"])).check()
    response = client.get("/readyz")
    assert response.status_code == 200  # the web still answers: reported, not taken out of service
    assert response.json()["status"] == "degraded"
    assert "database unreachable" in response.json()["checks"]["workers"]["detail"]
    workerhealth.forget("celery@test-worker")
    assert client.get("/readyz").json()["checks"]["workers"]["ok"]


def test_old_reports_expire(reports_in_files, monkeypatch):
    workerhealth.report("celery@gone", False, "database unreachable")
    assert not workerhealth.check_workers()["ok"]
    now = workerhealth.time.time()
    monkeypatch.setattr(workerhealth.time, "time", lambda: now + 31)
    assert workerhealth.check_workers()["ok"]


@pytest.mark.django_db
def test_database_reachable_answers_for_the_test_database():
    assert workerhealth.database_reachable() == (True, "database reachable")


def test_the_worker_runs_the_gate_and_retries_the_broker_for_ever():
    from django.conf import settings

    from kaiweb.celery import DatabaseGateStep, app

    assert DatabaseGateStep in app.steps["consumer"]
    assert settings.CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP is True
    assert settings.CELERY_BROKER_CONNECTION_MAX_RETRIES is None
