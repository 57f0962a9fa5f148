"""The queues API: CRUD through the rules, the tree, the listing, CRD import/export, roles, query budgets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.db import connection

from kaiweb.queues.models import Queue
from tests.factories import QueueStatusFactory, SchedulingCycleFactory

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "queues.yaml"


def test_anonymous_requests_are_refused(api_client, queue_tree):
    response = api_client.get("/api/v1/queues/")
    assert response.status_code in (401, 403)


def test_viewer_lists_queues_with_parent_and_children(viewer_api, queue_tree):
    response = viewer_api.get("/api/v1/queues/?is_root=true")
    assert response.status_code == 200
    rows = {r["name"]: r for r in response.json()["results"]}
    assert set(rows) == {"department-a", "department-b"}
    assert rows["department-a"]["children"] == ["team-inference", "team-research-a"]
    assert rows["department-a"]["parent"] is None


def test_filters_and_ordering(viewer_api, queue_tree):
    response = viewer_api.get("/api/v1/queues/?parent=department-b&ordering=-priority")
    assert [r["name"] for r in response.json()["results"]] == ["team-training", "team-research-b"]
    response = viewer_api.get("/api/v1/queues/?is_leaf=true&priority_min=150")
    assert [r["name"] for r in response.json()["results"]] == ["team-inference"]


def test_list_query_budget_does_not_grow_with_rows(viewer_api, queue_tree, django_assert_max_num_queries):
    for i in range(20):
        Queue.objects.create(name=f"extra-{i}", parent=queue_tree["team-training"] if i == 0 else None)
    with django_assert_max_num_queries(8):
        response = viewer_api.get("/api/v1/queues/")
    assert response.json()["count"] == 26


def test_platform_admin_creates_a_queue_and_gets_warnings(admin_api, queue_tree):
    response = admin_api.post(
        "/api/v1/queues/", {"name": "team-new", "parent": "department-a", "gpu_quota": 4, "gpu_limit": 8}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["parent"] == "department-a"
    assert body["warnings"] == [
        "the children of department-a have gpu quotas summing to 20, above department-a's gpu quota 16: "
        "not every child can get its quota"
    ]


def test_rule_errors_name_the_field(admin_api, queue_tree):
    response = admin_api.post("/api/v1/queues/", {"name": "x", "gpu_quota": 4, "gpu_limit": 2}, format="json")
    assert response.status_code == 400
    assert response.json() == {"gpu_limit": ["limit 2 is below the quota 4; a limit must be -1 or ≥ the quota"]}
    response = admin_api.patch(
        f"/api/v1/queues/{queue_tree['department-a'].pk}/", {"parent": "team-inference"}, format="json"
    )
    assert response.status_code == 400
    assert "makes a cycle" in response.json()["parent"][0]
    response = admin_api.post("/api/v1/queues/", {"name": "y", "parent": "ghost"}, format="json")
    assert response.json() == {"parent": ["queue 'ghost' does not exist; create the parent first"]}
    response = admin_api.post("/api/v1/queues/", {"name": "z", "gpu_over_quota_weight": -2}, format="json")
    assert response.status_code == 400
    assert "gpu_over_quota_weight" in response.json()


def test_deleting_a_parent_is_refused_with_the_reason(admin_api, queue_tree):
    response = admin_api.delete(f"/api/v1/queues/{queue_tree['department-b'].pk}/")
    assert response.status_code == 400
    assert "has child queues (team-research-b, team-training)" in response.json()["queue"][0]
    assert admin_api.delete(f"/api/v1/queues/{queue_tree['team-research-b'].pk}/").status_code == 204


def test_viewer_cannot_write(viewer_api, queue_tree):
    assert viewer_api.post("/api/v1/queues/", {"name": "v"}, format="json").status_code == 403
    pk = queue_tree["team-training"].pk
    assert viewer_api.patch(f"/api/v1/queues/{pk}/", {"gpu_quota": 1}, format="json").status_code == 403
    assert viewer_api.delete(f"/api/v1/queues/{pk}/").status_code == 403
    assert Queue.objects.get(pk=pk).gpu_quota == 8


def test_queue_admin_edits_only_their_subtree(queue_admin_api, queue_tree):
    inside = queue_tree["team-inference"].pk
    outside = queue_tree["team-training"].pk
    ok = queue_admin_api.patch(f"/api/v1/queues/{inside}/", {"gpu_quota": 6}, format="json")
    assert ok.status_code == 200
    refused = queue_admin_api.patch(f"/api/v1/queues/{outside}/", {"gpu_quota": 6}, format="json")
    assert refused.status_code == 403
    assert Queue.objects.get(pk=outside).gpu_quota == 8


def test_queue_admin_creates_children_only_under_their_queues(queue_admin_api, queue_tree):
    ok = queue_admin_api.post("/api/v1/queues/", {"name": "team-c", "parent": "department-a"}, format="json")
    assert ok.status_code == 201
    top = queue_admin_api.post("/api/v1/queues/", {"name": "rogue"}, format="json")
    assert top.status_code == 403
    other = queue_admin_api.post("/api/v1/queues/", {"name": "rogue", "parent": "department-b"}, format="json")
    assert other.status_code == 403
    moved = queue_admin_api.patch(
        f"/api/v1/queues/{queue_tree['team-inference'].pk}/", {"parent": "department-b"}, format="json"
    )
    assert moved.status_code == 403
    assert not Queue.objects.filter(name="rogue").exists()


def test_queue_admin_cannot_touch_priority_classes(queue_admin_api):
    response = queue_admin_api.post("/api/v1/priority-classes/", {"name": "mine", "value": 500}, format="json")
    assert response.status_code == 403


def test_tree_has_figures_from_the_latest_status(viewer_api, queue_tree, django_assert_max_num_queries):
    cycle = SchedulingCycleFactory()
    QueueStatusFactory(queue=queue_tree["team-training"], cycle=None, allocated={"gpu": 1})
    QueueStatusFactory(
        queue=queue_tree["team-training"], cycle=cycle,
        allocated={"cpu": 8000, "memory": 0, "gpu": 6}, fair_share={"gpu": 9.5}, pending={"gpu": 2},
        pending_workloads=1, running_workloads=3,
    )
    with django_assert_max_num_queries(8):  # the tree and its version (computed: the cache is empty)
        response = viewer_api.get("/api/v1/queues/tree/")
    roots = response.json()
    assert [r["name"] for r in roots] == ["department-a", "department-b"]
    training = next(c for c in roots[1]["children"] if c["name"] == "team-training")
    assert training["resources"]["gpu"] == {
        "quota": 8.0, "limit": 16.0, "over_quota_weight": 1.0, "allocated": 6, "fair_share": 9.5, "pending": 2,
    }
    assert training["running_workloads"] == 3
    research = next(c for c in roots[1]["children"] if c["name"] == "team-research-b")
    assert research["resources"]["gpu"]["allocated"] == 0.0


def test_listing_as_json_and_text(viewer_api, queue_tree):
    rows = viewer_api.get("/api/v1/queues/listing/").json()
    assert rows[0] == {"name": "department-a", "priority": "medium", "parent": "",
                       "children": "team-inference,team-research-a"}
    text = viewer_api.get("/api/v1/queues/listing/?format=text")
    assert text["Content-Type"].startswith("text/plain")
    lines = text.content.decode().splitlines()
    assert lines[0].split() == ["NAME", "PRIORITY", "PARENT", "CHILDREN"]
    assert lines[3].split() == ["team-inference", "high", "department-a"]


def test_import_and_export_through_the_api(admin_api):
    response = admin_api.post("/api/v1/queues/import/", EXAMPLE.read_bytes(), content_type="application/yaml")
    assert response.status_code == 200, response.content
    assert len(response.json()["created"]) == 6
    exported = admin_api.get("/api/v1/queues/export/")
    assert exported.status_code == 200
    assert exported["Content-Type"].startswith("application/yaml")
    docs = list(yaml.safe_load_all(exported.content))
    assert {d["metadata"]["name"] for d in docs} == {d["metadata"]["name"] for d in yaml.safe_load_all(EXAMPLE.read_text())}
    again = admin_api.post("/api/v1/queues/import/", {"yaml": exported.content.decode()}, format="json")
    assert again.json()["unchanged"] == [d["metadata"]["name"] for d in docs]


def test_import_errors_are_listed_and_nothing_changes(admin_api):
    bad = EXAMPLE.read_text().replace("gpu: {quota: 8, limit: 16, overQuotaWeight: 2}", "gpu: {quota: 8, limit: 4}")
    response = admin_api.post("/api/v1/queues/import/", {"yaml": bad}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"document": 5, "name": "team-training", "field": "spec.resources.gpu.limit",
         "message": "limit 4 is below the quota 8; a limit must be -1 or ≥ the quota"},
    ]
    assert Queue.objects.count() == 0


def test_import_dry_run(admin_api):
    response = admin_api.post("/api/v1/queues/import/?dry_run=true", EXAMPLE.read_bytes(), content_type="text/yaml")
    assert response.json()["dry_run"] is True
    assert Queue.objects.count() == 0


def test_import_refused_to_viewer_and_outside_a_queue_admins_subtree(viewer_api, queue_admin_api, queue_tree):
    assert viewer_api.post("/api/v1/queues/import/", {"yaml": EXAMPLE.read_text()}, format="json").status_code == 403
    response = queue_admin_api.post("/api/v1/queues/import/", {"yaml": EXAMPLE.read_text()}, format="json")
    assert response.status_code == 403
    assert "department-b" in response.json()["detail"]
    inside = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-new}
spec: {parentQueue: department-a, resources: {gpu: {quota: 0, limit: -1, overQuotaWeight: 1}}}
"""
    assert queue_admin_api.post("/api/v1/queues/import/", {"yaml": inside}, format="json").status_code == 200


def test_priority_class_crud_and_clash(admin_api):
    created = admin_api.post("/api/v1/priority-classes/", {"name": "urgent", "value": 200}, format="json")
    assert created.status_code == 201
    assert created.json()["preemptible"] is False
    clash = admin_api.post("/api/v1/priority-classes/", {"name": "urgent", "value": 10}, format="json")
    assert clash.status_code == 409
    assert clash.json() == {"name": ["a priority class named 'urgent' already exists (value 200); names are unique"]}
    listed = admin_api.get("/api/v1/priority-classes/?preemptible=false").json()["results"]
    assert [p["name"] for p in listed] == ["urgent", "inference", "build"]


def test_tree_query_count_does_not_grow_with_the_tree(viewer_api, queue_tree, django_assert_max_num_queries):
    for i in range(30):
        queue = Queue.objects.create(name=f"leaf-{i}", parent=queue_tree["team-research-a"] if i < 10 else None)
        QueueStatusFactory(queue=queue)
        QueueStatusFactory(queue=queue)
    with django_assert_max_num_queries(8):
        roots = viewer_api.get("/api/v1/queues/tree/").json()
    assert len(roots) == 22


def test_labels_must_map_names_to_strings(admin_api):
    response = admin_api.post("/api/v1/queues/", {"name": "l", "labels": {"pool": 3}}, format="json")
    assert response.status_code == 400
    assert response.json() == {"labels": ["must be an object mapping label names to string values"]}


def test_a_queue_is_addressed_by_its_name_as_well_as_its_id(admin_api, viewer_api, queue_tree):
    q = queue_tree["team-training"]
    by_name = viewer_api.get("/api/v1/queues/team-training/")
    assert by_name.status_code == 200
    assert by_name.json() == viewer_api.get(f"/api/v1/queues/{q.pk}/").json()
    assert admin_api.patch("/api/v1/queues/team-training/", {"gpu_quota": 6}, format="json").status_code == 200
    assert Queue.objects.get(pk=q.pk).gpu_quota == 6
    assert viewer_api.patch("/api/v1/queues/team-training/", {"gpu_quota": 1}, format="json").status_code == 403
    assert viewer_api.get("/api/v1/queues/no-such-queue/").status_code == 404
    assert viewer_api.get("/api/v1/queues/99999999999999999999999/").status_code == 404


@pytest.mark.django_db(transaction=True)  # the tree's version counts committed transactions
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the change counter's triggers are Postgres'")
def test_the_tree_is_computed_once_per_recorded_cycle_or_queue_change(viewer_api, queue_tree,
                                                                        django_assert_max_num_queries):
    from kaiweb.queues.models import Queue
    from tests.factories import QueueStatusFactory, SchedulingCycleFactory

    first = viewer_api.get("/api/v1/queues/tree/").json()
    with django_assert_max_num_queries(4):  # the caller's token, then the tree's version: served as computed
        again = viewer_api.get("/api/v1/queues/tree/").json()
    assert again == first

    leaf = Queue.objects.filter(children__isnull=True).order_by("name").first()
    QueueStatusFactory(queue=leaf, cycle=SchedulingCycleFactory(), allocated={"cpu": 0, "memory": 0, "gpu": 3},
                       running_workloads=2)
    recorded = viewer_api.get("/api/v1/queues/tree/").json()

    def find(nodes, name):
        for n in nodes:
            if n["name"] == name:
                return n
            found = find(n["children"], name)
            if found:
                return found
        return None

    assert find(recorded, leaf.name)["resources"]["gpu"]["allocated"] == 3
    assert find(recorded, leaf.name)["running_workloads"] == 2

    leaf.display_name = "Renamed leaf"
    leaf.save()
    assert find(viewer_api.get("/api/v1/queues/tree/").json(), leaf.name)["display_name"] == "Renamed leaf"
