"""Concurrent writes of the queue tree (issue 13): a lost unique-name race is a 400 naming the field, a
deadlock is retried once, concurrent conflicting moves never deadlock and never make a cycle."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection, connections

from kaiweb.audit.models import AuditEntry
from kaiweb.queues import services
from kaiweb.queues.models import Queue
from tests.factories import QueueFactory


def _as_if_another_request_created(name: str):
    """Stand-in for the rule check: a concurrent request commits a queue of the same name meanwhile."""
    real = services._validate

    def validate(queue: Queue) -> None:
        real(queue)
        if not Queue.objects.filter(name=name).exists():
            Queue.objects.create(name=name)

    return validate


@pytest.mark.django_db
def test_a_create_that_loses_the_name_race_is_a_400_naming_the_name(admin_api, monkeypatch):
    monkeypatch.setattr(services, "_validate", _as_if_another_request_created("team-x"))
    response = admin_api.post("/api/v1/queues/", {"name": "team-x"}, format="json")
    assert response.status_code == 409, response.content
    assert "already exists" in response.json()["name"][0]


@pytest.mark.django_db
def test_a_rename_that_loses_the_name_race_is_a_400_naming_the_name(admin_api, monkeypatch):
    queue = QueueFactory(name="team-a")
    monkeypatch.setattr(services, "_validate", _as_if_another_request_created("team-b"))
    response = admin_api.patch(f"/api/v1/queues/{queue.pk}/", {"name": "team-b"}, format="json")
    assert response.status_code == 409, response.content
    assert "already exists" in response.json()["name"][0]
    queue.refresh_from_db()
    assert queue.name == "team-a"


@pytest.mark.django_db(transaction=True)
def test_a_move_aborted_by_a_deadlock_runs_once_more(monkeypatch):
    parent, child = QueueFactory(name="parent"), QueueFactory(name="child")
    real, calls = services.lock_tree, []

    def lock_tree() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("deadlock detected")
        real()

    monkeypatch.setattr(services, "lock_tree", lock_tree)
    services.update_queue(child, {"parent": "parent"})
    child.refresh_from_db()
    assert child.parent == parent
    assert len(calls) == 2
    assert AuditEntry.objects.filter(object_id=str(child.pk), action="update").count() == 1


@pytest.mark.django_db(transaction=True)
def test_other_database_errors_are_not_retried(monkeypatch):
    QueueFactory(name="parent")
    child = QueueFactory(name="child")
    calls = []

    def lock_tree() -> None:
        calls.append(1)
        raise OperationalError("disk full")

    monkeypatch.setattr(services, "lock_tree", lock_tree)
    with pytest.raises(OperationalError):
        services.update_queue(child, {"parent": "parent"})
    assert len(calls) == 1


@pytest.mark.django_db
def test_a_move_that_makes_a_cycle_is_still_refused():
    a = QueueFactory(name="a")
    b = QueueFactory(name="b", parent=a)
    with pytest.raises(ValidationError) as exc:
        services.update_queue(a, {"parent": "b"})
    assert "makes a cycle" in str(exc.value)
    a.refresh_from_db()
    assert a.parent_id is None
    assert b.parent_id == a.pk


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need Postgres")
def test_concurrent_conflicting_moves_never_deadlock_nor_make_a_cycle():
    rounds, errors = 20, []
    names = ("left", "right")
    for name in names:
        QueueFactory(name=name)
    barrier = threading.Barrier(2)

    def mover(me: str, other: str) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=30)
                try:
                    services.update_queue(Queue.objects.get(name=me), {"parent": other})
                except ValidationError as exc:
                    if "cycle" not in str(exc):
                        errors.append(exc)
                barrier.wait(timeout=30)
                if me == "left":
                    Queue.objects.filter(name__in=names).update(parent=None)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=mover, args=("left", "right")), threading.Thread(target=mover, args=("right", "left"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    parents = dict(Queue.objects.values_list("name", "parent__name"))
    assert services.find_cycle(parents, "left") is None
