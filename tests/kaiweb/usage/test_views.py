"""The usage report: resource-hours per queue or department over a window, chart, CSV."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from kaiweb.dashboard.sample_data import build_dataset
from kaiweb.usage.models import UsageBucket


@pytest.fixture
def ui_data(queue_tree):
    return build_dataset(nodes=8, workloads=20, cycles=2, seed=31)


def test_report_totals_match_the_buckets(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/usage/?window=7d&resource=gpu&group=queue").content.decode()
    assert 'data-figure="usage-chart"' in html
    since = timezone.now() - timedelta(days=7)
    seconds = UsageBucket.objects.filter(resource="gpu", start__gte=since, queue__children__isnull=True).aggregate(
        s=Sum("value"))["s"]
    assert f"{seconds / 3600:.1f} GPU-hours" in html


def test_department_grouping_sums_its_teams(client, viewer, ui_data):
    client.force_login(viewer)
    response = client.get("/usage/export.csv?window=7d&group=department")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    totals = {r[0]: float(r[3]) for r in rows[1:] if r[1] == "total"}
    assert set(totals) == {"department-a", "department-b"}
    team_rows = list(csv.reader(io.StringIO(client.get("/usage/export.csv?window=7d&group=queue").content.decode())))
    team_totals = {r[0]: float(r[3]) for r in team_rows[1:] if r[1] == "total"}
    dept_a = sum(v for k, v in team_totals.items() if k in ("team-inference", "team-research-a", "team-vision"))
    assert totals["department-a"] == pytest.approx(dept_a, rel=1e-6)


def test_custom_window_needs_both_dates_in_order(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/usage/?window=custom&start=2026-11-10").content.decode()
    assert "is required for a custom window" in html
    html = client.get("/usage/?window=custom&start=2026-11-10&end=2026-11-01").content.decode()
    assert "must not be before the start" in html
    response = client.get("/usage/export.csv?window=custom&start=2026-11-10&end=2026-11-01")
    assert response.status_code == 400
    assert b"end" in response.content


def test_queue_filter_keeps_its_subtree(client, viewer, ui_data):
    client.force_login(viewer)
    rows = list(csv.reader(io.StringIO(client.get("/usage/export.csv?window=7d&queue=department-b").content.decode())))
    names = {r[0] for r in rows[1:]}
    assert names == {"team-training", "team-research-b", "team-nlp"}


def test_report_query_budget(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    client.get("/usage/")
    with django_assert_max_num_queries(8):
        client.get("/usage/")
