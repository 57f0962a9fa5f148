"""Preemption and cycle pages: timeline, table, filters shared with the API, CSV export, phases."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kaiweb.scheduling.models import Decision, PreemptionEvent, SchedulingCycle
from tests.sample_data import build_dataset, query_counts_before_and_after_more_data


@pytest.fixture
def ui_data(queue_tree):
    return build_dataset(nodes=8, workloads=60, cycles=24, seed=12)


def _table_rows(html: str, table_id: str) -> list[str]:
    body = html[html.index(f'id="{table_id}"'):]
    body = body[body.index("<tbody"):body.index("</tbody>")]
    return [chunk for chunk in body.split("<tr")[1:] if "empty-row" not in chunk]


def _csv(response) -> list[list[str]]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(body)))


def test_preemptions_page_has_timeline_and_every_event(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/preemptions/?per_page=250").content.decode()
    assert 'data-figure="preemption-timeline"' in html
    rows = _table_rows(html, "preemption-table")
    jobs_and_cycles = set(PreemptionEvent.objects.values_list("cycle_id", "victim_ref", "preemptor_ref", "action", "reason"))
    assert len(rows) == len(jobs_and_cycles) > 0


def test_a_gang_evicted_in_one_cycle_is_one_row_with_its_pods_and_the_whole_reason(client, viewer, queue_tree):
    from tests.factories import PreemptionEventFactory, SchedulingCycleFactory

    cycle = SchedulingCycleFactory()
    why = "queue team-b allocated 24 GPUs > allocatable share 16 GPUs; " + "the numbers go on " * 12 + "END-OF-REASON"
    for _ in range(4):
        PreemptionEventFactory(cycle=cycle, victim_ref="team-b/gang", preemptor_ref="team-a/job", message=why)
    PreemptionEventFactory(cycle=cycle, victim_ref="team-b/other", preemptor_ref="team-a/job", message="short")
    client.force_login(viewer)
    rows = _table_rows(client.get("/preemptions/").content.decode(), "preemption-table")
    assert len(rows) == 2
    gang = next(r for r in rows if "team-b/gang" in r)
    assert '<td class="num">4</td>' in gang
    assert "END-OF-REASON" in gang  # readable in full, behind a summary
    assert "<details>" in gang
    for column in ("last_at", "-pods", "victim_queue__name", "preemptor_ref", "reason"):
        ordered = _table_rows(client.get(f"/preemptions/?sort={column}").content.decode(), "preemption-table")
        assert len(ordered) == 2
    by_pods = _table_rows(client.get("/preemptions/?sort=-pods").content.decode(), "preemption-table")
    assert "team-b/gang" in by_pods[0]


def test_preemptions_filter_by_action_and_queue(client, viewer, ui_data):
    client.force_login(viewer)
    rows = _table_rows(client.get("/preemptions/?action=reclaim&per_page=250").content.decode(), "preemption-table")
    assert len(rows) == len(set(PreemptionEvent.objects.filter(action="reclaim").values_list(
        "cycle_id", "victim_ref", "preemptor_ref", "reason"))) > 0
    assert all("Reclaim" in r for r in rows)
    event = PreemptionEvent.objects.first()
    queue = event.victim_queue.name
    rows = _table_rows(client.get(f"/preemptions/?queue={queue}&per_page=250").content.decode(), "preemption-table")
    from django.db.models import Q

    assert len(rows) == len(set(
        PreemptionEvent.objects.filter(Q(victim_queue__name=queue) | Q(preemptor_queue__name=queue))
        .values_list("cycle_id", "victim_ref", "preemptor_ref", "action", "reason")))


def test_preemptions_csv_export_uses_the_same_filters(client, viewer, ui_data):
    client.force_login(viewer)
    response = client.get("/preemptions/export.csv?action=preempt")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = _csv(response)
    assert rows[0] == ["at", "action", "reason", "victim", "victim_pod", "victim_queue", "preemptor", "preemptor_queue",
                       "cycle", "message"]
    assert len(rows) - 1 == PreemptionEvent.objects.filter(action="preempt").count()
    assert {r[1] for r in rows[1:]} == {"preempt"}


def test_preemptions_csv_with_a_bad_filter_is_a_400_naming_the_field(client, viewer, ui_data):
    client.force_login(viewer)
    response = client.get("/preemptions/export.csv?action=explode")
    assert response.status_code == 400
    assert b"action" in response.content


def test_preemption_detail_shows_both_queues_figures(client, viewer, ui_data):
    event = PreemptionEvent.objects.exclude(preemptor_queue=None).first()
    client.force_login(viewer)
    html = client.get(f"/preemptions/{event.pk}/").content.decode()
    assert event.message in html
    assert "Victim queue" in html
    assert "Preemptor queue" in html
    assert '<th class="num">Fair share</th>' in html
    assert "<td>GPU (devices)</td>" in html  # every row names its unit


def test_preemptions_query_count_does_not_grow_with_the_data(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    small, large = query_counts_before_and_after_more_data(client, "/preemptions/", nodes=8, workloads=120, cycles=60, seed=13)
    assert large == small
    with django_assert_max_num_queries(10):
        client.get("/preemptions/")


def test_cycles_page_charts_phases_and_lists_cycles(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/cycles/?per_page=100").content.decode()
    assert 'data-figure="phase-chart"' in html
    assert 'data-figure="decision-chart"' in html
    assert '"allocate"' in html  # a phase trace in the figure JSON
    assert len(_table_rows(html, "cycle-table")) == SchedulingCycle.objects.count()


def test_cycles_filter_by_status(client, viewer, ui_data):
    client.force_login(viewer)
    rows = _table_rows(client.get("/cycles/?status=failed").content.decode(), "cycle-table")
    assert len(rows) == SchedulingCycle.objects.filter(status="failed").count()


def test_cycles_query_count_does_not_grow_with_the_data(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    small, large = query_counts_before_and_after_more_data(client, "/cycles/", nodes=4, workloads=20, cycles=80, seed=14)
    assert large == small
    with django_assert_max_num_queries(10):
        client.get("/cycles/")


def test_cycle_detail_shows_phases_and_decisions(client, viewer, ui_data):
    decision = Decision.objects.select_related("cycle").first()
    client.force_login(viewer)
    html = client.get(f"/cycles/{decision.cycle_id}/").content.decode()
    assert 'id="phase-table"' in html
    assert "allocate" in html
    assert decision.workload_ref in html[html.index('id="decision-table"'):]
    with CaptureQueriesContext(connection) as ctx:
        client.get(f"/cycles/{decision.cycle_id}/?kind=bind")
    assert len(ctx) <= 12


def test_unknown_cycle_and_preemption_are_404(client, viewer, db):
    client.force_login(viewer)
    assert client.get("/cycles/424242/").status_code == 404
    assert client.get("/preemptions/424242/").status_code == 404


def test_phase_chart_stacks_the_parts_of_an_aggregate_phase_once(client, viewer, queue_tree):
    from django.utils import timezone

    SchedulingCycle.objects.create(started_at=timezone.now(), status="succeeded", duration_seconds=0.5,
                                   phase_durations={"observe": 0.1, "engine": 0.3, "engine.allocate": 0.2,
                                                    "engine.reclaim": 0.1, "apply": 0.1})
    from kaiweb.scheduling.views import leaf_phases

    assert leaf_phases(["apply", "engine", "engine.reclaim", "observe", "engine.allocate"]) == [
        "observe", "engine.allocate", "engine.reclaim", "apply"]
    client.force_login(viewer)
    html = client.get("/cycles/").content.decode()
    figure = html[html.index('id="phase-chart"'):]
    figure = figure[:figure.index("</script>")]
    assert '"name": "engine.allocate"' in figure
    assert '"name": "engine"' not in figure


def test_cycle_detail_and_api_say_what_the_write_back_told_the_cluster_and_left_for_later(
        client, viewer, admin_api, queue_tree):
    from django.utils import timezone

    told = SchedulingCycle.objects.create(
        started_at=timezone.now(), status="succeeded",
        write_back={"queue_statuses": 4, "pending_reports": 1000, "pending_deferred": 2500, "pod_group_statuses": 7,
                    "pod_group_events": 9, "pod_group_deferred": 31, "pod_group_stamps": 0, "pod_group_lines": 12,
                    "errors": 2})
    quiet = SchedulingCycle.objects.create(started_at=timezone.now(), status="succeeded")  # not on Kubernetes
    client.force_login(viewer)

    html = client.get(f"/cycles/{told.pk}/").content.decode()
    card = html[html.index('id="write-back"'):]
    card = card[:card.index("</section>")]
    rows = dict(re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">(\d+)</td>", card))
    assert rows == {"Queue statuses": "4", "Why-pending on pods": "1000", "PodGroup statuses": "7",
                    "PodGroup events": "9", "PodGroup stamps": "0", "Places in line and estimates": "12"}
    assert ">2500<" in card
    assert ">31<" in card
    assert "2 writes failed" in card
    assert 'id="write-back"' not in client.get(f"/cycles/{quiet.pk}/").content.decode()

    body = admin_api.get(f"/api/v1/cycles/{told.pk}/").json()
    assert body["write_back"]["pod_group_deferred"] == 31
