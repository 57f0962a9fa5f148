"""Start-time estimates of the pending workloads: refreshed on a worker from the shard's snapshot,
stored on its waiting line, shown on the pages, in the API and in /metrics."""

from __future__ import annotations

import pytest
from django.urls import reverse

from kaiweb.scheduling import cycle
from kaiweb.scheduling.estimates import DEADLINE_LABEL, RUNTIME_LABEL, declared_end, parse_runtime, refresh
from kaiweb.scheduling.models import WaitingLine, line_key
from kaiweb.scheduling.selectors import queue_depth, start_estimates
from kaiweb.scheduling.tasks import estimate_starts_task
from tests.celery.builders import small_cluster, submit

pytestmark = pytest.mark.django_db


def _waiting(runner_a: str = "30m", runner_b: str = "2h", sc=None):
    """One 8-GPU node held by a runner of each queue (4 GPUs each, declaring how long they run), and a
    pending 4-GPU job in each queue behind them."""
    sc = sc or small_cluster(nodes=1, gpus=8)
    ra = submit(sc, "team-a", "runner-a", gpus_per_pod=4)
    rb = submit(sc, "team-b", "runner-b", gpus_per_pod=4)
    ra.labels = {RUNTIME_LABEL: runner_a}
    ra.save(update_fields=["labels"])
    rb.labels = {RUNTIME_LABEL: runner_b}
    rb.save(update_fields=["labels"])
    assert cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False).binds == 2
    a1 = submit(sc, "team-a", "a-1", gpus_per_pod=4)
    b1 = submit(sc, "team-b", "b-1", gpus_per_pod=4)
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    assert set(outcome.result.pending) == {"ns/a-1", "ns/b-1"}
    return sc, ra, rb, a1, b1


def test_a_refresh_stores_an_estimate_per_pending_workload_from_the_declared_run_times():
    sc, ra, _, a1, b1 = _waiting()
    assert refresh(sc.shard) == 2
    line = WaitingLine.objects.get(shard=sc.shard)
    assert set(line.estimates) == {line_key(a1.pk), line_key(b1.pk)}
    assert line.estimated_at is not None
    assert line.estimate_samples >= 1
    got = start_estimates([a1.pk, b1.pk, ra.pk])
    assert ra.pk not in got
    # the team-a runner said 30 minutes: every sample frees its 4 GPUs then, and a-1 (team-a under its share) takes them
    assert got[a1.pk].p50_wait_seconds == pytest.approx(1800, abs=1)
    assert got[a1.pk].p80_wait_seconds == pytest.approx(1800, abs=1)
    assert got[a1.pk].code == "waits"
    assert got[a1.pk].reason.startswith("Needs 4 GPUs on one node")
    assert "frees at ~" in got[a1.pk].reason
    # b-1 waits longer: for a-1's end or for the two-hour runner of team-b
    assert got[b1.pk].p50_wait_seconds > got[a1.pk].p50_wait_seconds
    assert got[b1.pk].p80_wait_seconds >= got[b1.pk].p50_wait_seconds


def test_the_same_snapshot_gives_the_same_estimates():
    sc, *_ = _waiting()
    refresh(sc.shard)
    first = WaitingLine.objects.get(shard=sc.shard).estimates
    refresh(sc.shard)
    assert WaitingLine.objects.get(shard=sc.shard).estimates == first


def test_a_shard_without_a_cycle_has_nothing_to_estimate_and_the_tasks_run_the_refresh():
    sc = small_cluster(nodes=1, gpus=8)
    assert refresh(sc.shard) is None
    assert estimate_starts_task(sc.shard.pk) is None
    assert estimate_starts_task(10**9) is None
    sc, _, _, a1, _ = _waiting(sc=sc)
    assert estimate_starts_task(sc.shard.pk) == 2
    assert WaitingLine.objects.get(shard=sc.shard).estimates[line_key(a1.pk)]["p50"] is not None


def test_the_api_gives_the_estimate_of_a_pending_workload_and_none_for_a_running_one(admin_api):
    sc, ra, _, a1, b1 = _waiting()
    body = admin_api.get(f"/api/v1/workloads/{a1.pk}/").json()
    assert body["start_estimate"] is None  # not refreshed yet
    refresh(sc.shard)
    body = admin_api.get(f"/api/v1/workloads/{a1.pk}/").json()["start_estimate"]
    assert body["p50_wait_seconds"] == pytest.approx(1800, abs=1)
    assert body["p80_wait_seconds"] == pytest.approx(1800, abs=1)
    assert body["code"] == "waits"
    assert body["samples"] >= 1
    assert body["p50_at"] is not None
    assert "frees at" in body["reason"]
    assert admin_api.get(f"/api/v1/workloads/{ra.pk}/").json()["start_estimate"] is None
    listed = {row["id"]: row["start_estimate"] for row in admin_api.get("/api/v1/workloads/?limit=50").json()["results"]}
    assert listed[b1.pk]["p50_wait_seconds"] > listed[a1.pk]["p50_wait_seconds"]
    assert listed[ra.pk] is None


def test_the_next_jobs_estimated_wait_per_queue_on_metrics_and_pages(admin_client):
    sc, _, _, a1, b1 = _waiting()
    body = admin_client.get("/metrics").content.decode()
    assert "kai_queue_wait_time_estimate_seconds{" not in body  # no estimate yet: no sample
    refresh(sc.shard)
    depth = {d.queue: d for d in queue_depth()}
    assert depth["team-a"].next_wait is not None
    assert depth["team-a"].next_wait.workload_id == a1.pk
    assert depth["team-a"].next_wait.p50_wait_seconds == pytest.approx(1800, abs=1)
    prio = depth["team-a"].priority
    body = admin_client.get("/metrics").content.decode()
    line = next(row for row in body.splitlines()
                if row.startswith(f'kai_queue_wait_time_estimate_seconds{{priority="{prio}",queue="team-a"}}'))
    assert float(line.split()[-1]) == pytest.approx(1800, abs=1)
    assert f'kai_queue_wait_time_estimate_seconds{{priority="{prio}",queue="team-b"}}' in body

    overview = admin_client.get("/").content.decode()
    section = overview[overview.index('id="queue-depth"'):]
    assert "~30 m" in section[:section.index("</section>")]
    page = admin_client.get(reverse("workloads:detail", args=[a1.pk])).content.decode()
    assert 'id="start-estimate"' in page
    assert "New arrivals are not guessed" in page
    listing = admin_client.get(reverse("workloads:list")).content.decode()
    assert 'class="eta-p50"' in listing


def test_declared_run_times_and_deadlines_read_from_labels():
    assert parse_runtime("5400") == 5400
    assert parse_runtime("90m") == 5400
    assert parse_runtime("1.5h") == 5400
    assert parse_runtime("2d") == 172800
    for bad in ("", "soon", "-5m", "0", "nanh", None):
        assert parse_runtime(bad) is None
    said = declared_end({RUNTIME_LABEL: "1h", DEADLINE_LABEL: "2000000000"})
    assert said is not None
    assert said.end(1_999_999_000) == 2_000_000_000  # the deadline comes first
    assert said.end(0) == 3600
    assert declared_end({DEADLINE_LABEL: "tomorrow"}) is None
    assert declared_end({}) is None
