"""The webhook endpoints (AdmissionReview in and out, bounds) and the bindings' API, admin page and audit."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kaiweb.admission import cluster
from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.audit.models import AuditEntry

pytestmark = pytest.mark.django_db


def review(obj: dict[str, Any], *, operation: str = "CREATE", kind: str = "Pod", group: str = "",
           old: dict[str, Any] | None = None, namespace: str = "team") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": group, "version": "v1", "kind": kind}, "operation": operation,
                        "namespace": namespace, "object": obj, "oldObject": old,
                        "userInfo": {"username": "alice"}}}


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        scheduler: str = "kai-scheduler") -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "cuda"}]}}


def post(client: Any, path: str, body: Any, content_type: str = "application/json") -> Any:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data=data, content_type=content_type)


def answer(client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = post(client, path, body)
    assert response.status_code == 200, response.content
    got = response.json()
    assert got["apiVersion"] == "admission.k8s.io/v1"
    assert got["kind"] == "AdmissionReview"
    assert got["response"]["uid"] == "u-1"
    return got["response"]


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


# ------------------------------------------------------------------------------------------ bad bodies


@pytest.mark.parametrize(("body", "content_type", "status", "words"), [
    (b"{not json", "application/json", 400, "not JSON"),
    ({"kind": "Pod"}, "application/json", 400, "not an AdmissionReview"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "application/json", 400,
     "only admission.k8s.io/v1"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "application/json", 400, "request: is required"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {}, "operation": "CREATE"}},
     "application/json", 400, "request.uid"),
    (b"x", "text/plain", 415, "application/json"),
    (b"[" * 100000 + b"]" * 100000, "application/json", 400, "nests too deeply"),
])
def test_a_body_that_is_not_an_admission_review_is_a_4xx_naming_the_problem(client, body, content_type, status, words):
    for path in ("/admission/mutate", "/admission/validate"):
        response = post(client, path, body, content_type)
        assert response.status_code == status
        assert words in response.json()["detail"]


def test_a_review_past_the_size_limit_is_refused_with_413_unread(client, settings):
    settings.KAI_ADMISSION_MAX_BYTES = 2000
    response = post(client, "/admission/validate", review(pod(annotations={"x": "y" * 5000})))
    assert response.status_code == 413
    assert "KAI_ADMISSION_MAX_BYTES" in response.json()["detail"]


def test_the_webhooks_answer_only_post_and_need_no_session_or_csrf_token(client):
    assert client.get("/admission/mutate").status_code == 405
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    assert answer(strict, "/admission/validate", review(pod()))["allowed"] is True


# ------------------------------------------------------------------------------------------ mutation


def test_a_fractional_pod_of_ours_is_patched_with_its_sharing_environment(client):
    response = answer(client, "/admission/mutate", review(pod(annotations={"gpu-memory": "2048"})))
    ops = {op["path"]: op["value"] for op in patch_of(response)}
    prefix = ops["/metadata/annotations/runai~1shared-gpu-configmap"]
    env = {e["name"]: e for e in ops["/spec/containers/0/env"]}
    assert env["CUDA_DEVICE_MEMORY_LIMIT"]["valueFrom"]["configMapKeyRef"] == {
        "name": f"{prefix}-0", "key": "CUDA_DEVICE_MEMORY_LIMIT"}
    assert set(env) == {"GPU_PORTION", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_LIMIT"}


def test_pods_of_other_schedulers_and_updates_are_left_alone(client):
    assert answer(client, "/admission/mutate", review(pod(scheduler="default-scheduler"))) == {"uid": "u-1", "allowed": True}
    assert answer(client, "/admission/mutate", review(pod(), operation="UPDATE", old=pod())) == {"uid": "u-1", "allowed": True}


def test_the_queue_label_defaults_to_the_namespaces(client, settings, monkeypatch):
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    cluster.forget()
    read: list[str] = []
    monkeypatch.setattr(cluster, "_api_reader", lambda: (lambda ns: read.append(ns) or {"labels": {"kai.scheduler/queue": "team-a"}}))
    try:
        for _ in range(2):
            ops = patch_of(answer(client, "/admission/mutate", review(pod())))
            assert {"op": "add", "path": "/metadata/labels/kai.scheduler~1queue", "value": "team-a"} in ops
        assert read == ["team"]  # the second pod found the namespace's labels in the cache
    finally:
        cluster.forget()


def test_a_namespace_that_cannot_be_read_leaves_the_queue_to_the_pod_grouper(client, settings, monkeypatch):
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    cluster.forget()

    def broken(ns: str) -> dict[str, dict[str, str]]:
        raise OSError("connection refused")

    monkeypatch.setattr(cluster, "_api_reader", lambda: broken)
    try:
        ops = patch_of(answer(client, "/admission/mutate", review(pod())))
        assert [op["path"] for op in ops] == ["/spec/containers/0/env"]  # only the device hiding
    finally:
        cluster.forget()


# ------------------------------------------------------------------------------------------ validation


def test_a_pod_naming_a_missing_parent_or_unbound_queue_is_denied_with_the_field_and_rule(client, queue_tree):
    def denied(queue: str) -> dict[str, Any]:
        response = answer(client, "/admission/validate", review(pod({"kai.scheduler/queue": queue})))
        assert response["allowed"] is False
        assert response["status"]["code"] == 403
        assert response["status"]["details"]["causes"][0]["field"] == "metadata.labels[kai.scheduler/queue]"
        return response["status"]

    assert "queue 'ghost' does not exist" in denied("ghost")["message"]
    assert denied("department-a")["details"]["causes"][0]["message"] == "must name a leaf queue"
    assert answer(client, "/admission/validate", review(pod({"kai.scheduler/queue": "team-training"})))["allowed"]
    NamespaceQueueBinding.objects.create(namespace="team", queue=queue_tree["team-inference"])
    status = denied("team-training")
    assert status["message"] == ("metadata.labels[kai.scheduler/queue]: namespace 'team' may use only the queues bound "
                                 "to it (team-inference), not 'team-training'; a platform admin binds namespaces to queues")
    assert answer(client, "/admission/validate", review(pod({"kai.scheduler/queue": "team-inference"})))["allowed"]
    other_namespace = review(pod({"kai.scheduler/queue": "team-training"}), namespace="elsewhere")
    assert answer(client, "/admission/validate", other_namespace)["allowed"]


def test_an_update_is_checked_only_in_what_it_changes(client, queue_tree):
    NamespaceQueueBinding.objects.create(namespace="team", queue=queue_tree["team-inference"])
    before = pod({"kai.scheduler/queue": "team-training"})  # admitted before the binding
    after = pod({"kai.scheduler/queue": "team-training", "runai-gpu-group": "g-1"})
    assert answer(client, "/admission/validate", review(after, operation="UPDATE", old=before))["allowed"] is True
    moved = pod({"kai.scheduler/queue": "team-research-a"})
    assert answer(client, "/admission/validate", review(moved, operation="UPDATE", old=before))["allowed"] is False


def test_a_pod_with_a_bad_gpu_request_is_denied(client):
    response = answer(client, "/admission/validate", review(pod(annotations={"gpu-fraction": "1.5"})))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("metadata.annotations[gpu-fraction]: must be a number greater than 0")


def test_pod_groups_are_checked_for_subgroups_and_their_queue(client, queue_tree):
    def pod_group(queue: str, groups: list[dict[str, Any]]) -> dict[str, Any]:
        return review({"metadata": {"name": "pg"}, "spec": {"queue": queue, "minMember": 1, "subGroups": groups}},
                      kind="PodGroup", group="scheduling.run.ai")

    cycle = answer(client, "/admission/validate", pod_group("team-training", [{"name": "a", "parent": "a"}]))
    assert cycle["allowed"] is False
    assert "cycle detected" in cycle["status"]["message"]
    parent = answer(client, "/admission/validate", pod_group("department-b", [{"name": "a"}]))
    assert parent["status"]["message"].startswith("spec.queue: queue 'department-b' has child queues")
    assert answer(client, "/admission/validate", pod_group("team-training", [{"name": "a"}]))["allowed"] is True


def test_a_verdict_costs_at_most_three_queries(client, queue_tree, django_assert_max_num_queries):
    with django_assert_max_num_queries(3):
        answer(client, "/admission/validate", review(pod({"kai.scheduler/queue": "team-training"})))


# ------------------------------------------------------------------------------------------ bindings


def test_platform_admins_bind_namespaces_through_the_api_and_it_is_audited(admin_api, viewer_api, queue_tree):
    url = "/api/v1/namespace-bindings/"
    made = admin_api.post(url, {"namespace": "team", "queue": "team-training"}, format="json")
    assert made.status_code == 201
    assert made.json()["queue"] == "team-training"
    assert admin_api.post(url, {"namespace": "team", "queue": "team-training"}, format="json").status_code == 409
    parent = admin_api.post(url, {"namespace": "team", "queue": "department-a"}, format="json")
    assert parent.status_code == 400
    assert "leaf" in json.dumps(parent.json())
    assert admin_api.post(url, {"namespace": "Bad_NS", "queue": "team-training"}, format="json").status_code == 400
    assert viewer_api.post(url, {"namespace": "x", "queue": "team-training"}, format="json").status_code == 403
    assert [b["namespace"] for b in viewer_api.get(url + "?queue=team-training").json()["results"]] == ["team"]
    assert admin_api.delete(f"{url}{made.json()['id']}/").status_code == 204
    assert list(AuditEntry.objects.filter(object_type="admission.namespacequeuebinding")
                .order_by("id").values_list("action", flat=True)) == ["create", "delete"]


def test_the_bindings_page_lists_and_lets_only_platform_admins_edit(client, platform_admin, viewer, queue_tree):
    client.force_login(platform_admin)
    assert client.post("/admission/bindings/", {"namespace": "team", "queue": "team-training"}).status_code == 302
    page = client.get("/admission/bindings/").content.decode()
    assert 'data-namespace="team"' in page
    assert 'data-queue="team-training"' in page
    assert 'id="binding-form"' in page
    again = client.post("/admission/bindings/", {"namespace": "team", "queue": "team-training"})
    assert again.status_code == 400
    assert "already bound" in again.content.decode()
    client.force_login(viewer)
    page = client.get("/admission/bindings/").content.decode()
    assert 'data-queue="team-training"' in page
    assert 'id="binding-form"' not in page
    assert client.post("/admission/bindings/", {"namespace": "x", "queue": "team-training"}).status_code == 403


def test_a_namespace_whose_project_enforces_the_scheduler_puts_every_pod_on_ours(client, settings, monkeypatch):
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    cluster.forget()
    namespaces = {"team": {"labels": {"kai/project": "vision"},
                           "annotations": {"kai.resources/enforce-scheduler-name": "true"}},
                  "free": {"labels": {"kai/project": "nlp"}, "annotations": {}}}
    monkeypatch.setattr(cluster, "_api_reader", lambda: namespaces.__getitem__)
    try:
        ops = patch_of(answer(client, "/admission/mutate", review(pod(scheduler="default-scheduler"))))
        assert {"op": "add", "path": "/spec/schedulerName", "value": "kai-scheduler"} in ops
        assert "/spec/containers/0/env" in [op["path"] for op in ops]  # then mutated as ours are
        assert answer(client, "/admission/mutate", review(pod(scheduler="default-scheduler"), namespace="free")) == {
            "uid": "u-1", "allowed": True}
    finally:
        cluster.forget()
