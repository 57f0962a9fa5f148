"""The dashboard in a real browser: every page as each role, the tree, a queue edit with preview."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

PAGES = [
    ("overview", "/"),
    ("queue-tree", "/queues/"),
    ("queue-table", "/queues/?view=table"),
    ("queue-detail", "/queues/team-training/"),
    ("workloads", "/workloads/"),
    ("nodes", "/nodes/"),
    ("preemptions", "/preemptions/"),
    ("cycles", "/cycles/"),
    ("usage", "/usage/"),
    ("audit", "/audit/"),
]


def test_every_page_renders_for_a_viewer_with_charts_drawn(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    for name, path in PAGES:
        response = page.goto(live_server.url + path)
        assert response is not None
        assert response.status == 200, f"{path} answered {response.status}"
        expect(page.locator("header.topbar")).to_contain_text("viewer")
        shot(page, name)
    # Charts are drawn by charts.js with the bundled plotly: the overview has an SVG plot.
    page.goto(live_server.url + "/")
    expect(page.locator("[data-figure='allocation-chart'] .main-svg").first).to_be_visible()
    assert errors == [], f"JavaScript errors: {errors}"


def test_viewer_sees_no_edit_buttons_and_is_refused_the_form(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    page.goto(live_server.url + "/queues/")
    expect(page.locator("#queue-tree")).to_be_visible()
    expect(page.locator("#queue-tree a.btn", has_text="Edit")).to_have_count(0)
    response = page.goto(live_server.url + "/queues/team-training/edit/")
    assert response.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed")
    shot(page, "edit-refused")


def test_tree_collapses_and_expands_a_department(page, live_server, ui_data, platform_admin, login, shot):
    login(page, platform_admin)
    page.goto(live_server.url + "/queues/")
    child = page.locator("#q-team-training")
    expect(child).to_be_visible()
    page.locator("#q-department-b .toggle").click()
    expect(child).to_be_hidden()
    shot(page, "department-b-collapsed")
    # The periodic htmx refresh replaces the rows; the collapsed department stays collapsed.
    page.evaluate("htmx.ajax('GET', '/queues/?view=tree', {target: '#tree-body', swap: 'innerHTML'})")
    page.wait_for_load_state("networkidle")
    expect(page.locator("#q-department-b .toggle")).to_have_attribute("aria-expanded", "false")
    expect(child).to_be_hidden()
    page.locator("#q-department-b .toggle").click()
    expect(child).to_be_visible()
    page.get_by_role("button", name="Collapse all").click()
    expect(page.locator("#q-team-inference")).to_be_hidden()
    expect(page.locator("#q-department-a")).to_be_visible()
    page.get_by_role("button", name="Expand all").click()
    expect(page.locator("#q-team-inference")).to_be_visible()
    # Walk from the tree into a queue.
    page.locator("#q-team-training a", has_text="team-training").click()
    expect(page.locator("h1")).to_contain_text("team-training")
    expect(page.locator("#fair-share-arithmetic")).to_contain_text("fair share")
    shot(page, "queue-detail-from-tree")


def test_queue_admin_edits_with_a_bad_value_previews_and_saves(page, live_server, ui_data, queue_admin, login, shot):
    from kaiweb.queues.models import Queue

    login(page, queue_admin)
    # Only department-a's subtree is editable for this persona.
    page.goto(live_server.url + "/queues/")
    expect(page.locator("#q-team-inference a.btn", has_text="Edit")).to_be_visible()
    expect(page.locator("#q-team-training a.btn", has_text="Edit")).to_have_count(0)

    page.goto(live_server.url + "/queues/team-research-a/edit/")
    page.fill("#id_gpu_quota", "20")
    page.fill("#id_gpu_limit", "10")
    page.click("#save-queue")
    error = page.locator("#id_gpu_limit-errors")
    expect(error).to_contain_text("below the quota")
    shot(page, "edit-bad-limit")
    assert Queue.objects.get(name="team-research-a").gpu_quota == 24  # nothing was saved

    page.fill("#id_gpu_limit", "-1")
    page.fill("#id_gpu_quota", "40")
    page.click("#preview-queue")
    table = page.locator("#preview-table")
    expect(table).to_be_visible()
    expect(page.locator("#preview-table tr[data-queue='team-research-a'] .badge")).to_have_text("edited")
    shot(page, "edit-preview")
    page.click("#save-queue")
    page.wait_for_url(re.compile(r"/queues/team-research-a/$"))
    expect(page.locator(".message-success")).to_contain_text("gpu_quota")
    assert Queue.objects.get(name="team-research-a").gpu_quota == 40
    shot(page, "edit-saved")


def test_finds_a_pending_workloads_reason(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    page.goto(live_server.url + "/workloads/?state=pending")
    first = page.locator("#workload-table tbody tr").first
    expect(first).to_contain_text("Pending")
    first.locator("td a").first.click()
    why = page.locator("#why-pending")
    expect(why).to_be_visible()
    expect(why.locator(".why-message")).not_to_be_empty()
    shot(page, "why-pending")


def test_filters_the_preemption_log_and_exports_csv(page, live_server, ui_data, viewer, login, shot):
    login(page, viewer)
    page.goto(live_server.url + "/preemptions/")
    rows = page.locator("#preemption-table tbody tr")
    total = rows.count()
    assert total > 1
    page.select_option("#preemption-filters select[name=action]", "reclaim")
    page.click("#preemption-filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"action=reclaim"))
    for i in range(rows.count()):
        expect(rows.nth(i).locator("td").nth(1)).to_have_text("Reclaim")
    shot(page, "preemptions-reclaim")
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    path = download_info.value.path()
    lines = open(path, encoding="utf-8").read().strip().splitlines()
    assert lines[0].startswith("at,action,reason,victim,victim_pod")
    pods = sum(int(rows.nth(i).locator("td").nth(3).inner_text()) for i in range(rows.count()))
    assert len(lines) - 1 == pods  # the CSV has a line per evicted pod, the table a row per job and cycle
    assert all(",reclaim," in line for line in lines[1:])


@pytest.mark.parametrize("persona", ["viewer", "queue_admin", "platform_admin"])
def test_each_role_signs_in_and_sees_its_role(page, live_server, ui_data, persona, request, login, shot):
    user = request.getfixturevalue(persona)
    login(page, user)
    expect(page.locator(".role-chip")).to_have_text(persona.replace("_", " "))
    page.goto(live_server.url + "/queues/")
    edit_buttons = page.locator("#queue-tree a.btn", has_text="Edit")
    expected = {"viewer": 0, "queue_admin": 4, "platform_admin": 8}[persona]  # department-a and its 3 teams
    expect(edit_buttons).to_have_count(expected)
    shot(page, "tree")
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("h1")).to_contain_text("Sign in")
