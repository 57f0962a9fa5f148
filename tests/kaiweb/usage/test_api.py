"""Usage through the API: totals per queue, window and resource; retention settings and their rules."""

from __future__ import annotations

import datetime as dt

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.usage.models import UsageSettings
from tests.factories import T0, UsageBucketFactory

pytestmark = pytest.mark.django_db


def test_summary_totals_a_window(viewer_api, queue_tree):
    training = queue_tree["team-training"]
    for hour in range(5):
        UsageBucketFactory(queue=training, start=T0 + dt.timedelta(hours=hour), value=2 * 3600)  # 2 GPUs all hour
    UsageBucketFactory(queue=training, resource="cpu", start=T0, value=1000 * 3600)
    UsageBucketFactory(queue=queue_tree["team-inference"], start=T0, value=3600)
    start, end = T0.isoformat(), (T0 + dt.timedelta(hours=4)).isoformat()
    response = viewer_api.get("/api/v1/usage/summary/", {"start": start, "end": end, "resource": "gpu"})
    assert response.status_code == 200
    place = {"pool": "default", "project": "(no project)"}
    assert response.json() == [
        {"queue": "team-inference", **place, "department": "department-a", "resource": "gpu", "value": 3600.0,
         "hours": 1.0, "average": 0.25, "buckets": 1},
        {"queue": "team-training", **place, "department": "department-b", "resource": "gpu", "value": 28800.0,
         "hours": 8.0, "average": 2.0, "buckets": 4},
    ]
    only_b = viewer_api.get("/api/v1/usage/summary/", {"start": start, "end": end, "department": "department-b"})
    assert [(r["queue"], r["resource"]) for r in only_b.json()] == [("team-training", "cpu"), ("team-training", "gpu")]


def test_summary_rejects_an_inverted_window(viewer_api):
    response = viewer_api.get("/api/v1/usage/summary/", {"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"})
    assert response.status_code == 400
    assert response.json() == {"start": ["must be before end"]}


def test_buckets_filter_by_queue(viewer_api, queue_tree):
    UsageBucketFactory(queue=queue_tree["team-training"])
    UsageBucketFactory(queue=queue_tree["team-inference"])
    rows = viewer_api.get("/api/v1/usage/?queue=team-training").json()["results"]
    assert [r["queue"] for r in rows] == ["team-training"]


def test_settings_rules_and_audit(admin_api, viewer_api):
    assert viewer_api.get("/api/v1/usage-settings/current/").json()["raw_width_seconds"] == 60
    refused = viewer_api.patch("/api/v1/usage-settings/current/", {"raw_retention_days": 3}, format="json")
    assert refused.status_code == 403
    bad = admin_api.patch("/api/v1/usage-settings/current/", {"hourly_retention_days": 2}, format="json")
    assert bad.status_code == 400
    assert bad.json() == {"hourly_retention_days": ["must be at least raw_retention_days"]}
    ok = admin_api.patch("/api/v1/usage-settings/current/", {"raw_retention_days": 3}, format="json")
    assert ok.json()["raw_retention_days"] == 3
    assert UsageSettings.load().raw_retention_days == 3
    assert AuditEntry.objects.filter(object_type="usage.usagesettings", action="update").count() == 1
