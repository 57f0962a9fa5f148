"""A pending workload's place in the waiting line: recorded by the cycle from the engine's order,
shown on the workload page, in the workloads list and in the API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from kaiweb.scheduling import cycle
from kaiweb.scheduling.adapters import workload_uid
from kaiweb.scheduling.models import WaitingLine, line_key
from kaiweb.scheduling.selectors import places, queue_depth
from kaiweb.workloads.choices import WorkloadState
from tests.celery.builders import small_cluster, submit

pytestmark = pytest.mark.django_db


def _line():
    """One 8-GPU node filled by a job of each queue at its quota (4 GPUs each), then four jobs that
    cannot fit (nor reclaim: both queues are at their fair share) wait in the two queues."""
    sc = small_cluster(nodes=1, gpus=8)
    first = submit(sc, "team-a", "first", gpus_per_pod=4)
    submit(sc, "team-b", "other", gpus_per_pod=4)
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    assert outcome.binds == 2
    waiting = {name: submit(sc, q, name, gpus_per_pod=4)
               for q, name in (("team-a", "a-1"), ("team-a", "a-2"), ("team-b", "b-1"), ("team-b", "b-2"))}
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    return sc, first, waiting, outcome


def test_the_cycle_records_the_engines_places_for_every_pending_workload():
    sc, first, waiting, outcome = _line()
    line = WaitingLine.objects.get(shard=sc.shard)
    assert line.cycle_id == outcome.cycle_id
    by_uid = {workload_uid(w): w for w in waiting.values()}
    # what is recorded is what the engine said, workload by workload
    assert line.positions == {
        line_key(by_uid[uid].pk): list(place) for uid, place in outcome.result.positions.items()}
    assert set(line.positions) == {line_key(w.pk) for w in waiting.values()}
    got = places([w.pk for w in waiting.values()] + [first.pk])
    assert first.pk not in got  # running: no place
    assert sorted(p.in_shard for p in got.values()) == [1, 2, 3, 4]
    for q in ("a", "b"):
        assert [got[waiting[f"{q}-{i}"].pk].in_queue for i in (1, 2)] == [1, 2]


def test_a_later_cycle_replaces_the_line_and_a_started_job_leaves_it():
    sc, first, waiting, _ = _line()
    first.pods.update(state="succeeded")
    first.state = WorkloadState.COMPLETED
    first.save(update_fields=["state"])
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    started = {b.job for b in outcome.result.binds}
    assert started
    line = WaitingLine.objects.get(shard=sc.shard)
    assert WaitingLine.objects.count() == 1
    assert line.cycle_id == outcome.cycle_id
    assert {line_key(w.pk) for w in waiting.values() if workload_uid(w) in started}.isdisjoint(line.positions)
    assert sorted(v[0] for v in line.positions.values()) == list(range(1, len(line.positions) + 1))


def test_the_api_gives_the_place_of_a_pending_workload_and_none_for_a_running_one(admin_api):
    _, first, waiting, outcome = _line()
    w = waiting["b-2"]
    want = outcome.result.positions[workload_uid(w)]
    body = admin_api.get(f"/api/v1/workloads/{w.pk}/").json()
    assert body["place"]["in_shard"] == want[0]
    assert body["place"]["in_queue"] == want[1]
    assert body["place"]["cycle"] == outcome.cycle_id
    assert admin_api.get(f"/api/v1/workloads/{first.pk}/").json()["place"] is None
    listed = {row["id"]: row["place"] for row in admin_api.get("/api/v1/workloads/?limit=50").json()["results"]}
    for v in waiting.values():
        assert (listed[v.pk]["in_shard"], listed[v.pk]["in_queue"]) == outcome.result.positions[workload_uid(v)]
    assert listed[first.pk] is None


def test_the_workload_page_and_the_list_show_the_place(admin_client):
    _, first, waiting, outcome = _line()
    w = waiting["a-2"]
    in_shard, in_queue = outcome.result.positions[workload_uid(w)]
    page = admin_client.get(reverse("workloads:detail", args=[w.pk])).content.decode()
    assert f'<strong id="place-in-shard">#{in_shard}</strong>' in page
    assert f'<strong id="place-in-queue">#{in_queue}</strong>' in page
    running = admin_client.get(reverse("workloads:detail", args=[first.pk])).content.decode()
    assert 'id="waiting-line"' not in running
    listing = admin_client.get(reverse("workloads:list")).content.decode()
    assert f"#{in_shard} <span" in listing


def test_queue_depth_per_queue_and_priority_on_metrics_and_pages(admin_client):
    sc, _, waiting, outcome = _line()
    priority = {j.priority for j in outcome.snapshot.jobs if j.uid in outcome.result.pending}
    assert len(priority) == 1
    (prio,) = priority
    depth = queue_depth()
    assert [(d.queue, d.priority, d.jobs, d.gpus) for d in depth] == [("team-a", prio, 2, 8.0), ("team-b", prio, 2, 8.0)]
    oldest = max(outcome.snapshot.now - j.creation for j in outcome.snapshot.jobs if j.uid in outcome.result.pending)
    assert all(d.oldest_wait_seconds == pytest.approx(oldest) for d in depth)

    body = admin_client.get("/metrics").content.decode()
    assert f'kai_queue_depth{{priority="{prio}",queue="team-a"}} 2.0' in body
    assert f'kai_queue_pending_gpus{{priority="{prio}",queue="team-b"}} 8.0' in body
    assert f'kai_queue_oldest_wait_seconds{{priority="{prio}",queue="team-a"}}' in body

    overview = admin_client.get("/").content.decode()
    assert 'id="queue-depth"' in overview
    assert overview.count('href="/queues/team-') >= 2
    page = admin_client.get(reverse("queues:detail", args=["team-b"])).content.decode()
    section = page[page.index('id="queue-depth"'):]
    section = section[:section.index("</section>")]
    assert "team-b" in section
    assert "team-a" not in section
    dept = admin_client.get(reverse("queues:detail", args=["dept"])).content.decode()
    section = dept[dept.index('id="queue-depth"'):]
    assert "team-a" in section[:section.index("</section>")]


def test_metrics_have_no_queue_depth_rows_when_nothing_waits(admin_client):
    sc = small_cluster(nodes=1, gpus=8)
    submit(sc, "team-a", "fits", gpus_per_pod=2)
    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    assert queue_depth() == []
    body = admin_client.get("/metrics").content.decode()
    assert "kai_queue_depth{" not in body
    assert "Nothing waits" in admin_client.get("/").content.decode()
