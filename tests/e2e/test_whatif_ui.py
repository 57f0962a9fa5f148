"""The what-if page in a real browser: open it from the queue tree, change a quota, run, read the table."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def small_estimates(settings):
    """The start-time estimator beside the replay, at a small budget: these tests read the page, and the
    estimator's figures are tested with it (tests/kaiweb/scheduling/test_estimates.py)."""
    settings.KAI_ETA_SAMPLES = 4
    settings.KAI_ETA_MAX_CYCLES = 40


def test_viewer_runs_a_whatif_and_sees_the_comparison(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live_server.url + "/queues/")
    page.locator("#whatif-link").click()
    page.wait_for_url(live_server.url + "/what-if/")
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


def run_team_training_with(page, live_server, viewer, login, *, gpu_quota: str) -> list[str]:
    """Sign in, open the what-if of team-training, set its GPU quota (no limit) and run it; the page's
    JavaScript errors are collected in the list returned."""
    login(page, viewer)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live_server.url + "/what-if/?queue=team-training")
    page.fill("#id_gpu_quota", gpu_quota)
    page.fill("#id_gpu_limit", "-1")
    page.click("#run-whatif")
    return errors


def test_a_whatif_on_a_worker_is_polled_until_its_chart_is_drawn(page, live_server, ui_data, viewer, login, shot,
                                                                  monkeypatch):
    """The run is left queued (no worker picks it up) until the test runs it, as a worker would: the page
    shows it running, polls, and draws the result when it is done."""
    from kaiweb.celery import app
    from kaiweb.whatif import runs as whatif_runs
    from kaiweb.whatif import tasks
    from kaiweb.whatif.models import WhatIfRun

    monkeypatch.setattr(tasks.run_whatif_task, "delay", lambda run_id: None)
    errors = run_team_training_with(page, live_server, viewer, login, gpu_quota="40")
    expect(page.locator("#whatif-poll")).to_contain_text("Replaying on a worker")
    shot(page, "whatif-running")
    run = WhatIfRun.objects.get(user=viewer)
    assert run.state == "queued"
    assert app.conf.task_always_eager  # the view sent nothing to a broker: delay was replaced
    assert whatif_runs.execute(run.pk) == "done"
    expect(page.locator("#whatif-table")).to_be_visible(timeout=30_000)
    expect(page.locator("#whatif-poll")).to_have_count(0)
    expect(page.locator("[data-figure='whatif-chart'] .main-svg").first).to_be_visible()
    shot(page, "whatif-polled")
    assert errors == [], f"JavaScript errors: {errors}"


def test_a_whatif_shows_how_long_the_jobs_waiting_now_would_wait_with_the_change(page, live_server, ui_data, viewer,
                                                                                  login, shot):
    from kaiweb.whatif.models import WhatIfRun

    errors = run_team_training_with(page, live_server, viewer, login, gpu_quota="0")
    waits = page.locator("#whatif-waits")
    expect(waits).to_be_visible(timeout=60_000)
    expect(waits).to_contain_text("arrivals are not guessed")
    # The page shows the run's result: one row per queue with waiting jobs, in its order, with its figures.
    result = WhatIfRun.objects.get(user=viewer).result["start_estimates"]
    assert result["queues"], "the dataset has jobs waiting"
    rows = waits.locator("tbody tr")
    expect(rows).to_have_count(len(result["queues"]))
    for i, row in enumerate(result["queues"]):
        expect(rows.nth(i)).to_have_attribute("data-queue", row["queue"])
        expect(rows.nth(i).locator("td").nth(1)).to_have_text(str(row["jobs"]))
    edited = [r["queue"] for r in result["queues"] if r["edited"]]
    expect(waits.locator("tr.changed")).to_have_count(len(edited))
    shot(page, "whatif-waits")
    assert errors == [], f"JavaScript errors: {errors}"
