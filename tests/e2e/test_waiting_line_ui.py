"""A pending workload's place in line and the queue depth, in a real browser."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_a_viewer_sees_a_pending_jobs_place_in_the_list_and_on_its_page_and_the_queue_depth(
        page, live_server, transactional_db, viewer, login, shot):
    from kaiweb.scheduling import cycle
    from kaiweb.scheduling.adapters import workload_uid
    from tests.celery.builders import small_cluster, submit

    sc = small_cluster(nodes=1, gpus=8)
    submit(sc, "team-a", "first", gpus_per_pod=4)
    submit(sc, "team-b", "other", gpus_per_pod=4)
    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    waiting = [submit(sc, q, name, gpus_per_pod=4) for q, name in (("team-a", "a-1"), ("team-b", "b-1"),
                                                                    ("team-b", "b-2"))]
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    b2 = waiting[2]
    in_shard, in_queue = outcome.result.positions[workload_uid(b2)]

    login(page, viewer)
    page.goto(f"{live_server.url}/workloads/?state=pending")
    row = page.locator("#workload-table tbody tr", has_text="ns/b-2")
    expect(row.locator("td.place")).to_have_text(re.compile(rf"#{in_shard}\s+\({in_queue} in queue\)"))
    shot(page, "list")
    row.locator("a", has_text="ns/b-2").click()
    expect(page.locator("#place-in-shard")).to_have_text(f"#{in_shard}")
    expect(page.locator("#place-in-queue")).to_have_text(f"#{in_queue}")
    expect(page.locator("#waiting-line")).to_contain_text("team-b")
    shot(page, "workload")

    page.goto(f"{live_server.url}/")
    depth = page.locator("#queue-depth")
    # the pending jobs' column: two of team-b wait, one of team-a
    expect(depth.locator("tr", has_text="team-b").locator("td").nth(2)).to_have_text("2")
    expect(depth.locator("tr", has_text="team-a").locator("td").nth(2)).to_have_text("1")
    expect(depth.locator("tr", has_text="team-b").locator("td").nth(3)).to_have_text("8")
    shot(page, "overview")


def test_a_viewer_sees_a_pending_jobs_start_estimate_and_that_arrivals_are_not_guessed(
        page, live_server, transactional_db, viewer, login, shot):
    from kaiweb.scheduling import cycle
    from kaiweb.scheduling.estimates import RUNTIME_LABEL, refresh
    from kaiweb.scheduling.selectors import start_estimates
    from tests.celery.builders import small_cluster, submit

    sc = small_cluster(nodes=1, gpus=8)
    runner = submit(sc, "team-a", "runner", gpus_per_pod=8)
    runner.labels = {RUNTIME_LABEL: "45m"}
    runner.save(update_fields=["labels"])
    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    waiting = submit(sc, "team-a", "next", gpus_per_pod=8)
    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    assert refresh(sc.shard) == 1
    want = start_estimates([waiting.pk])[waiting.pk]
    assert want.p50_wait_seconds == 2700

    login(page, viewer)
    page.goto(f"{live_server.url}/workloads/?state=pending")
    row = page.locator("#workload-table tbody tr", has_text="ns/next")
    expect(row.locator("td.start")).to_contain_text("~45 m")
    row.locator("a", has_text="ns/next").click()
    expect(page.locator("#eta-p50")).to_have_text("in ~45 m")
    expect(page.locator("#eta-p80")).to_have_text("within 45 m")
    expect(page.locator("#eta-reason")).to_contain_text("Needs 8 GPUs on one node")
    expect(page.locator("#eta-arrivals")).to_contain_text("New arrivals are not guessed")
    shot(page, "estimate")

    page.goto(f"{live_server.url}/")
    expect(page.locator("#queue-depth tr", has_text="team-a").locator("td.next-wait")).to_have_text("~45 m")
