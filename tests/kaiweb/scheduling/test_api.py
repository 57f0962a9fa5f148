"""Scheduling history through the API: cycles, decisions, preemptions; filters and query budgets."""

from __future__ import annotations

import pytest

from tests.factories import DecisionFactory, PreemptionEventFactory, SchedulingCycleFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def test_cycles_filter_and_budget(viewer_api, django_assert_max_num_queries):
    for i in range(10):
        SchedulingCycleFactory(evictions=i % 2)
    with django_assert_max_num_queries(6):
        response = viewer_api.get("/api/v1/cycles/?with_evictions=true")
    assert response.json()["count"] == 5
    assert viewer_api.post("/api/v1/cycles/", {}, format="json").status_code in (403, 405)


def test_decisions_filter_by_cycle_and_kind(viewer_api):
    cycle = SchedulingCycleFactory()
    DecisionFactory(cycle=cycle, kind="bind")
    DecisionFactory(cycle=cycle, kind="evict", reason="ReclaimOverFairShare")
    DecisionFactory(kind="bind")
    rows = viewer_api.get(f"/api/v1/decisions/?cycle={cycle.pk}&kind=evict").json()["results"]
    assert [(r["kind"], r["reason"]) for r in rows] == [("evict", "ReclaimOverFairShare")]


def test_preemptions_by_queue_either_side_within_budget(viewer_api, queue_tree, django_assert_max_num_queries):
    training, inference = queue_tree["team-training"], queue_tree["team-inference"]
    for i in range(8):
        PreemptionEventFactory(
            preemptor=WorkloadFactory(queue=inference), victim=WorkloadFactory(queue=training),
            preemptor_queue=inference, victim_queue=training if i % 2 else queue_tree["team-research-b"],
            victim_queue_figures={"allocated": {"gpu": 10}, "fair_share": {"gpu": 8}},
        )
    with django_assert_max_num_queries(6):
        response = viewer_api.get("/api/v1/preemptions/?queue=team-training")
    rows = response.json()["results"]
    assert len(rows) == 4
    assert rows[0]["victim_queue"] == "team-training"
    assert rows[0]["victim_queue_figures"]["fair_share"] == {"gpu": 8}
    assert viewer_api.get("/api/v1/preemptions/?queue=team-inference").json()["count"] == 8
