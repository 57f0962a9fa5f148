"""The what-if page in a real browser: open it from the queue tree, change a quota, run, read the table."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_viewer_runs_a_whatif_and_sees_the_comparison(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live_server.url + "/queues/")
    page.locator("#whatif-link").click()
    page.wait_for_url(live_server.url + "/queues/what-if/")
    expect(page.locator("h1")).to_have_text("What if?")

    # A bad value first: the error sits next to the field and nothing runs.
    page.select_option("#id_queue", "team-training")
    # Choosing the queue reloads the form with its current values.
    expect(page.locator("#id_gpu_quota")).to_have_value("32")
    page.fill("#id_gpu_quota", "40")
    page.fill("#id_gpu_limit", "10")
    page.click("#run-whatif")
    expect(page.locator("#id_gpu_limit-errors")).to_contain_text("below the quota")
    expect(page.locator("#whatif-table")).to_have_count(0)

    page.fill("#id_gpu_quota", "40")
    page.fill("#id_gpu_limit", "-1")
    page.click("#run-whatif")
    table = page.locator("#whatif-table")
    expect(table).to_be_visible(timeout=60_000)
    expect(table.locator("tr[data-queue='team-training'] .badge")).to_have_text("edited")
    expect(page.locator("#whatif-totals")).to_contain_text("Jain")
    expect(page.locator("[data-figure='whatif-chart'] .main-svg").first).to_be_visible()
    shot(page, "whatif-result")
    assert errors == [], f"JavaScript errors: {errors}"
