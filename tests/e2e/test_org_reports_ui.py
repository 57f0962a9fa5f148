"""Node pools, departments and projects in the usage report and the what-if, in a real browser."""

from __future__ import annotations

import datetime as dt

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

GPU_LABEL = "nvidia.com/gpu.product"


@pytest.fixture(autouse=True)
def small_estimates(settings):
    """The start-time estimator beside the replay, at a small budget (its figures are tested elsewhere)."""
    settings.KAI_ETA_SAMPLES = 4
    settings.KAI_ETA_MAX_CYCLES = 40


@pytest.fixture
def research(db):
    """Pools h100 and a100, department research with projects vision (H100, A100) and nlp (H100); yesterday
    vision held 6 H100s and 2 A100s for an hour and nlp 2 H100s; 12 short jobs of each project waited on H100s."""
    from django.utils import timezone

    from kaiweb.cluster.models import SchedulingShard
    from kaiweb.org import services
    from kaiweb.org.choices import NODE_POOL_LABEL
    from kaiweb.queues.models import Queue
    from kaiweb.usage.models import UsageBucket
    from tests.factories import ClusterFactory, NodeFactory, PodFactory, WorkloadFactory

    cluster = ClusterFactory()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    NodeFactory(cluster=cluster, name="h1", labels={GPU_LABEL: "H100"})
    NodeFactory(cluster=cluster, name="a1", labels={GPU_LABEL: "A100"}, gpu_product="NVIDIA-A100-SXM4-80GB")
    services.create_node_pool({"name": "h100", "label_key": GPU_LABEL, "label_value": "H100"})
    services.create_node_pool({"name": "a100", "label_key": GPU_LABEL, "label_value": "A100"})
    unlimited = {"deserved": 0, "limit": -1}

    def entry(pool: str, gpus: int) -> dict:
        return {"pool": pool, "gpu": {"deserved": gpus, "limit": -1}, "cpu": unlimited, "memory": unlimited}

    services.create_department({"name": "research", "queues": [entry("h100", 6)]})
    services.create_project({"name": "vision", "department": "research",
                             "queues": [entry("h100", 2), entry("a100", 4)]})
    services.create_project({"name": "nlp", "department": "research", "queues": [entry("h100", 4)]})
    queues = {q.name: q for q in Queue.objects.all()}
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=20)
    for queue, gpus in (("vision-h100", 6), ("vision-a100", 2), ("nlp-h100", 2)):
        UsageBucket.objects.create(queue=queues[queue], resource="gpu", start=hour, width_seconds=3600,
                                   value=gpus * 3600.0)
    submit = timezone.now().replace(microsecond=0) - dt.timedelta(hours=3)
    for queue in ("vision-h100", "nlp-h100"):
        for i in range(12):
            w = WorkloadFactory(cluster=cluster, queue=queues[queue], name=f"{queue}-{i:02d}", state="pending",
                                labels={NODE_POOL_LABEL: "h100"}, submitted_at=submit + dt.timedelta(seconds=i))
            PodFactory(workload=w, name=f"{queue}-{i:02d}-0", gpu=1, duration_seconds=600)
    return queues


def test_usage_of_a_department_per_node_pool_and_per_project(page, live_server, research, viewer, login, shot):
    login(page, viewer)
    page.goto(live_server.url + "/usage/")
    page.select_option("#id_window", "24h")
    page.select_option("#id_group", "pool")
    page.select_option("#id_department", "research")
    page.click("#usage-form button[type=submit]")
    expect(page.locator("#usage-table thead")).to_contain_text("Node pool")
    rows = page.locator("#usage-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("h100")
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("8.0")
    expect(rows.nth(1)).to_contain_text("a100")
    expect(rows.nth(1).locator("td").nth(1)).to_have_text("2.0")
    shot(page, "usage-research-per-pool")
    page.select_option("#id_group", "project")
    page.select_option("#id_pool", "h100")
    page.click("#usage-form button[type=submit]")
    expect(page.locator("#usage-table thead")).to_contain_text("Project")
    expect(page.locator("#usage-table tbody tr")).to_have_count(2)
    expect(page.locator("#usage-table tbody tr").nth(0)).to_contain_text("vision")
    expect(page.locator("#usage-table tfoot")).to_contain_text("8.0")


def test_a_whatif_gives_a_project_more_h100s_and_shows_that_pool(page, live_server, research, viewer, login, shot):
    login(page, viewer)
    page.goto(live_server.url + "/what-if/")
    page.select_option("#id_mode", "owner")
    page.select_option("#id_owner", "project:vision")
    page.wait_for_load_state("networkidle")  # the form came back for that owner
    page.select_option("#id_pool", "h100")
    expect(page.locator("#id_gpu_quota")).to_have_value("2")  # vision's H100 quota now, filled in
    page.fill("#id_gpu_quota", "6")
    page.click("#run-whatif")
    expect(page.locator("#whatif-pool")).to_contain_text("In node pool h100", timeout=60_000)
    expect(page.locator("#whatif-summary-body")).to_contain_text("vision-h100.gpu_quota")
    expect(page.locator('#whatif-table [data-queue="vision-h100"]')).to_be_visible()
    shot(page, "whatif-vision-h100")
