"""The audit log through the API: every change through the API shows up, with who, before and after."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_changes_through_the_api_are_listed_newest_first(admin_api, viewer_api, queue_tree):
    pk = queue_tree["team-training"].pk
    admin_api.patch(f"/api/v1/queues/{pk}/", {"gpu_quota": 4}, format="json")
    admin_api.post("/api/v1/priority-classes/", {"name": "urgent", "value": 300}, format="json")
    rows = viewer_api.get("/api/v1/audit/").json()["results"]
    assert [(r["object_type"], r["action"], r["source"]) for r in rows] == [
        ("queues.priorityclass", "create", "api"),
        ("queues.queue", "update", "api"),
    ]
    assert rows[1]["before"]["gpu_quota"] == 8.0
    assert rows[1]["after"]["gpu_quota"] == 4.0
    assert rows[1]["actor_name"] == "platform-admin"
    only_queues = viewer_api.get(f"/api/v1/audit/?object_type=queues.queue&object_id={pk}").json()["results"]
    assert len(only_queues) == 1


def test_audit_is_read_only(admin_api):
    assert admin_api.post("/api/v1/audit/", {}, format="json").status_code == 405
