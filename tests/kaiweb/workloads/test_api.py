"""Workloads through the API: submission rules, current why-pending, filters, query budget."""

from __future__ import annotations

import pytest

from kaiweb.workloads.models import Workload
from tests.factories import PendingReasonFactory, PodFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def submit(client, **overrides):
    body = {
        "namespace": "research", "name": "train-1", "queue": "team-training", "priority_class": "train",
        "min_member": 2, "pods": [{"name": "p0", "gpu": 1, "cpu": 4000}, {"name": "p1", "gpu": 1, "cpu": 4000}],
    }
    body.update(overrides)
    return client.post("/api/v1/workloads/", body, format="json")


def test_platform_admin_submits_a_workload_with_pods(admin_api, queue_tree):
    response = submit(admin_api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["cluster"] == "default"
    assert body["queue"] == "team-training"
    assert [p["name"] for p in body["pods"]] == ["p0", "p1"]
    assert body["pending_reason"] is None


def test_a_workload_on_a_queue_with_children_is_refused(admin_api, queue_tree):
    response = submit(admin_api, queue="department-b")
    assert response.status_code == 400
    assert response.json() == {
        "queue": ["queue department-b has child queues (team-research-b, team-training); workloads go to leaf queues"]
    }
    assert not Workload.objects.exists()


def test_bad_pod_requests_are_listed_by_pod_and_field(admin_api, queue_tree):
    response = submit(
        admin_api,
        pods=[{"name": "a", "gpu": 1, "gpu_fraction": 0.5}, {"name": "b", "gpu": 1.5}, {"name": "c", "gpu_memory_mib": 100, "gpu": 2}],
        min_member=5,
    )
    assert response.status_code == 400
    errors = response.json()
    assert errors["pods[0].gpu"] == ["a pod asks for whole GPUs or a GPU fraction, not both"]
    assert errors["pods[1].gpu"] == ["whole GPUs must be an integer, not 1.5; use gpu_fraction for a part of one"]
    assert errors["pods[2].gpu_memory_mib"] == ["a pod asks for whole GPUs or an amount of GPU memory, not both"]
    assert errors["min_member"] == ["is 5 but the workload has only 3 pod(s)"]
    assert not Workload.objects.exists()


def test_fraction_out_of_range_is_refused(admin_api, queue_tree):
    response = submit(admin_api, pods=[{"name": "a", "gpu_fraction": 1.5}], min_member=1)
    assert response.status_code == 400
    assert "gpu_fraction" in str(response.json())


def test_viewer_cannot_submit(viewer_api, queue_tree):
    assert submit(viewer_api).status_code == 403


def test_list_shows_current_why_pending_within_a_query_budget(viewer_api, queue_tree, django_assert_max_num_queries):
    for i in range(15):
        workload = WorkloadFactory(queue=queue_tree["team-training"], name=f"job-{i}")
        PodFactory(workload=workload)
        PendingReasonFactory(workload=workload, is_current=False, reason="NotReady")
        PendingReasonFactory(workload=workload, is_current=True, reason="OverLimit")
    with django_assert_max_num_queries(8):
        response = viewer_api.get("/api/v1/workloads/?queue=team-training")
    rows = response.json()["results"]
    assert len(rows) == 15
    assert {r["pending_reason"]["reason"] for r in rows} == {"OverLimit"}
    assert rows[0]["pod_count"] == 1


def test_filter_by_queue_subtree_and_pending_reason(viewer_api, queue_tree):
    a = WorkloadFactory(queue=queue_tree["team-inference"])
    b = WorkloadFactory(queue=queue_tree["team-training"])
    PendingReasonFactory(workload=b, reason="OverLimit")
    ids = {r["id"] for r in viewer_api.get("/api/v1/workloads/?queue_tree=department-a").json()["results"]}
    assert ids == {a.pk}
    ids = {r["id"] for r in viewer_api.get("/api/v1/workloads/?pending_reason=OverLimit").json()["results"]}
    assert ids == {b.pk}


def test_filter_by_gpu_kind_is_the_same_filter_as_the_page(viewer_api, queue_tree):
    whole = PodFactory(workload__queue=queue_tree["team-training"], gpu=2).workload
    shared = PodFactory(workload__queue=queue_tree["team-training"], gpu=0, gpu_fraction=0.5).workload
    cpu_only = PodFactory(workload__queue=queue_tree["team-training"], gpu=0).workload

    def ids(kind):
        return {r["id"] for r in viewer_api.get(f"/api/v1/workloads/?gpu_kind={kind}").json()["results"]}

    assert ids("whole") == {whole.pk}
    assert ids("fraction") == {shared.pk}
    assert ids("none") == {cpu_only.pk}
    bad = viewer_api.get("/api/v1/workloads/?gpu_kind=tpu")
    assert bad.status_code == 400
    assert "gpu_kind" in bad.json()


def test_pending_history_lists_every_record(viewer_api, queue_tree):
    workload = WorkloadFactory(queue=queue_tree["team-training"])
    PendingReasonFactory(workload=workload, is_current=False, reason="NotReady")
    PendingReasonFactory(workload=workload, is_current=True, reason="OverLimit")
    body = viewer_api.get(f"/api/v1/workloads/{workload.pk}/pending-history/").json()
    assert [r["reason"] for r in body["results"]] == ["OverLimit", "NotReady"]


def test_moving_a_workload_keeps_it_on_a_leaf_queue(admin_api, viewer_api, queue_tree):
    workload = WorkloadFactory(queue=queue_tree["team-training"])
    PodFactory(workload=workload)
    url = f"/api/v1/workloads/{workload.pk}/"
    refused = admin_api.patch(url, {"queue": "department-a"}, format="json")
    assert refused.status_code == 400
    assert refused.json() == {
        "queue": ["queue department-a has child queues (team-inference, team-research-a); workloads go to leaf queues"]
    }
    assert viewer_api.patch(url, {"queue": "team-inference"}, format="json").status_code == 403
    moved = admin_api.patch(url, {"queue": "team-inference", "priority_class": "build"}, format="json")
    assert moved.status_code == 200
    assert (moved.json()["queue"], moved.json()["priority_class"]) == ("team-inference", "build")
    too_big = admin_api.patch(url, {"min_member": 3}, format="json")
    assert too_big.json() == {"min_member": ["is 3 but the workload has only 1 pod(s)"]}


def test_every_workload_change_through_the_api_is_audited_with_who_and_what(admin_api, queue_tree, client,
                                                                              platform_admin):
    from kaiweb.audit.models import AuditEntry

    created = submit(admin_api)
    assert created.status_code == 201
    pk = created.json()["id"]
    entry = AuditEntry.objects.get(object_type="workloads.workload", action="create")
    assert (entry.actor_name, entry.source, entry.object_id) == ("platform-admin", "api", str(pk))
    assert entry.after["queue_id"] == queue_tree["team-training"].pk
    assert entry.after["pods"] == 2

    moved = admin_api.patch(f"/api/v1/workloads/{pk}/", {"queue": "team-inference"}, format="json")
    assert moved.status_code == 200
    update = AuditEntry.objects.get(object_type="workloads.workload", action="update")
    assert update.changes()["queue_id"] == (queue_tree["team-training"].pk, queue_tree["team-inference"].pk)
    # a refused change writes nothing
    admin_api.patch(f"/api/v1/workloads/{pk}/", {"queue": "department-a"}, format="json")
    assert AuditEntry.objects.filter(object_type="workloads.workload", action="update").count() == 1

    assert admin_api.delete(f"/api/v1/workloads/{pk}/").status_code == 204
    gone = AuditEntry.objects.get(object_type="workloads.workload", action="delete")
    assert gone.before["name"] == "train-1"
    assert "train-1" in gone.object_repr

    # the audit page reads the move by queue name
    client.force_login(platform_admin)
    html = client.get("/audit/?object_type=workloads.workload&action=update").content.decode()
    assert 'queue: <span class="delta-down">team-training</span> → <span class="delta-up">team-inference</span>' in html


def test_a_taken_workload_name_is_a_409_naming_the_field(admin_api, queue_tree):
    assert submit(admin_api).status_code == 201
    again = submit(admin_api)
    assert again.status_code == 409
    assert "already exists" in again.json()["name"][0]
