"""The org API: node pools, departments and projects by name; bad input named; roles; KRM's quota status."""

from __future__ import annotations

import pytest

from kaiweb.audit.models import AuditEntry
from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import services
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.workloads.choices import PodState, WorkloadState
from tests.factories import ClusterFactory, NodeFactory, PodFactory, UserFactory, WorkloadFactory

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu.product"


@pytest.fixture
def cluster():
    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    NodeFactory(cluster=cluster, name="h1", labels={GPU: "H100"}, gpu_product="H100")
    NodeFactory(cluster=cluster, name="h2", labels={GPU: "H100"}, gpu_product="H100")
    NodeFactory(cluster=cluster, name="a1", labels={GPU: "A100"}, gpu_product="A100")
    return cluster


@pytest.fixture
def org(cluster):
    services.create_node_pool({"name": "h100", "label_key": GPU, "label_value": "H100"})
    services.create_node_pool({"name": "a100", "label_key": GPU, "label_value": "A100"})
    services.create_department({"name": "research", "queues": [
        {"pool": "h100", "gpu": {"deserved": 8, "limit": 16, "over_quota_weight": 1}},
        {"pool": "a100", "gpu": {"deserved": 4, "limit": -1, "over_quota_weight": 1}}]})
    services.create_project({"name": "vision", "department": "research", "queues": [
        {"pool": "h100", "gpu": {"deserved": 4, "limit": 8, "over_quota_weight": 1}},
        {"pool": "a100", "gpu": {"deserved": 2, "limit": -1, "over_quota_weight": 1}}]})
    return cluster


def _client(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def department_admin(org):
    user = UserFactory(username="dept-admin")
    Department.objects.get(name="research").admins.add(user)
    return user


def test_pools_departments_and_projects_are_listed_and_read_by_name(org, viewer_api):
    pools = viewer_api.get("/api/v1/node-pools/").json()
    assert [p["name"] for p in pools["results"]] == ["a100", "default", "h100"]
    h100 = viewer_api.get("/api/v1/node-pools/h100/").json()
    assert (h100["label_key"], h100["label_value"], h100["phase"]) == (GPU, "H100", "Ready")
    assert (h100["node_count"], h100["gpu_products"], h100["shard"]) == (2, ["H100"], "h100")
    research = viewer_api.get("/api/v1/departments/research/").json()
    assert research["projects"] == ["vision"]
    assert {e["pool"]: e["gpu"]["deserved"] for e in research["queues"]} == {"h100": 8, "a100": 4}
    vision = viewer_api.get("/api/v1/projects/vision/").json()
    assert (vision["department"], vision["namespace"]) == ("research", "kai-vision")
    assert {e["pool"]: e["name"] for e in vision["queues"]} == {"h100": "vision-h100", "a100": "vision-a100"}


def test_a_project_is_created_patched_and_deleted_through_the_services_and_audited(org, admin_api):
    created = admin_api.post("/api/v1/projects/", {
        "name": "nlp", "department": "research", "namespace": "nlp-team", "enforce_kai_scheduler": True,
        "default_node_pools": ["a100"],
        "queues": [{"pool": "a100", "gpu": {"deserved": 1, "limit": 4, "over_quota_weight": 2}}]}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["namespace"], body["enforce_kai_scheduler"], body["default_node_pools"]) == (
        "nlp-team", True, ["a100"])
    assert Queue.objects.get(name="nlp-a100").parent.name == "research-a100"
    patched = admin_api.patch("/api/v1/projects/nlp/", {"queues": [
        {"pool": "a100", "gpu": {"deserved": 2, "limit": 4, "over_quota_weight": 2}}]}, format="json")
    assert patched.status_code == 200, patched.content
    assert Queue.objects.get(name="nlp-a100").gpu_quota == 2
    assert AuditEntry.objects.filter(object_repr__contains="nlp", action="update").exists()
    assert admin_api.delete("/api/v1/projects/nlp/").status_code == 204
    assert not Project.objects.filter(name="nlp").exists()
    assert not Queue.objects.filter(name="nlp-a100").exists()


def test_a_pool_is_created_with_its_shard_settings_and_read_back(cluster, admin_api):
    answer = admin_api.post("/api/v1/node-pools/", {
        "name": "h100", "label_key": GPU, "label_value": "H100", "gpu_placement": "spread", "k_value": 0.5,
        "reclaim_min_runtime": "00:10:00"}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["gpu_placement"], body["k_value"], body["reclaim_min_runtime"], body["phase"]) == (
        "spread", 0.5, "00:10:00", "Ready")
    assert NodePool.objects.get(name="h100").shard.gpu_placement == "spread"


@pytest.mark.parametrize(("path", "body", "field", "words"), [
    ("/api/v1/projects/", {"name": "x", "colour": "red"}, "colour", "not a field"),
    ("/api/v1/projects/", {"name": "Bad_Name"}, "name", ""),
    ("/api/v1/projects/", {"name": "x", "queues": "h100"}, "queues", ""),
    ("/api/v1/projects/", {"name": "x", "queues": [{"pool": "h100"}] * 65}, "queues", "64"),
    ("/api/v1/projects/", {"name": "x", "queues": [{"pool": "nowhere"}]}, "queues", "nowhere"),
    ("/api/v1/projects/", {"name": "x", "queues": [{"pool": "h100", "gpu": {"deserved": "lots"}}]}, "queues",
     "number"),
    ("/api/v1/projects/", {"name": "x", "queues": [{"pool": "h100", "gpu": {"deserved": 4, "limit": 2}}]}, "queues",
     "limit"),
    ("/api/v1/projects/", {"name": "x", "queues": [{"pool": "h100", "disk": {}}]}, "queues", "disk"),
    ("/api/v1/projects/", {"name": "x", "enforce_kai_scheduler": "maybe"}, "enforce_kai_scheduler", ""),
    ("/api/v1/projects/", {"name": "x", "default_node_pools": "h100"}, "default_node_pools", ""),
    ("/api/v1/projects/", {"name": "x", "default_node_pools": ["p"] * 17}, "default_node_pools", "16"),
    ("/api/v1/projects/", {"name": "x", "default_node_pools": ["nowhere"]}, "default_node_pools", "nowhere"),
    ("/api/v1/projects/", {"name": "x", "department": "nowhere"}, "department", "does not exist"),
    ("/api/v1/projects/", {"name": "x", "namespace": "Not A Namespace"}, "namespace", ""),
    ("/api/v1/departments/", {"name": "x", "admins": ["nobody-such"]}, "admins", "no user named nobody-such"),
    ("/api/v1/departments/", {"name": "x", "admins": "viewer"}, "admins", ""),
    ("/api/v1/departments/", {"name": "x", "admins": ["a"] * 201}, "admins", "200"),
    ("/api/v1/departments/", {"name": "x", "projects": ["vision"]}, "projects", "not a field"),
    ("/api/v1/node-pools/", {"name": "x"}, "label_key", "label"),
    ("/api/v1/node-pools/", {"name": "x", "label_key": GPU, "label_value": "B200", "k_value": -1}, "k_value", ""),
    ("/api/v1/node-pools/", {"name": "x", "label_key": GPU, "label_value": "B200", "gpu_placement": "random"},
     "gpu_placement", ""),
])
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(org, admin_api, path, body, field, words):
    before = (Project.objects.count(), Department.objects.count(), NodePool.objects.count(), Queue.objects.count())
    answer = admin_api.post(path, body, format="json")
    assert answer.status_code == 400, answer.content
    errors = answer.json()
    assert field in errors, errors
    assert words.lower() in " ".join(errors[field]).lower()
    assert (Project.objects.count(), Department.objects.count(), NodePool.objects.count(),
            Queue.objects.count()) == before


def test_taken_names_are_a_409(org, admin_api):
    assert admin_api.post("/api/v1/projects/", {"name": "vision"}, format="json").status_code == 409
    assert admin_api.post("/api/v1/departments/", {"name": "research"}, format="json").status_code == 409
    answer = admin_api.post("/api/v1/node-pools/", {"name": "h100", "label_key": "x", "label_value": "y"},
                            format="json")
    assert answer.status_code == 409
    assert "name" in answer.json()
    answer = admin_api.post("/api/v1/node-pools/", {"name": "x", "label_key": GPU, "label_value": "H100"},
                            format="json")
    assert answer.status_code == 409
    assert "node pool h100 already selects" in answer.json()["label_value"][0]


def test_deleting_a_project_with_running_work_is_refused_with_the_reason(org, admin_api):
    queue = Queue.objects.get(name="vision-h100")
    PodFactory(workload=WorkloadFactory(cluster=org, queue=queue, state=WorkloadState.RUNNING, name="batch-train"),
               state=PodState.RUNNING)
    answer = admin_api.delete("/api/v1/projects/vision/")
    assert answer.status_code == 400
    assert "still has 1 workload(s)" in answer.json()["project"][0]
    assert Project.objects.filter(name="vision").exists()


def test_a_department_admin_runs_the_departments_projects_only(org, department_admin):
    api = _client(department_admin)
    made = api.post("/api/v1/projects/", {"name": "nlp", "department": "research", "queues": [
        {"pool": "h100", "gpu": {"deserved": 1, "limit": 2, "over_quota_weight": 1}}]}, format="json")
    assert made.status_code == 201, made.content
    assert api.patch("/api/v1/projects/vision/", {"display_name": "Vision"}, format="json").status_code == 200
    # not the department's own numbers, not pools, not projects outside the department
    assert api.patch("/api/v1/departments/research/", {"display_name": "R"}, format="json").status_code == 403
    assert api.post("/api/v1/node-pools/", {"name": "b", "label_key": "k", "label_value": "v"},
                    format="json").status_code == 403
    assert api.post("/api/v1/projects/", {"name": "solo"}, format="json").status_code == 403
    assert api.patch("/api/v1/projects/nlp/", {"department": ""}, format="json").status_code == 403
    services.create_project({"name": "other"})
    assert api.patch("/api/v1/projects/other/", {"display_name": "O"}, format="json").status_code == 403
    assert api.delete("/api/v1/projects/other/").status_code == 403
    assert api.delete("/api/v1/projects/nlp/").status_code == 204


def test_admins_and_members_are_set_by_username_and_audited(org, admin_api, viewer):
    answer = admin_api.patch("/api/v1/departments/research/", {"admins": ["viewer"]}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["admins"] == ["viewer"]
    assert list(Department.objects.get(name="research").admins.all()) == [viewer]
    entry = AuditEntry.objects.filter(object_repr="research").latest("at")
    assert (entry.before, entry.after) == ({"admins": []}, {"admins": ["viewer"]})
    made = admin_api.post("/api/v1/projects/", {"name": "nlp", "members": ["viewer"]}, format="json")
    assert made.json()["members"] == ["viewer"]
    # a bad name leaves the project as it was: the write and the people go together
    bad = admin_api.patch("/api/v1/projects/nlp/", {"display_name": "NLP", "members": ["ghost"]}, format="json")
    assert bad.status_code == 400
    assert Project.objects.get(name="nlp").display_name == ""


def test_members_and_viewers_read_but_change_nothing(org, viewer_api, viewer):
    Project.objects.get(name="vision").members.add(viewer)
    member = _client(viewer)
    assert member.get("/api/v1/projects/vision/").json()["members"] == ["viewer"]
    assert member.patch("/api/v1/projects/vision/", {"display_name": "V"}, format="json").status_code == 403
    assert member.delete("/api/v1/projects/vision/").status_code == 403
    assert viewer_api.post("/api/v1/departments/", {"name": "d"}, format="json").status_code == 403


def test_the_signed_out_get_nothing(org, api_client):
    assert api_client.get("/api/v1/projects/").status_code in (401, 403)


def test_lists_page_within_the_bound(org, admin_api, settings):
    for i in range(3):
        services.create_project({"name": f"p{i}"})
    page = admin_api.get("/api/v1/projects/?limit=2").json()
    assert (page["count"], len(page["results"])) == (4, 2)
    assert page["next"]


def test_a_projects_status_counts_requested_allocated_and_non_preemptible_per_pool_and_in_total(org, viewer_api):
    PriorityClass.objects.create(name="vip-serve", value=125, preemptible=False)
    PriorityClass.objects.create(name="batch-train", value=50, preemptible=True)
    h100, a100 = Queue.objects.get(name="vision-h100"), Queue.objects.get(name="vision-a100")
    running = WorkloadFactory(cluster=org, queue=h100, state=WorkloadState.RUNNING,
                              priority_class=PriorityClass.objects.get(name="vip-serve"))
    PodFactory(workload=running, state=PodState.RUNNING, gpu=2, cpu=8000, memory=2_000_000_000)
    PodFactory(workload=running, state=PodState.RUNNING, gpu=0, gpu_fraction=0.5, cpu=1000, memory=0)
    train = WorkloadFactory(cluster=org, queue=h100, state=WorkloadState.RUNNING,
                            priority_class=PriorityClass.objects.get(name="batch-train"))
    PodFactory(workload=train, state=PodState.RUNNING, gpu=1, cpu=0, memory=0)
    waiting = WorkloadFactory(cluster=org, queue=a100, state=WorkloadState.PENDING)
    PodFactory(workload=waiting, state=PodState.PENDING, gpu=3, cpu=0, memory=0)
    done = WorkloadFactory(cluster=org, queue=a100, state=WorkloadState.COMPLETED)
    PodFactory(workload=done, state=PodState.SUCCEEDED, gpu=5)
    status = viewer_api.get("/api/v1/projects/vision/").json()["status"]
    h = status["pools"]["h100"]
    assert (h["deserved"]["gpu"], h["limit"]["gpu"]) == (4, 8)
    assert h["requested"] == {"gpu": 3.5, "cpu": 9000, "memory": 2000}
    assert h["allocated"] == {"gpu": 3.5, "cpu": 9000, "memory": 2000}
    assert h["allocated_non_preemptible"]["gpu"] == 2.5
    a = status["pools"]["a100"]
    assert (a["requested"]["gpu"], a["allocated"]["gpu"]) == (3, 0)
    total = status["total"]
    assert (total["deserved"]["gpu"], total["limit"]["gpu"]) == (6, -1)
    assert (total["requested"]["gpu"], total["allocated"]["gpu"], total["allocated_non_preemptible"]["gpu"]) == (
        6.5, 3.5, 2.5)
