"""The Django admin manages the tree through the same rules and roles as the API."""

from __future__ import annotations

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.queues.models import Queue

pytestmark = pytest.mark.django_db

FORM = {
    "name": "", "display_name": "", "parent": "", "priority": 100,
    "cpu_quota": 0, "cpu_limit": -1, "cpu_over_quota_weight": 1,
    "memory_quota": 0, "memory_limit": -1, "memory_over_quota_weight": 1,
    "gpu_quota": 0, "gpu_limit": -1, "gpu_over_quota_weight": 1,
    "preempt_min_runtime": "", "reclaim_min_runtime": "", "labels": "{}",
}


def form(**values):
    data = dict(FORM)
    data.update(values)
    return data


def test_platform_admin_adds_a_queue_and_sees_the_warning(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    parent = queue_tree["department-b"].pk
    response = client.post("/admin/queues/queue/add/", form(name="team-x", parent=parent, gpu_quota=4), follow=True)
    assert response.status_code == 200
    assert Queue.objects.get(name="team-x").parent_id == parent
    assert "summing to 20, above department-b&#x27;s gpu quota 16" in response.content.decode()
    assert AuditEntry.objects.filter(source="admin", action="create", object_repr="team-x").exists()


def test_admin_shows_rule_errors_next_to_the_field(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    response = client.post("/admin/queues/queue/add/", form(name="bad", gpu_quota=4, gpu_limit=2))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors == {"gpu_limit": ["limit 2 is below the quota 4; a limit must be -1 or ≥ the quota"]}
    assert not Queue.objects.filter(name="bad").exists()


def test_admin_refuses_a_cycle(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    dep = queue_tree["department-a"]
    data = form(name="department-a", parent=queue_tree["team-inference"].pk, gpu_quota=16, cpu_quota=128000)
    response = client.post(f"/admin/queues/queue/{dep.pk}/change/", data)
    assert "makes a cycle in the tree" in str(response.context["adminform"].form.errors["parent"])
    dep.refresh_from_db()
    assert dep.parent is None


def test_admin_will_not_delete_a_parent(client, platform_admin, queue_tree):
    client.force_login(platform_admin)
    dep = queue_tree["department-a"]
    response = client.post(f"/admin/queues/queue/{dep.pk}/delete/", {"post": "yes"})
    assert Queue.objects.filter(pk=dep.pk).exists()
    assert "has child queues (team-inference, team-research-a)" in response.content.decode()


def test_queue_admin_edits_their_subtree_only(client, queue_admin, queue_tree):
    client.force_login(queue_admin)
    inside, outside = queue_tree["team-inference"], queue_tree["team-training"]
    data = form(name="team-inference", parent=queue_tree["department-a"].pk, priority=200, gpu_quota=6, gpu_limit=16,
                cpu_quota=64000, cpu_limit=128000)
    response = client.post(f"/admin/queues/queue/{inside.pk}/change/", data)
    assert response.status_code == 302
    inside.refresh_from_db()
    assert inside.gpu_quota == 6
    data.update(name="team-training", parent=queue_tree["department-b"].pk)
    response = client.post(f"/admin/queues/queue/{outside.pk}/change/", data)
    assert response.status_code == 403
    outside.refresh_from_db()
    assert outside.gpu_quota == 8


def test_queue_admin_cannot_change_priority_classes(client, queue_admin):
    client.force_login(queue_admin)
    assert client.get("/admin/queues/priorityclass/add/").status_code == 403
    assert client.get("/admin/queues/priorityclass/").status_code == 200  # may look


def test_viewer_without_staff_cannot_enter_the_admin(client, viewer):
    client.force_login(viewer)
    response = client.get("/admin/queues/queue/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_history_is_read_only_in_the_admin(client, platform_admin):
    client.force_login(platform_admin)
    assert client.get("/admin/scheduling/schedulingcycle/add/").status_code == 403
    assert client.get("/admin/audit/auditentry/").status_code == 200
