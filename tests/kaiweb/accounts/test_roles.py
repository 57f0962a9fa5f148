"""Roles: viewer, queue admin (subtree), platform admin; session + CSRF and token authentication."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kaiweb.accounts import roles
from kaiweb.queues import services
from tests.factories import QueueFactory, QueueMembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_queue_admin_role_covers_the_whole_subtree(queue_admin, queue_tree):
    deep = QueueFactory(name="deep", parent=queue_tree["team-inference"])
    assert roles.can_edit_queue(queue_admin, queue_tree["department-a"])
    assert roles.can_edit_queue(queue_admin, deep)
    assert not roles.can_edit_queue(queue_admin, queue_tree["department-b"])
    assert not roles.can_edit_queue(queue_admin, None)  # the top level is the platform's
    assert not roles.is_platform_admin(queue_admin)


def test_member_role_does_not_grant_edits(queue_tree):
    member = UserFactory(username="member")
    QueueMembershipFactory(user=member, queue=queue_tree["department-b"], role="member")
    assert not roles.can_edit_queue(member, queue_tree["team-training"])
    assert not roles.is_queue_admin(member)


def test_platform_admins_and_superusers_edit_everything(platform_admin, queue_tree):
    superuser = UserFactory(username="root", is_superuser=True)
    for user in (platform_admin, superuser):
        assert roles.is_platform_admin(user)
        assert roles.can_edit_queue(user, queue_tree["team-training"])
        assert roles.can_edit_queue(user, None)


def test_inactive_users_have_no_role(queue_admin, queue_tree):
    queue_admin.is_active = False
    roles.forget(queue_admin)
    assert not roles.can_edit_queue(queue_admin, queue_tree["department-a"])


def test_new_membership_takes_effect_immediately(viewer, queue_tree):
    assert not roles.can_edit_queue(viewer, queue_tree["team-training"])
    services.set_membership(queue_tree["department-b"], viewer, "admin")
    assert roles.can_edit_queue(viewer, queue_tree["team-training"])
    services.set_membership(queue_tree["department-b"], viewer, None)
    assert not roles.can_edit_queue(viewer, queue_tree["team-training"])


def test_role_checks_use_a_fixed_number_of_queries(queue_admin, queue_tree, django_assert_max_num_queries):
    roles.forget(queue_admin)
    with django_assert_max_num_queries(3):
        for queue in queue_tree.values():
            roles.can_edit_queue(queue_admin, queue)


def test_session_writes_need_the_csrf_token(platform_admin, queue_tree):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(platform_admin)
    response = client.post("/api/v1/queues/", {"name": "no-csrf"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_token_authentication_for_automation(platform_admin, viewer, queue_tree):
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=platform_admin).key}")
    assert client.post("/api/v1/queues/", {"name": "by-token"}, format="json").status_code == 201
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=viewer).key}")
    assert client.get("/api/v1/queues/").status_code == 200
    assert client.post("/api/v1/queues/", {"name": "viewer-token"}, format="json").status_code == 403
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    refused = client.get("/api/v1/queues/")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == "Token"
    assert refused.json() == {"detail": "Invalid token."}


def test_anonymous_api_calls_are_asked_to_authenticate(api_client):
    response = api_client.get("/api/v1/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_memberships_are_managed_by_platform_admins(admin_api, queue_admin_api, viewer, queue_tree):
    body = {"user": "viewer", "queue": "team-training", "role": "admin"}
    assert queue_admin_api.post("/api/v1/queue-memberships/", body, format="json").status_code == 403
    response = admin_api.post("/api/v1/queue-memberships/", body, format="json")
    assert response.status_code == 201
    assert roles.can_edit_queue(viewer, queue_tree["team-training"])
    rows = admin_api.get("/api/v1/queue-memberships/?queue=team-training").json()["results"]
    assert rows == [{"id": rows[0]["id"], "user": "viewer", "queue": "team-training", "role": "admin"}]


def test_health_needs_no_login(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/api/v1/queues/").status_code in (401, 403)


def test_me_lists_roles_and_issues_a_token(queue_admin_api, queue_admin, queue_tree):
    me = queue_admin_api.get("/api/v1/me/").json()
    assert me == {
        "username": "queue-admin", "is_platform_admin": False,
        "administered_queues": ["department-a", "team-inference", "team-research-a"],
    }
    first = queue_admin_api.post("/api/v1/me/token/").json()["token"]
    second = queue_admin_api.post("/api/v1/me/token/").json()["token"]
    assert first != second
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {first}")
    assert client.get("/api/v1/me/").status_code in (401, 403)  # rotated away
    client.credentials(HTTP_AUTHORIZATION=f"Token {second}")
    assert client.get("/api/v1/me/").json()["username"] == "queue-admin"
