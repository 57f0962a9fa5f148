"""Usage reports in a real browser: defined in the page, run, the lines equal the usage page, files download."""

from __future__ import annotations

import csv
import io

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_a_report_defined_in_the_page_runs_and_its_csv_equals_the_usage_page(page, live_server, ui_data,
                                                                               platform_admin, login, shot):
    from kaiweb.reports.models import ReportDefinition, ReportRun
    from kaiweb.usage.views import compute_report

    login(page, platform_admin)
    page.locator("nav.mainnav a", has_text="Reports").click()
    expect(page.locator("h1")).to_have_text("Usage reports")
    page.click("#new-report")
    page.fill("#id_name", "cluster weekly")
    page.select_option("#id_period", "weekly")
    page.select_option("#id_scope", "cluster")
    page.fill("#id_recipients", "not-an-address")
    page.click("#save-report")
    # A bad recipient is named under its field and nothing is saved.
    expect(page.locator("#report-form")).to_contain_text("not-an-address")
    assert not ReportDefinition.objects.filter(name="cluster weekly").exists()
    page.fill("#id_recipients", "platform@example.com")
    page.click("#save-report")
    expect(page.locator("h1")).to_have_text("cluster weekly")
    expect(page.locator(".subtitle").first).to_contain_text("beat entry")
    shot(page, "definition")

    page.click("#run-current")
    expect(page.locator("#run-lines")).to_be_visible()
    shot(page, "run")
    run = ReportRun.objects.get(definition__name="cluster weekly")
    assert run.status == "succeeded", run.error

    with page.expect_download() as download:
        page.click("#download-csv")
    rows = list(csv.DictReader(io.StringIO(open(download.value.path(), encoding="utf-8").read())))
    by_line = {row["line"]: float(row["gpu_hours_allocated"]) for row in rows}
    usage = compute_report({"since": run.period_start, "until": run.period_end, "resource": "gpu",
                            "group": "department", "queue": None})
    assert usage["grand"] > 0  # the demo data has allocations in the window
    # The total row, then one row per department (the CSV keeps 4 decimals).
    assert by_line.pop(rows[-1]["line"]) == pytest.approx(usage["grand"], abs=1e-3)
    assert {k: v for k, v in by_line.items() if v} == pytest.approx(
        {row["name"]: row["hours"] for row in usage["table"]}, abs=1e-3)

    with page.expect_download() as pdf:
        page.click("#download-pdf")
    assert open(pdf.value.path(), "rb").read(5) == b"%PDF-"


def test_usage_per_submitting_user_per_day_answers_with_the_csv_numbers(page, live_server, queue_tree, viewer,
                                                                          login, shot):
    from datetime import timedelta

    from django.utils import timezone

    from kaiweb.usage.models import UsageBucket

    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    for back, (ana, ben) in enumerate([(8.0, 2.0), (4.0, 4.0), (6.0, 0.0)]):
        start = day - timedelta(days=back + 1) + timedelta(hours=10)
        UsageBucket.objects.create(queue=queue_tree["team-training"], resource="gpu", start=start, width_seconds=3600,
                                   value=(ana + ben) * 3600, by_namespace={"training": (ana + ben) * 3600},
                                   by_user={k: v * 3600 for k, v in (("ana", ana), ("ben", ben)) if v})
    login(page, viewer)
    page.locator("nav.mainnav a", has_text="Usage").click()
    page.select_option("#id_group", "user")
    page.select_option("#id_step", "day")
    page.click("#usage-form button[type=submit]")
    expect(page.locator("#usage-table thead")).to_contain_text("User")
    rows = page.locator("#usage-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("ana")
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("18.0")  # GPU-hours over the three days
    expect(rows.nth(1).locator("td").nth(1)).to_have_text("6.0")
    expect(page.locator("#usage-table tfoot")).to_contain_text("24.0")
    page.wait_for_selector("[data-figure=usage-chart] .main-svg")
    shot(page, "usage-per-user-per-day")
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    rows_csv = list(csv.reader(io.StringIO(open(download_info.value.path(), encoding="utf-8").read())))
    assert rows_csv[0][:3] == ["user", "slot_start", "day"]
    assert {r[0]: float(r[3]) for r in rows_csv[1:] if r[1] == "total"} == {"ana": 18.0, "ben": 6.0}
    assert sorted(float(r[3]) for r in rows_csv[1:] if r[0] == "ana" and r[1] != "total") == [4.0, 6.0, 8.0]
