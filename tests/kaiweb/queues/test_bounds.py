"""Bounds that platform admins set on what queue admins may give their queues (QueueBounds)."""

from __future__ import annotations

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.queues import services
from kaiweb.queues.models import Queue, QueueBounds

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("field", "value", "bound"), [
    ("priority", 2147483647, "1000"),
    ("gpu_quota", 1e308, "1024"),
    ("gpu_over_quota_weight", 1e300, "100"),
    ("cpu_over_quota_weight", 1e6, "100"),
])
def test_a_queue_admin_cannot_raise_a_field_past_its_bound_and_nothing_is_written(queue_admin_api, queue_tree,
                                                                                  field, value, bound):
    q = queue_tree["team-inference"]
    before = Queue.objects.get(pk=q.pk)
    audited = AuditEntry.objects.count()
    body = {field: value, "gpu_limit": -1} if field == "gpu_quota" else {field: value}  # (a limit stays ≥ quota)
    response = queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", body, format="json")
    assert response.status_code == 400
    message = response.json()[field][0]
    assert f"is above {bound}, the most a queue admin may set" in message
    assert getattr(Queue.objects.get(pk=q.pk), field) == getattr(before, field)
    assert AuditEntry.objects.count() == audited


def test_a_platform_admin_is_not_bound(admin_api, queue_tree):
    q = queue_tree["team-inference"]
    response = admin_api.patch(f"/api/v1/queues/{q.pk}/", {"priority": 5000, "gpu_quota": 4096, "gpu_limit": -1},
                               format="json")
    assert response.status_code == 200, response.json()
    assert (response.json()["priority"], response.json()["gpu_quota"]) == (5000, 4096)


def test_bounds_are_configurable_and_a_value_kept_from_a_platform_admin_is_not_judged_again(
        queue_admin_api, admin_api, queue_tree, platform_admin):
    q = queue_tree["team-inference"]
    services.update_bounds({"max_gpu_quota": 4}, actor=platform_admin)
    assert queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"gpu_quota": 6}, format="json").status_code == 400
    assert queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"gpu_quota": 4}, format="json").status_code == 200
    # a platform admin sets 12; the queue admin may still change other fields of that queue
    assert admin_api.patch(f"/api/v1/queues/{q.pk}/", {"gpu_quota": 12, "gpu_limit": 16},
                           format="json").status_code == 200
    assert queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"priority": 150}, format="json").status_code == 200
    assert AuditEntry.objects.filter(object_type="queues.queuebounds", action="update").count() == 1


def test_an_unlimited_limit_is_above_a_limit_bound_only_when_one_is_set(queue_admin_api, queue_tree, platform_admin):
    q = queue_tree["team-inference"]
    assert queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"gpu_limit": -1}, format="json").status_code == 200
    services.update_bounds({"max_gpu_limit": 32}, actor=platform_admin)
    # the unlimited limit it has stays (not changed); a new value is judged
    assert queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"priority": 120}, format="json").status_code == 200
    assert queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"gpu_limit": 20}, format="json").status_code == 200
    for limit in (40, -1):
        refused = queue_admin_api.patch(f"/api/v1/queues/{q.pk}/", {"gpu_limit": limit}, format="json")
        assert refused.status_code == 400
        assert "above 32, the most a queue admin may set" in refused.json()["gpu_limit"][0]


def test_bad_bounds_name_the_field(platform_admin):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as exc:
        services.update_bounds({"max_gpu_quota": -1}, actor=platform_admin)
    assert "max_gpu_quota" in exc.value.message_dict
    with pytest.raises(ValidationError) as exc:
        services.update_bounds({"max_gpu_quota": float("inf")}, actor=platform_admin)
    assert exc.value.message_dict["max_gpu_quota"] == ["must be a finite number"]
    with pytest.raises(ValidationError):
        services.update_bounds({"owner": "me"}, actor=platform_admin)
    assert QueueBounds.load().max_gpu_quota == 1024


def test_the_negative_quota_error_is_given_once(client, platform_admin, queue_tree):
    from tests.kaiweb.queues.test_views import _edit_data

    client.force_login(platform_admin)
    html = client.post("/queues/team-training/edit/", _edit_data(queue_tree["team-training"], gpu_quota=-5)).content.decode()
    assert html.count("must be -1 (unlimited) or a non-negative amount") == 1


def test_platform_admins_edit_the_bounds_in_the_admin(admin_client, client, queue_admin):
    page = admin_client.get("/admin/queues/queuebounds/1/change/")
    assert page.status_code == 200
    client.force_login(queue_admin)
    assert client.post("/admin/queues/queuebounds/1/change/", {"max_priority": 5}).status_code == 403
