"""Choosing a shard's GPU placement in a real browser: fragmentation-aware, saved and shown."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_a_platform_admin_switches_a_shard_to_fragmentation_aware_placement(page, live_server, ui_data,
                                                                            platform_admin, login, shot):
    from kaiweb.cluster.models import SchedulingShard

    shard = SchedulingShard.objects.get(name="default")
    assert shard.gpu_placement != "fragmentation-aware"
    login(page, platform_admin)
    page.goto(f"{live_server.url}/admin/cluster/schedulingshard/")
    page.get_by_role("link", name="default", exact=True).first.click()
    gpu = page.locator("select[name=gpu_placement]")
    # offered for GPUs only
    expect(gpu.locator("option[value=fragmentation-aware]")).to_have_text("Fragmentation-aware")
    expect(page.locator("select[name=cpu_placement] option[value=fragmentation-aware]")).to_have_count(0)
    gpu.select_option("fragmentation-aware")
    shot(page, "shard-form")
    page.locator("input[name=_continue]").click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    expect(page.locator("select[name=gpu_placement]")).to_have_value("fragmentation-aware")
    shard.refresh_from_db()
    assert shard.gpu_placement == "fragmentation-aware"
    # the list shows the new strategy for the shard
    page.goto(f"{live_server.url}/admin/cluster/schedulingshard/")
    expect(page.locator("#result_list")).to_contain_text("Fragmentation-aware")
    shot(page, "shard-list")
