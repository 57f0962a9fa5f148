"""A token that authenticated is remembered for a few seconds per process (KAI_API_AUTH_CACHE_SECONDS):
the next calls skip its database lookup, and nothing a user could change goes unnoticed in the
process that changed it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from kaiweb.accounts import authentication
from kaiweb.accounts.models import ApiToken
from kaiweb.accounts.roles import PLATFORM_ADMINS_GROUP
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _forget():
    authentication.RECENT.forget_all()
    cache.clear()  # the lockout counts
    yield
    authentication.RECENT.forget_all()
    cache.clear()


def _token_lookups(client: Client, key: str, url: str = "/api/v1/me/") -> tuple[int, int]:
    """(status, how many queries read a token table) of one call."""
    with CaptureQueriesContext(connection) as queries:
        status = client.get(url, HTTP_AUTHORIZATION=f"Token {key}").status_code
    return status, sum(1 for q in queries.captured_queries
                       if "authtoken_token" in q["sql"] or "accounts_apitoken" in q["sql"])


def test_a_good_token_is_looked_up_once_then_remembered(settings):
    settings.KAI_API_AUTH_CACHE_SECONDS = 5
    token = Token.objects.create(user=UserFactory(username="robot"))
    named, key = ApiToken.issue(UserFactory(username="ci"), "ci")
    for k in (token.key, key):
        status, lookups = _token_lookups(Client(), k)
        assert (status, lookups >= 1) == (200, True)
        assert _token_lookups(Client(), k) == (200, 0)
    assert len(authentication.RECENT) == 2


def test_with_the_memory_off_every_call_looks_the_token_up(settings):
    settings.KAI_API_AUTH_CACHE_SECONDS = 0
    token = Token.objects.create(user=UserFactory(username="robot"))
    for _ in range(2):
        status, lookups = _token_lookups(Client(), token.key)
        assert status == 200
        assert lookups >= 1
    assert len(authentication.RECENT) == 0


def test_a_remembered_token_is_looked_up_again_once_its_time_is_up(settings, monkeypatch):
    settings.KAI_API_AUTH_CACHE_SECONDS = 5
    token = Token.objects.create(user=UserFactory(username="robot"))
    assert _token_lookups(Client(), token.key)[0] == 200
    assert _token_lookups(Client(), token.key) == (200, 0)
    clock = authentication.time.monotonic() + 6
    monkeypatch.setattr(authentication.time, "monotonic", lambda: clock)
    status, lookups = _token_lookups(Client(), token.key)
    assert status == 200
    assert lookups >= 1


def test_revoking_deleting_or_deactivating_takes_effect_at_once(client, settings):
    settings.KAI_API_AUTH_CACHE_SECONDS = 60
    owner = UserFactory(username="owner")
    named, key = ApiToken.issue(owner, "ci")
    script = Client()
    assert script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    client.force_login(owner)
    client.post("/accounts/profile/", {"revoke": named.pk})  # an update: no model signal
    revoked = script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {key}")
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["detail"]

    robot = UserFactory(username="robot")
    token = Token.objects.create(user=robot)
    assert script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200
    robot.is_active = False
    robot.save()
    assert script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 401

    other = Token.objects.create(user=UserFactory(username="other"))
    assert script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {other.key}").status_code == 200
    other.delete()
    assert script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {other.key}").status_code == 401


def test_roles_are_read_on_every_call_not_remembered_with_the_token(settings):
    settings.KAI_API_AUTH_CACHE_SECONDS = 60
    user = UserFactory(username="robot")
    token = Token.objects.create(user=user)
    script = Client()
    first = script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token.key}").json()
    assert first["is_platform_admin"] is False
    group, _ = Group.objects.get_or_create(name=PLATFORM_ADMINS_GROUP)
    group.user_set.add(user)  # sends no signal to the token memory: roles are not in it
    assert _token_lookups(script, token.key)[1] == 0  # still remembered
    again = script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token.key}").json()
    assert again["is_platform_admin"] is True


def test_bad_tokens_are_never_remembered_and_still_count_towards_the_lockout(settings):
    settings.KAI_API_AUTH_CACHE_SECONDS = 60
    settings.KAI_LOGIN_MAX_FAILURES = 3
    script = Client()
    for _ in range(3):
        assert script.get("/api/v1/me/", HTTP_AUTHORIZATION="Token not-a-token").status_code == 401
    assert len(authentication.RECENT) == 0
    good = Token.objects.create(user=UserFactory(username="robot"))
    assert script.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {good.key}").status_code == 429


def test_the_memory_stays_bounded_whatever_keys_are_sent():
    recent = authentication.RecentTokens(max_entries=3)
    user = UserFactory(username="robot")
    token = Token.objects.create(user=user)
    for n in range(10):
        recent.put(f"digest-{n}", user, token, False, 60)
        assert len(recent) <= 3
    got = recent.get("digest-9")
    assert got is not None
    assert got[0] is not user  # a copy of the row as read, not an object a request used
    assert got[0].pk == user.pk
    assert got[1].user is got[0]


def test_the_profile_page_says_how_soon_a_revocation_takes_effect(client, settings):
    owner = UserFactory(username="owner")
    ApiToken.issue(owner, "ci")
    client.force_login(owner)
    settings.KAI_API_AUTH_CACHE_SECONDS = 5
    assert "within 5 s on the others" in client.get("/accounts/profile/").content.decode()
    settings.KAI_API_AUTH_CACHE_SECONDS = 0
    assert "stops working at once on this server" not in client.get("/accounts/profile/").content.decode()
