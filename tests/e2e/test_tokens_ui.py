"""API tokens in a real browser: made on the profile page, read once, used by a script, revoked."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def _get(url: str, key: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {key}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_user_makes_a_token_reads_it_once_uses_it_and_revokes_it(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    page.locator(".userbox a.username").click()
    expect(page.locator("h1")).to_have_text(viewer.get_username())
    page.fill("#id_name", "nightly-export")
    page.click("#make-token")
    key = page.locator("#new-token-key").inner_text().strip()
    assert key.startswith("kw_")
    shot(page, "token-made")
    assert _get(f"{live_server.url}/usage/export.csv", key) == 200
    assert _get(f"{live_server.url}/api/v1/queues/", key) == 200
    page.goto(f"{live_server.url}/accounts/profile/")
    expect(page.locator("#new-token")).to_have_count(0)  # shown once
    page.locator("tr[data-token=nightly-export] button.revoke").click()
    expect(page.locator("tr[data-token=nightly-export]")).to_contain_text("revoked")
    assert _get(f"{live_server.url}/api/v1/queues/", key) == 401
    assert _get(f"{live_server.url}/usage/export.csv", key) == 401


def test_browser_local_time_shows_times_in_the_zone_the_browser_is_in(browser, live_server, ui_data, viewer, login,
                                                                       shot):
    from datetime import UTC, datetime

    from kaiweb.scheduling.models import SchedulingCycle

    SchedulingCycle.objects.create(started_at=datetime(2026, 11, 24, 12, 0, tzinfo=UTC), status="succeeded",
                                   duration_seconds=0.1)
    context = browser.new_context(timezone_id="Asia/Tokyo", viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        login(page, viewer)
        page.goto(f"{live_server.url}/accounts/profile/")
        page.select_option("#id_time_zone", "browser")
        page.click("#save-tz")
        page.wait_for_url(f"{live_server.url}/accounts/profile/")
        page.goto(f"{live_server.url}/cycles/")
        expect(page.locator("footer")).to_contain_text("times in Asia/Tokyo (your browser's)")
        expect(page.locator("body")).to_contain_text("2026-11-24 21:00:00")  # UTC+9
        shot(page, "cycles-in-browser-time")
    finally:
        context.close()


def test_browser_local_time_without_cookies_shows_utc_and_does_not_reload_for_ever(browser, live_server, viewer,
                                                                                   login, queue_tree):
    from kaiweb.accounts.models import Preference

    Preference.objects.update_or_create(user=viewer, defaults={"time_zone": "browser"})
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    try:
        # The page script can keep no cookie (as when the browser blocks them); the server's own
        # cookies still work.
        page.add_init_script("""Object.defineProperty(Document.prototype, 'cookie', {
            get() { return ''; }, set(v) {}, configurable: true });""")
        login(page, viewer)
        loads = []
        page.on("load", lambda: loads.append(1))
        page.goto(f"{live_server.url}/cycles/")
        page.wait_for_timeout(1500)
        assert len(loads) == 1
        expect(page.locator("footer")).to_contain_text("times in UTC")
    finally:
        context.close()
