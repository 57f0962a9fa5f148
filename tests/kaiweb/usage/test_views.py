"""The usage report: resource-hours per queue or department over a window, chart, CSV."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from kaiweb.usage.models import UsageBucket
from tests.sample_data import build_dataset


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
    with django_assert_max_num_queries(9):  # one of them: the org's queues, for the pools and projects
        client.get("/usage/")


def _bucket(queue, start, gpus: float, width: int = 60):
    return UsageBucket.objects.create(queue=queue, resource="gpu", start=start, width_seconds=width,
                                      value=gpus * width)


def test_the_current_hour_is_drawn_as_partial_not_as_a_fall(client, viewer, queue_tree):
    from kaiweb.usage.views import compute_report

    q = queue_tree["team-training"]
    # a window that ends half way through an hour (as "now" does in the current hour)
    hour = (timezone.now() - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    for k in range(60):  # the whole hour before at 8 GPUs
        _bucket(q, hour - timedelta(hours=1) + timedelta(minutes=k), 8)
    for k in range(30):  # the half hour the window covers of the last hour, also at 8 GPUs
        _bucket(q, hour + timedelta(minutes=k), 8)
    report = compute_report({"since": hour - timedelta(hours=1), "until": hour + timedelta(minutes=30),
                             "resource": "gpu", "group": "queue", "queue": None, "step": "hour"})
    pts = dict(report["series"]["team-training"])
    averages = {t: v / report["covered_hours"][t] for t, v in pts.items()}
    assert averages[hour - timedelta(hours=1)] == pytest.approx(8, rel=0.02)
    assert averages[hour] == pytest.approx(8)  # an average over the half hour covered, not 4 (8 × 30/60)
    assert report["covered_hours"][hour] == pytest.approx(0.5)
    assert hour in report["partial"]
    assert hour - timedelta(hours=1) not in report["partial"]


def test_a_week_step_json_and_csv_give_the_same_numbers(client, viewer, ui_data):
    client.force_login(viewer)
    body = client.get("/usage/export.json?window=30d&group=department&step=week").json()
    assert body["step"] == "week"
    rows = list(csv.reader(io.StringIO(
        client.get("/usage/export.csv?window=30d&group=department&step=week").content.decode())))
    csv_totals = {r[0]: float(r[3]) for r in rows[1:] if r[1] == "total"}
    assert {t["name"]: t["value"] for t in body["totals"]} == pytest.approx(csv_totals, abs=1e-3)
    for name, slots in body["series"].items():
        csv_slots = {r[1]: float(r[3]) for r in rows[1:] if r[0] == name and r[1] != "total"}
        assert {s["slot_start"]: s["value"] for s in slots} == pytest.approx(csv_slots, abs=1e-3)
    bad = client.get("/usage/export.json?window=custom&start=2026-11-10")
    assert bad.status_code == 400
    assert "start" in bad.json() or "end" in bad.json()


def test_the_chart_axis_is_the_window_from_the_first_minute(client, viewer, queue_tree):
    import json
    import re

    _bucket(queue_tree["team-training"], timezone.now() - timedelta(minutes=1), 4)
    client.force_login(viewer)
    html = client.get("/usage/?window=24h&step=hour").content.decode()
    figure = json.loads(re.search(r'<script id="usage-chart" type="application/json">(.*?)</script>', html, re.S)
                        .group(1))
    start, end = figure["layout"]["xaxis"]["range"]
    assert start < end
    assert figure["layout"]["xaxis"]["type"] == "date"
    assert figure["data"][0]["mode"] == "lines+markers"  # one point is still visible


def test_usage_per_namespace_and_per_user_adds_up_to_the_queues_total(client, viewer, queue_tree):
    now = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    team = queue_tree["team-training"]
    UsageBucket.objects.create(queue=team, resource="gpu", start=now, width_seconds=60, value=7200.0,
                               by_namespace={"training": 5400.0, "sandbox": 1800.0},
                               by_user={"dmitri": 3600.0, "ns/sandbox": 3600.0})
    # Written before the split was recorded: counted, and named as such.
    UsageBucket.objects.create(queue=team, resource="gpu", start=now + timedelta(minutes=1), width_seconds=60,
                               value=3600.0)
    client.force_login(viewer)
    per_queue = client.get("/usage/export.json?window=24h&group=queue").json()
    per_user = client.get("/usage/export.json?window=24h&group=user").json()
    per_ns = client.get("/usage/export.json?window=24h&group=namespace").json()
    assert per_queue["total"] == per_user["total"] == per_ns["total"] == 3.0  # GPU-hours
    assert {t["name"]: t["value"] for t in per_user["totals"]} == {"dmitri": 1.0, "ns/sandbox": 1.0,
                                                                   "(unattributed)": 1.0}
    assert {t["name"]: t["value"] for t in per_ns["totals"]} == {"training": 1.5, "sandbox": 0.5,
                                                                 "(unattributed)": 1.0}
    rows = list(csv.reader(io.StringIO(client.get("/usage/export.csv?window=24h&group=user").content.decode())))
    assert rows[0][0] == "user"
    assert {r[0]: float(r[3]) for r in rows[1:] if r[1] == "total"} == {"dmitri": 1.0, "ns/sandbox": 1.0,
                                                                        "(unattributed)": 1.0}
    page = client.get("/usage/?window=24h&group=user").content.decode()
    assert "<th>User</th>" in page
    assert "dmitri" in page
    assert 'href="/queues/dmitri/"' not in page  # a user is not a queue
    bad = client.get("/usage/export.json?window=24h&group=team")
    assert bad.status_code == 400
    assert "group" in bad.json()


def test_users_and_namespaces_get_distinct_colours_by_rank(client, viewer, queue_tree):
    now = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    users = {f"user-{i}": 3600.0 * (i + 1) for i in range(8)}
    UsageBucket.objects.create(queue=queue_tree["team-training"], resource="gpu", start=now, width_seconds=60,
                               value=sum(users.values()), by_user=users)
    client.force_login(viewer)
    response = client.get("/usage/?window=24h&group=user")
    colours = [row["colour"] for row in response.context["report"]["table"]]
    assert len(colours) == 8
    assert len(set(colours)) == 8
