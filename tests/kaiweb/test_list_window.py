"""The list window (KAI_LIST_WINDOW): every list, in the API and on the pages, counts at most that
many rows and says when there are more, and reads no further than it, so a page costs the same
however large the table grows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import QueueFactory, WorkloadFactory


@pytest.fixture
def six_queues(db):
    return [QueueFactory(name=f"q-{i}") for i in range(6)]


@pytest.mark.django_db
def test_an_api_list_counts_up_to_the_window_and_says_there_is_more(viewer_api, settings, six_queues):
    settings.KAI_LIST_WINDOW = 4
    with CaptureQueriesContext(connection) as queries:
        data = viewer_api.get("/api/v1/queues/?limit=2").json()
    assert data["count"] == 4
    assert data["count_capped"] is True
    assert len(data["results"]) == 2
    counts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]
    assert counts
    assert all("LIMIT 5" in sql for sql in counts)  # the count reads at most the window and one row more
    settings.KAI_LIST_WINDOW = 10
    data = viewer_api.get("/api/v1/queues/?limit=2").json()
    assert data["count"] == 6
    assert data["count_capped"] is False


@pytest.mark.django_db
def test_an_offset_past_the_window_is_a_400_naming_it(viewer_api, settings, six_queues):
    settings.KAI_LIST_WINDOW = 4
    for path in ("/api/v1/queues/", "/api/v1/workloads/", "/api/v1/pending-reasons/"):
        response = viewer_api.get(f"{path}?offset=5")
        assert response.status_code == 400, (path, response.content)
        assert "at most 4" in response.json()["offset"][0]
    data = viewer_api.get("/api/v1/queues/?offset=4&limit=10").json()  # the window's edge is still readable
    assert [q["name"] for q in data["results"]] == ["q-4", "q-5"]
    assert data["next"] is None


@pytest.mark.django_db
def test_the_schema_describes_the_capped_count(viewer_api):
    schema = viewer_api.get("/api/v1/schema/?format=json").json()
    page = schema["components"]["schemas"]["PaginatedQueueList"]
    assert page["properties"]["count_capped"]["type"] == "boolean"
    assert "count_capped" in page["required"]


@pytest.mark.django_db
def test_a_page_list_shows_more_than_the_window_and_offers_no_page_past_it(client, viewer, settings, queue_tree):
    settings.KAI_LIST_WINDOW = 3
    for i in range(5):
        WorkloadFactory(name=f"w-{i}", queue=queue_tree["team-training"])
    client.force_login(viewer)
    html = client.get("/workloads/?per_page=25").content.decode()
    assert "1–3 of more than 3 (filter to narrow)" in html
    assert sum(f"/w-{i}<" in html for i in range(5)) == 3  # the page lists the window's rows only
    page = client.get("/workloads/?per_page=25&page=2").content.decode()  # past the window: the last page
    assert "1–3 of more than 3" in page
    assert "of 1+" in page  # one page, and more beyond the window
    narrowed = client.get("/workloads/?per_page=25&q=w-4").content.decode()  # a filter reaches past it
    assert "1–1 of 1" in narrowed
    assert "/w-4<" in narrowed
    settings.KAI_LIST_WINDOW = 10
    html = client.get("/workloads/?per_page=25").content.decode()
    assert "1–5 of 5" in html
