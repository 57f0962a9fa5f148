"""Named API tokens made on the profile page: shown once, used on the API and CSV URLs, revoked."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from kaiweb.accounts.models import ApiToken, hash_key

pytestmark = pytest.mark.django_db


def _make(client, user, name="ci", days="30"):
    client.force_login(user)
    html = client.post("/accounts/profile/", {"name": name, "expires_in_days": days}).content.decode()
    match = re.search(r'<code id="new-token-key"[^>]*>([^<]+)</code>', html)
    return match.group(1) if match else None, html


def test_a_token_made_on_the_profile_page_is_shown_once_and_stored_as_a_hash(client, viewer):
    key, html = _make(client, viewer)
    assert key.startswith("kw_")
    token = ApiToken.objects.get(user=viewer, name="ci")
    assert token.key_hash == hash_key(key)
    assert key not in str(ApiToken.objects.filter(pk=token.pk).values().first())
    assert 29 <= (token.expires_at - timezone.now()).days <= 30
    again = client.get("/accounts/profile/").content.decode()
    assert key not in again
    assert f"{token.prefix}…" in again


def test_the_token_works_on_the_api_and_on_csv_urls_and_nothing_else_changes(client, viewer, queue_tree):
    from django.test import Client

    key, _ = _make(client, viewer)
    script = Client()
    for scheme in ("Token", "Bearer"):
        assert script.get("/api/v1/queues/", HTTP_AUTHORIZATION=f"{scheme} {key}").status_code == 200
    csv = script.get("/preemptions/export.csv", HTTP_AUTHORIZATION=f"Token {key}")
    assert csv.status_code == 200
    assert csv["Content-Type"].startswith("text/csv")
    assert ApiToken.objects.get(name="ci").last_used_at is not None
    # without a token a browser is still sent to sign in
    assert Client().get("/preemptions/export.csv").status_code == 302


def test_bad_revoked_and_expired_tokens_get_a_401_naming_why_not_the_login_page(client, viewer):
    from django.test import Client

    key, _ = _make(client, viewer)
    script = Client()
    bad = script.get("/preemptions/export.csv", HTTP_AUTHORIZATION="Token kw_nope")
    assert bad.status_code == 401
    token = ApiToken.objects.get(name="ci")
    client.post("/accounts/profile/", {"revoke": token.pk})
    revoked = script.get("/api/v1/queues/", HTTP_AUTHORIZATION=f"Token {key}")
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["detail"]
    key2, _ = _make(client, viewer, name="short")
    ApiToken.objects.filter(name="short").update(expires_at=timezone.now() - timedelta(minutes=1))
    expired = script.get("/preemptions/export.csv", HTTP_AUTHORIZATION=f"Token {key2}")
    assert expired.status_code == 401
    assert "expired" in expired.json()["detail"]


def test_names_are_checked_and_a_user_revokes_only_their_own(client, viewer, platform_admin):
    _make(client, viewer)
    _, html = _make(client, viewer)  # same name again
    assert "you already have a token named &#x27;ci&#x27;" in html
    _, html = _make(client, viewer, name="   ")
    assert "This field is required." in html or "give the token a name" in html
    theirs = ApiToken.objects.get(user=viewer)
    client.force_login(platform_admin)
    client.post("/accounts/profile/", {"revoke": theirs.pk})
    assert ApiToken.objects.get(pk=theirs.pk).revoked_at is None


def test_a_lifetime_bound_limits_the_choices(client, viewer, settings):
    settings.KAI_API_TOKEN_LIFETIME_DAYS = 30
    _, html = _make(client, viewer, days="365")
    assert "Select a valid choice" in html
    assert not ApiToken.objects.filter(user=viewer).exists()


def test_the_browsable_me_page_offers_no_misleading_form(client, viewer):
    client.force_login(viewer)
    html = client.get("/api/v1/me/", HTTP_ACCEPT="text/html").content.decode()
    assert "viewer" in html
    assert "Is platform admin" not in html.split("</pre>")[-1]  # not offered as a field to fill in
    assert 'name="username"' not in html


def test_a_user_chooses_the_time_zone_every_page_shows_times_in(client, viewer, queue_tree):
    from datetime import UTC, datetime

    from kaiweb.scheduling.models import SchedulingCycle

    SchedulingCycle.objects.create(started_at=datetime(2026, 11, 24, 12, 0, tzinfo=UTC),
                                   status="succeeded", duration_seconds=0.1)
    client.force_login(viewer)
    assert "2026-11-24 12:00:00" in client.get("/cycles/").content.decode()
    assert "times in UTC" in client.get("/cycles/").content.decode()
    assert client.post("/accounts/profile/", {"time_zone": "Asia/Tokyo"}).status_code == 302
    page = client.get("/cycles/").content.decode()
    assert "2026-11-24 21:00:00" in page  # UTC+9
    assert "times in Asia/Tokyo" in page
    bad = client.post("/accounts/profile/", {"time_zone": "Mars/Olympus"}).content.decode()
    assert "Select a valid choice" in bad


def test_browser_local_time_follows_the_zone_the_browser_reports(client, viewer, queue_tree):
    from datetime import UTC, datetime

    from kaiweb.scheduling.models import SchedulingCycle

    SchedulingCycle.objects.create(started_at=datetime(2026, 11, 24, 12, 0, tzinfo=UTC),
                                   status="succeeded", duration_seconds=0.1)
    client.force_login(viewer)
    assert client.post("/accounts/profile/", {"time_zone": "browser"}).status_code == 302
    # Until the browser has said, UTC; the page tells its script the choice is the browser's.
    page = client.get("/cycles/").content.decode()
    assert "2026-11-24 12:00:00" in page
    assert 'data-tz-setting="browser"' in page
    client.cookies["kaiweb_browser_tz"] = "America/New_York"
    page = client.get("/cycles/").content.decode()
    assert "2026-11-24 07:00:00" in page  # UTC-5 in November
    assert "times in America/New_York (your browser" in page
    client.cookies["kaiweb_browser_tz"] = "Not/AZone"  # what a browser says is never trusted blindly
    assert "2026-11-24 12:00:00" in client.get("/cycles/").content.decode()
    # The profile keeps showing the choice, not the zone it resolved to.
    assert 'value="browser" selected' in client.get("/accounts/profile/").content.decode()
    # The API stays UTC whatever the page preference is.
    client.cookies["kaiweb_browser_tz"] = "Asia/Tokyo"
    body = client.get("/api/v1/cycles/").json()
    assert body["results"][0]["started_at"].startswith("2026-11-24T12:00:00")
