"""Workload pages: the filterable list (the API's FilterSet) and one workload with why-pending."""

from __future__ import annotations

import pytest
from django.utils import timezone

from kaiweb.scheduling.models import PendingReason
from kaiweb.workloads.models import Pod, Workload
from tests.sample_data import build_dataset, query_counts_before_and_after_more_data


@pytest.fixture
def ui_data(queue_tree):
    return build_dataset(nodes=8, workloads=60, cycles=6, seed=8)


def _rows(html: str) -> list[str]:
    body = html[html.index('id="workload-table"'):]
    body = body[body.index("<tbody"):body.index("</tbody>")]
    return [chunk for chunk in body.split("<tr")[1:] if "empty-row" not in chunk]


def test_list_filters_by_state_through_the_api_filterset(client, viewer, ui_data):
    client.force_login(viewer)
    rows = _rows(client.get("/workloads/?state=pending&per_page=250").content.decode())
    assert len(rows) == Workload.objects.filter(state="pending").count()
    assert all("Pending" in r for r in rows)


def test_list_filters_by_queue_subtree_and_priority(client, viewer, ui_data):
    client.force_login(viewer)
    rows = _rows(client.get("/workloads/?queue_tree=department-b&priority_class=train&per_page=250").content.decode())
    expected = Workload.objects.filter(queue__parent__name="department-b", priority_class__name="train").count()
    assert len(rows) == expected > 0


def test_list_filters_by_gpu_kind(client, viewer, ui_data):
    client.force_login(viewer)
    rows = _rows(client.get("/workloads/?gpu_kind=fraction&per_page=250").content.decode())
    expected = Workload.objects.filter(pods__gpu_fraction__isnull=False).distinct().count()
    assert len(rows) == expected > 0
    none_rows = _rows(client.get("/workloads/?gpu_kind=none&per_page=250").content.decode())
    assert none_rows == []  # every sample workload asks for a GPU


def test_list_shows_the_current_why_pending(client, viewer, ui_data):
    reason = PendingReason.objects.filter(is_current=True).select_related("workload").first()
    client.force_login(viewer)
    html = client.get(f"/workloads/?q={reason.workload.name}").content.decode()
    assert reason.reason in html


def test_bad_filter_value_is_shown_next_to_the_filter(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/workloads/?state=sleeping").content.decode()
    assert "errorlist" in html
    assert "sleeping" in html
    assert _rows(html) == []


def test_list_is_paginated(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/workloads/?per_page=25").content.decode()
    assert len(_rows(html)) == 25
    assert "1–25 of 60" in html
    page3 = client.get("/workloads/?per_page=25&page=3").content.decode()
    assert len(_rows(page3)) == 10
    assert client.get("/workloads/?page=99").status_code == 200  # past the end: the last page


def test_list_query_count_does_not_grow_with_the_data(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    small, large = query_counts_before_and_after_more_data(client, "/workloads/", nodes=8, workloads=150, cycles=4, seed=9)
    assert large == small
    with django_assert_max_num_queries(12):
        client.get("/workloads/")


def test_detail_explains_why_pending_in_words_with_the_numbers(client, viewer, ui_data):
    reason = PendingReason.objects.filter(is_current=True, reason="queue-over-limit").select_related("workload").first()
    client.force_login(viewer)
    html = client.get(f"/workloads/{reason.workload_id}/").content.decode()
    why = html[html.index('id="why-pending"'):]
    assert "Its queue (or a parent) is at its limit" in why
    assert reason.message in why
    numbers = why[why.index('id="why-numbers"'):]
    assert "limit" in numbers
    assert "allocated" in numbers


def test_reason_codes_read_as_plain_words():
    from kaiweb.workloads.views import headline

    assert headline("no-node-fits") == "No node has room for its pods"
    assert headline("reclaim-reclaimer-over-fair-share").startswith("It could not take resources back")
    assert headline("preempt-no-victims").startswith("No lower-priority workload")
    assert headline("some-new-code") == "Some new code"


def test_detail_lists_the_other_attempts_of_a_reason(client, viewer, ui_data):
    reason = PendingReason.objects.filter(is_current=True).first()
    reason.details = {**reason.details, "evictions": [
        {"code": "reclaim-reclaimer-over-fair-share", "message": "reclaim: queue x would hold 20 > its fair share 12"}]}
    reason.save()
    client.force_login(viewer)
    html = client.get(f"/workloads/{reason.workload_id}/").content.decode()
    assert "Also tried: it could not take resources back" in html
    assert "reclaim: queue x would hold 20 &gt; its fair share 12" in html


def test_detail_shows_pods_placement_and_history(client, viewer, ui_data):
    pod = Pod.objects.filter(state="Running", node__isnull=False).select_related("workload", "node").first()
    client.force_login(viewer)
    html = client.get(f"/workloads/{pod.workload_id}/").content.decode()
    assert pod.name in html[html.index('id="pod-table"'):]
    assert pod.node.name in html[html.index('id="placement"'):]
    history = html[html.index('id="workload-history"'):]
    assert "Submitted" in history


def test_detail_of_a_pending_workload_without_a_cycle_says_so(client, viewer, queue_tree):
    from kaiweb.cluster.models import Cluster

    w = Workload.objects.create(cluster=Cluster.objects.get(name="default"), namespace="ns", name="fresh",
                                queue=queue_tree["team-training"], submitted_at=timezone.now())
    client.force_login(viewer)
    html = client.get(f"/workloads/{w.pk}/").content.decode()
    assert "No cycle has looked at this workload yet" in html


def test_detail_of_a_pipelined_workload_says_what_it_waits_for(client, viewer, queue_tree):
    from kaiweb.cluster.models import Cluster
    from tests.factories import DecisionFactory

    w = Workload.objects.create(cluster=Cluster.objects.get(name="default"), namespace="ns", name="waiting",
                                queue=queue_tree["team-training"], submitted_at=timezone.now())
    decision = DecisionFactory(workload=w, kind="pipeline", node_name="gpu-node-7", reason="Pipelined")
    client.force_login(viewer)
    html = client.get(f"/workloads/{w.pk}/").content.decode()
    assert "No cycle has looked at this workload yet" not in html
    assert "Waiting for resources being released" in html
    assert f"/cycles/{decision.cycle_id}/" in html
    assert "gpu-node-7" in html


def test_detail_query_budget(client, viewer, ui_data, django_assert_max_num_queries):
    w = Workload.objects.filter(state="running").first()
    client.force_login(viewer)
    client.get(f"/workloads/{w.pk}/")
    with django_assert_max_num_queries(12):
        client.get(f"/workloads/{w.pk}/")


def test_unknown_workload_is_404(client, viewer, db):
    client.force_login(viewer)
    assert client.get("/workloads/999999/").status_code == 404


def test_filter_selects_offer_any_rather_than_dashes(client, viewer, db):
    client.force_login(viewer)
    html = client.get("/workloads/").content.decode()
    start = html.index('role="search"')
    form = html[start:html.index("</form>", start)]
    assert "---------" not in form
    assert '<option value="">any</option>' in form


def test_history_is_per_job_with_repeats_folded_and_evictions_shown_once(client, viewer, queue_tree):
    from datetime import timedelta

    from tests.factories import (
        DecisionFactory,
        PreemptionEventFactory,
        SchedulingCycleFactory,
        WorkloadFactory,
    )

    w = WorkloadFactory(queue=queue_tree["team-training"], namespace="ns", name="gang")
    t0 = timezone.now() - timedelta(minutes=10)
    # three cycles in which both pods of the gang are pipelined with the same message
    for i in range(3):
        cycle = SchedulingCycleFactory(started_at=t0 + timedelta(seconds=5 * i))
        for pod in ("gang-0", "gang-1"):
            DecisionFactory(cycle=cycle, workload=w, kind="pipeline", pod_name=pod, node_name="node-a",
                            reason="pipelined", message="waits for node-a to free 8 GPUs",
                            applied_at=cycle.started_at)
    # then one eviction of both pods, recorded as decisions and as preemptions
    cycle = SchedulingCycleFactory(started_at=t0 + timedelta(minutes=1))
    for pod in ("gang-0", "gang-1"):
        d = DecisionFactory(cycle=cycle, workload=w, kind="evict", pod_name=pod, node_name="node-a",
                            reason="reclaim", message="reclaimed", applied_at=cycle.started_at)
        PreemptionEventFactory(cycle=cycle, decision=d, victim=w, victim_ref=f"ns/{pod}", at=cycle.started_at,
                               preemptor_ref="team/other", message="queue over its fair share")
    client.force_login(viewer)
    html = client.get(f"/workloads/{w.pk}/").content.decode()
    history = html[html.index('id="workload-history"'):html.index("</ul>", html.index('id="workload-history"'))]
    rows = history.split("<li")[1:]
    pipeline = [r for r in rows if "Pipeline" in r]
    assert len(pipeline) == 1
    assert "2 pods (gang-0, gang-1)" in pipeline[0]
    assert "× 3" in pipeline[0]
    evictions = [r for r in rows if "evicted" in r or "Evict" in r]
    assert len(evictions) == 1
    assert "Preempted" in evictions[0]
    assert "(2 pods)" in evictions[0]
    assert "queue over its fair share" in evictions[0]


def test_every_pending_code_of_the_engine_has_a_headline_and_no_headline_is_for_another_vocabulary():
    from kaiweb.workloads.views import PREFIX_HEADLINES, REASON_HEADLINES, headline
    from scheduler_core import reasons

    assert set(REASON_HEADLINES) <= reasons.all_codes()
    plain = {code: headline(code) for code in reasons.PENDING_CODES}
    generic = {code for code, text in plain.items() if code not in REASON_HEADLINES
               and not any(code.startswith(prefix) for prefix, _ in PREFIX_HEADLINES)}
    assert generic == set()
