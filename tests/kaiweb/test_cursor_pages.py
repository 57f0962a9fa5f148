"""The append-only histories page by cursor as well (core.api.pagination): following `next_cursor`
reads a history whole, past the list window, in its own order, each row once, with a fixed number
of queries per page; bad cursors are 400s naming `cursor`."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import PreemptionEventFactory, QueueFactory, SchedulingCycleFactory

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=123456)


@pytest.fixture
def events():
    """25 preemption events, several at the same instant (the id orders those)."""
    cycle = SchedulingCycleFactory()
    return [PreemptionEventFactory(cycle=cycle, at=T0 - dt.timedelta(seconds=i // 3), victim_ref=f"team/v-{i}")
            for i in range(25)]


def _walk(api, url: str) -> tuple[list[str], list[int]]:
    """Every row's victim, following `next` links, and the queries each page made."""
    seen: list[str] = []
    queries: list[int] = []
    while url:
        with CaptureQueriesContext(connection) as captured:
            data = api.get(url).json()
        queries.append(len(captured.captured_queries))
        seen += [row["victim_ref"] for row in data["results"]]
        url = data["next"]
        if url is None:
            assert data["next_cursor"] is None
    return seen, queries


def test_following_cursors_reads_a_history_whole_past_the_window_in_its_order(viewer_api, settings, events):
    settings.KAI_LIST_WINDOW = 10
    expected = [e.victim_ref for e in sorted(events, key=lambda e: (e.at, e.id), reverse=True)]
    first = viewer_api.get("/api/v1/preemptions/?limit=4").json()
    assert first["count"] == 10
    assert first["count_capped"] is True
    assert first["next_cursor"]
    seen, queries = _walk(viewer_api, f"/api/v1/preemptions/?limit=4&cursor={first['next_cursor']}")
    assert [r["victim_ref"] for r in first["results"]] + seen == expected
    assert len(set(queries)) == 1  # every page reads the same way, however deep
    assert viewer_api.get("/api/v1/preemptions/?offset=12").status_code == 400  # offsets stop at the window


def test_a_row_added_between_pages_is_neither_repeated_nor_makes_one_be_skipped(viewer_api, events):
    first = viewer_api.get("/api/v1/preemptions/?limit=5").json()
    PreemptionEventFactory(cycle=events[0].cycle, at=T0 + dt.timedelta(seconds=5), victim_ref="team/newest")
    seen, _ = _walk(viewer_api, f"/api/v1/preemptions/?limit=5&cursor={first['next_cursor']}")
    rows = [r["victim_ref"] for r in first["results"]] + seen
    assert sorted(rows) == sorted(e.victim_ref for e in events)
    assert "team/newest" not in rows  # newer than where the reader is: the next read from the top shows it


def test_filters_hold_across_cursor_pages(viewer_api, events):
    PreemptionEventFactory(cycle=events[0].cycle, at=T0, action="preempt", victim_ref="team/p-1")
    data = viewer_api.get("/api/v1/preemptions/?limit=10&action=reclaim").json()
    seen, _ = _walk(viewer_api, data["next"]) if data["next"] else ([], [])
    assert len(data["results"]) + len(seen) == 25


@pytest.mark.parametrize(("query", "says"), [
    ("cursor=not-a-cursor", "not a cursor of this list"),
    ("cursor=WzEsMiwzXQ", "not a cursor of this list"),  # a list of three values where two are expected
    ("cursor=" + "A" * 600, "not a cursor of this list"),
    ("cursor=WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwxXQ&offset=3", "either cursor or offset"),
    ("cursor=WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwxXQ&ordering=reason", "drop `ordering`"),
])
def test_a_bad_cursor_is_a_400_naming_it(viewer_api, events, query, says):
    response = viewer_api.get(f"/api/v1/preemptions/?{query}")
    assert response.status_code == 400
    assert says in response.json()["cursor"][0]


def test_other_orders_and_other_lists_give_no_cursor(viewer_api, events):
    QueueFactory(name="q-1")
    assert "next_cursor" not in viewer_api.get("/api/v1/preemptions/?limit=3&ordering=reason").json()
    assert "next_cursor" not in viewer_api.get("/api/v1/queues/").json()
    response = viewer_api.get("/api/v1/queues/?cursor=abc")
    assert response.status_code == 400
    assert "does not page by cursor" in response.json()["cursor"][0]


def test_every_history_pages_by_cursor(viewer_api, events):
    from kaiweb.audit.models import AuditEntry
    from tests.factories import DecisionFactory, PendingReasonFactory, QueueStatusFactory

    cycle = events[0].cycle
    SchedulingCycleFactory()
    for n in range(3):
        AuditEntry.objects.create(object_type="queues.queue", object_id=str(n), object_repr=f"q-{n}", action="create")
        DecisionFactory(cycle=cycle)
        PendingReasonFactory(recorded_at=T0 - dt.timedelta(seconds=n))
        QueueStatusFactory(recorded_at=T0 - dt.timedelta(seconds=n))
    for path in ("/api/v1/audit/", "/api/v1/cycles/", "/api/v1/decisions/", "/api/v1/preemptions/",
                 "/api/v1/pending-reasons/", "/api/v1/queue-statuses/"):
        first = viewer_api.get(path + "?limit=1").json()
        assert first["next_cursor"], path
        rest, _ = _walk_ids(viewer_api, f"{path}?limit=1&cursor={first['next_cursor']}")
        everything = [row["id"] for row in viewer_api.get(path + "?limit=100").json()["results"]]
        assert [first["results"][0]["id"], *rest] == everything, path


def _walk_ids(api, url: str) -> tuple[list[int], int]:
    ids: list[int] = []
    pages = 0
    while url:
        data = api.get(url).json()
        pages += 1
        ids += [row["id"] for row in data["results"]]
        url = data["next"]
    return ids, pages
