"""Usage charged to node pools, GPU types, departments and projects: accounted from running pods, then reported
by the usage page, its CSV and its JSON."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from kaiweb.cluster.models import SchedulingShard
from kaiweb.org import services
from kaiweb.queues.models import Queue
from kaiweb.reports import dimensions
from kaiweb.reports import services as report_services
from kaiweb.reports.compute import compute_lines
from kaiweb.reports.models import ReportDefinition
from kaiweb.usage import accounting
from kaiweb.workloads.choices import PodState, WorkloadState
from tests.factories import (
    ClusterFactory,
    NodeFactory,
    PodFactory,
    QueueFactory,
    UsageBucketFactory,
    WorkloadFactory,
)

pytestmark = pytest.mark.django_db

GPU_LABEL = "nvidia.com/gpu.product"
H100, A100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"


@pytest.fixture
def org_tree():
    """Pools h100 and a100 (the rest: default), department research (4 H100s guaranteed) with projects vision
    (2 H100s, 1 A100) and nlp (2 H100s), a hand-made top-level queue `legacy`; the nodes by name."""
    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    nodes = {
        "h1": NodeFactory(cluster=cluster, name="h1", labels={GPU_LABEL: H100}, gpu_product=H100),
        "a1": NodeFactory(cluster=cluster, name="a1", labels={GPU_LABEL: A100}, gpu_product=A100),
        "c1": NodeFactory(cluster=cluster, name="c1", labels={}, gpu_product=L4),
    }
    services.create_node_pool({"name": "h100", "label_key": GPU_LABEL, "label_value": H100})
    services.create_node_pool({"name": "a100", "label_key": GPU_LABEL, "label_value": A100})
    services.create_department({"name": "research", "queues": [{"pool": "h100", "gpu": {"deserved": 4, "limit": 8}}]})
    services.create_project({"name": "vision", "department": "research",
                             "queues": [{"pool": "h100", "gpu": {"deserved": 2, "limit": 6}},
                                        {"pool": "a100", "gpu": {"deserved": 1, "limit": -1}}]})
    services.create_project({"name": "nlp", "department": "research",
                             "queues": [{"pool": "h100", "gpu": {"deserved": 2, "limit": 8}}]})
    QueueFactory(name="legacy", parent=None, gpu_quota=1)
    return cluster, nodes, {q.name: q for q in Queue.objects.all()}


@pytest.fixture
def org_usage(org_tree):
    """Running pods of every leaf queue, accounted for one minute two hours ago."""
    cluster, nodes, queues = org_tree
    for queue, node, gpus in (("vision-h100", "h1", 2), ("vision-a100", "a1", 1), ("nlp-h100", "h1", 3),
                              ("legacy", "c1", 1)):
        w = WorkloadFactory(cluster=cluster, queue=queues[queue], namespace=f"ns-{queue}",
                            state=WorkloadState.RUNNING)
        PodFactory(workload=w, node=nodes[node], state=PodState.RUNNING, gpu=gpus, cpu=1000 * gpus)
    accounting.account_usage(at=timezone.now() - timedelta(hours=2))
    return queues


def _totals(client, query: str) -> dict[str, float]:
    response = client.get(f"/usage/export.json?window=24h&{query}")
    assert response.status_code == 200, response.content
    return {t["name"]: t["value"] for t in response.json()["totals"]}


def _minutes(**gpus: float) -> dict[str, float]:
    """GPU-hours of holding these GPUs for the one accounted minute (as the JSON rounds them)."""
    return {name: pytest.approx(n / 60, abs=1e-4) for name, n in gpus.items()}


def test_each_queue_is_placed_in_its_pool_department_and_project(org_usage):
    services.create_project({"name": "solo", "queues": [{"pool": "a100", "gpu": {"deserved": 1, "limit": -1}}]})
    QueueFactory(name="solo-sandbox", parent=Queue.objects.get(name="solo-a100"))  # made by hand under it
    places = dimensions.places()
    got = {q.name: places[q.pk] for q in Queue.objects.all()}
    assert got["solo-a100"] == dimensions.QueuePlace("a100", dimensions.NO_DEPARTMENT, "solo")
    assert got["solo-sandbox"] == dimensions.QueuePlace("default", dimensions.NO_DEPARTMENT, "solo")
    assert got["vision-h100"] == dimensions.QueuePlace("h100", "research", "vision")
    assert got["vision-a100"] == dimensions.QueuePlace("a100", "research", "vision")  # no research queue in a100
    assert got["research-h100"] == dimensions.QueuePlace("h100", "research", dimensions.NO_PROJECT)
    # A hand-made queue keeps the department reports gave it before the org layer: its top-level queue.
    assert got["legacy"] == dimensions.QueuePlace("default", "legacy", dimensions.NO_PROJECT)


def test_usage_per_pool_department_project_and_gpu_type_adds_up(client, viewer, org_usage):
    client.force_login(viewer)
    assert _totals(client, "group=pool") == _minutes(h100=5, a100=1, default=1)
    assert _totals(client, "group=department") == _minutes(research=6, legacy=1)
    assert _totals(client, "group=project") == {**_minutes(vision=3, nlp=3), **_minutes(**{"(no project)": 1})}
    assert _totals(client, "group=gpu_type") == _minutes(**{H100: 5, A100: 1, L4: 1})
    assert _totals(client, "group=queue") == _minutes(**{"vision-h100": 2, "vision-a100": 1, "nlp-h100": 3, "legacy": 1})


def test_filters_keep_one_pool_department_project_or_gpu_type(client, viewer, org_usage):
    client.force_login(viewer)
    assert _totals(client, "group=project&pool=h100") == _minutes(vision=2, nlp=3)
    assert _totals(client, "group=pool&department=research") == _minutes(h100=5, a100=1)
    assert _totals(client, "group=pool&project=vision") == _minutes(h100=2, a100=1)
    assert _totals(client, f"group=queue&gpu_type={A100}") == _minutes(**{"vision-a100": 1})
    assert _totals(client, f"group=gpu_type&gpu_type={H100}&department=research") == _minutes(**{H100: 5})
    body = client.get(f"/usage/export.json?window=24h&group=pool&project=vision&gpu_type={H100}").json()
    assert body["filters"] == {"project": "vision", "gpu_type": H100}
    assert body["total"] == pytest.approx(2 / 60, abs=1e-4)


def test_cpu_usage_is_charged_to_the_gpu_type_of_its_nodes(client, viewer, org_usage):
    client.force_login(viewer)
    # cores: 2 + 3 on the H100 node, 1 on the A100 node, 1 on the L4 node, for one minute (core-hours)
    assert _totals(client, "resource=cpu&group=gpu_type") == _minutes(**{H100: 5, A100: 1, L4: 1})


def test_a_filter_that_names_nothing_known_or_mixes_splits_is_refused_by_name(client, viewer, org_usage):
    client.force_login(viewer)
    response = client.get("/usage/export.json?window=24h&pool=h200")
    assert response.status_code == 400
    assert "pool" in response.json()
    response = client.get(f"/usage/export.json?window=24h&group=namespace&gpu_type={H100}")
    assert response.status_code == 400
    assert "namespace" in response.json()["gpu_type"][0]
    response = client.get("/usage/export.csv?window=24h&project=nobody")
    assert response.status_code == 400
    assert b"project" in response.content


def test_csv_and_page_name_the_grouping(client, viewer, org_usage):
    client.force_login(viewer)
    rows = list(csv.reader(io.StringIO(client.get("/usage/export.csv?window=24h&group=pool").content.decode())))
    assert rows[0][0] == "pool"
    assert {r[0]: float(r[3]) for r in rows[1:] if r[1] == "total"} == _minutes(h100=5, a100=1, default=1)
    page = client.get("/usage/?window=24h&group=pool&department=research").content.decode()
    assert "<th>Node pool</th>" in page
    assert "h100" in page
    assert 'href="/queues/h100/"' not in page  # a pool is not a queue


def test_old_department_reports_still_read_a_hand_made_tree(client, viewer, org_usage):
    """A tree made without the org layer: its top-level queues stay the departments."""
    client.force_login(viewer)
    top = org_usage["legacy"]
    team = QueueFactory(name="legacy-team", parent=top)
    w = WorkloadFactory(queue=team, state=WorkloadState.RUNNING)
    PodFactory(workload=w, state=PodState.RUNNING, gpu=4)
    accounting.account_usage(at=timezone.now() - timedelta(hours=1))
    totals = _totals(client, "group=department")
    assert totals["legacy"] == pytest.approx(4 / 60, abs=1e-4)  # its team's minute (reports read leaves only)
    assert totals["research"] == pytest.approx(12 / 60, abs=1e-4)  # its pods ran through both minutes


# ------------------------------------------------------------------------------------------ scheduled reports

WEEK = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday


@pytest.fixture
def org_week(org_tree):
    """An hour of the last week: vision holds 6 H100s (research guarantees 4 there), its A100 idle; legacy 1 GPU."""
    _, _, queues = org_tree
    start = WEEK - timedelta(days=3)
    for m in range(60):
        at = start + timedelta(minutes=m)
        UsageBucketFactory(queue=queues["vision-h100"], start=at, width_seconds=60, value=6 * 60.0,
                           by_gpu_model={H100: 6 * 60.0})
        UsageBucketFactory(queue=queues["legacy"], start=at, width_seconds=60, value=60.0, by_gpu_model={L4: 60.0})
    return queues


def _run(scope: str, queue=None):
    definition = ReportDefinition.objects.create(name=f"{scope} weekly", period="weekly", scope=scope, queue=queue,
                                                 recipients=[], formats=["csv", "json"])
    run = report_services.run_report(definition, WEEK - timedelta(days=7), WEEK, now=WEEK, send=False)
    assert run.status == "succeeded", run.error
    return run


def test_a_cluster_report_has_a_line_per_department_over_quota_per_pool(org_week):
    run = _run("cluster")
    lines = {line["name"]: line for line in run.lines["lines"]}
    assert set(lines) == {"research", "legacy"}
    research = lines["research"]
    assert research["gpu_hours_allocated"] == pytest.approx(6.0)
    assert research["gpu_hours_by_pool"] == {"h100": pytest.approx(6.0)}
    assert research["gpu_hours_deserved"] == pytest.approx((4 + 1) * 168)  # its H100 queue and vision's A100 one
    # 2 H100s over research's 4 for the hour, though its A100 quota sat idle (6 < 4 + 1 would say 1).
    assert research["gpu_hours_over_quota"] == pytest.approx(2.0)
    assert lines["legacy"]["gpu_hours_by_pool"] == {"default": pytest.approx(1.0)}
    assert run.lines["total"]["gpu_hours_by_pool"] == {"default": pytest.approx(1.0), "h100": pytest.approx(6.0)}
    rows = {r["line"]: r for r in csv.DictReader(io.StringIO(run.csv_content))}
    assert float(rows["research"]["gpu_hours_pool[h100]"]) == pytest.approx(6.0)
    assert float(rows["total"]["gpu_hours_pool[default]"]) == pytest.approx(1.0)


def test_a_department_report_takes_the_departments_queues_in_every_pool(org_week):
    run = _run("department", org_week["research-h100"])
    lines = {line["name"]: line for line in run.lines["lines"]}
    assert set(lines) == {"vision-h100", "nlp-h100", "vision-a100"}
    assert lines["vision-h100"]["gpu_hours_over_quota"] == pytest.approx(4.0)  # 6 held, 2 guaranteed
    assert lines["vision-a100"]["gpu_hours_allocated"] == 0


def test_a_run_stored_before_pools_still_renders(client, viewer, org_week):
    run = _run("cluster")
    for line in [*run.lines["lines"], run.lines["total"]]:
        del line["gpu_hours_by_pool"]
    for h in run.inputs["hourly"]:
        del h["by_pool"]
    run.csv_content = ""
    run.save()
    client.force_login(viewer)
    response = client.get(f"/reports/runs/{run.pk}/csv/")
    assert response.status_code == 200
    header = response.content.decode().splitlines()[0]
    assert "gpu_hours_allocated" in header
    assert "gpu_hours_pool[" not in header
    assert client.get(f"/reports/runs/{run.pk}/").status_code == 200
    assert compute_lines(run.inputs)["total"]["gpu_hours_by_pool"] == {}


# ------------------------------------------------------------------------------------------ the API


def test_the_api_gives_each_queues_place_and_filters_by_it(viewer_api, org_usage):
    start, end = (timezone.now() - timedelta(days=1)).isoformat(), timezone.now().isoformat()
    rows = viewer_api.get("/api/v1/usage/summary/", {"start": start, "end": end, "resource": "gpu",
                                                     "project": "vision"}).json()
    assert [(r["queue"], r["pool"], r["department"], r["project"], r["value"]) for r in rows] == [
        ("vision-a100", "a100", "research", "vision", 60.0), ("vision-h100", "h100", "research", "vision", 120.0)]
    rows = viewer_api.get("/api/v1/usage/summary/", {"start": start, "end": end, "resource": "gpu", "pool": "h100",
                                                     "department": "research"}).json()
    assert {r["queue"] for r in rows} == {"research-h100", "vision-h100", "nlp-h100"}  # the department's own too
    buckets = viewer_api.get("/api/v1/usage/", {"pool": "a100", "resource": "cpu"}).json()["results"]
    assert [(b["queue"], b["by_gpu_model"]) for b in buckets] == [("vision-a100", {A100: 60.0 * 1000})]
    assert viewer_api.get("/api/v1/usage/", {"project": "nobody"}).json()["results"] == []
