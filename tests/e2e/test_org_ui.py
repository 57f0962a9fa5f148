"""Departments, projects and node pools from the browser: two pools, a department and two projects made in
the forms, the fair-share preview before each save, then work submitted through the simulated backend and
charged to the right project queue in the right pool after a cycle, as the preview said."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu.product"


@pytest.fixture
def cluster(transactional_db, settings):
    from kaiweb.cluster.models import SchedulingShard
    from tests.factories import ClusterFactory, NodeFactory

    settings.KAI_CLUSTER_BACKEND = "simulated"
    cluster = ClusterFactory(name="default", backend="simulated")
    SchedulingShard.objects.get_or_create(cluster=cluster, name="default")
    for i in range(2):
        for product in ("H100", "A100"):
            NodeFactory(cluster=cluster, name=f"{product.lower()}-{i}", labels={GPU: product}, gpu_product=product,
                        allocatable_gpu=8, allocatable_cpu=64_000, allocatable_memory=512 * 2**30)
    return cluster


def add_pool(page, url, name, value):
    page.goto(f"{url}/org/")
    page.click("#add-pool")
    page.fill("#id_name", name)
    page.fill("#id_label_key", GPU)
    page.fill("#id_label_value", value)
    page.click("#save-pool")
    expect(page.locator("#pool-phase")).to_have_text("Ready")
    expect(page.locator("#pool-nodes")).to_contain_text(f"{name}-0")


def fill_pool_row(page, pool, deserved, limit):
    page.check(f"#id_q-{pool}-on")
    page.fill(f"#id_q-{pool}-gpu-deserved", str(deserved))
    page.fill(f"#id_q-{pool}-gpu-limit", str(limit))


def preview_cell(page, pool, queue, column):
    """The preview table's cell of a queue: column 1 is GPU now, 2 GPU after."""
    return page.locator(f'table.preview-table[data-pool="{pool}"] tr[data-queue="{queue}"] td').nth(column)


def submit(cluster, project, pool, gpus):
    from kaiweb.cluster.backends.simulated import SimulatedGateway
    from kaiweb.org.choices import NODE_POOL_LABEL
    from scheduler_core.sim.traces import Job

    jobs = [Job(job_id=f"{project}-{pool}-{i}", duration=3600, num_pods=1, gpu_per_pod=g, cpu_millis_per_pod=1000,
                memory_bytes_per_pod=2**30, queue=f"{project}-{pool}", labels={NODE_POOL_LABEL: pool},
                namespace=f"kai-{project}") for i, g in enumerate(gpus)]
    SimulatedGateway(cluster).submit(jobs)


def test_a_platform_admin_builds_the_org_in_the_browser_and_work_is_charged_per_pool_as_previewed(
        page, live_server, cluster, platform_admin, login, shot):
    from kaiweb.org.models import NodePool
    from kaiweb.scheduling.cycle import run_and_record_cycle
    from kaiweb.workloads.models import Pod

    url = live_server.url
    login(page, platform_admin)
    add_pool(page, url, "h100", "H100")
    shot(page, "pool")
    add_pool(page, url, "a100", "A100")

    # the department: 8 H100s guaranteed (16 at most), 8 A100s (no ceiling); preview first, then save
    page.goto(f"{url}/org/")
    page.click("#add-department")
    page.fill("#id_name", "research")
    fill_pool_row(page, "h100", 8, 16)
    fill_pool_row(page, "a100", 8, -1)
    page.click("#preview-owner")
    expect(page.locator('table.preview-table[data-pool="h100"] tr[data-queue="research-h100"]')).to_contain_text("new")
    expect(page.locator('table.preview-table[data-pool="a100"] tr[data-queue="research-a100"]')).to_be_visible()
    shot(page, "department-preview")
    page.click("#save-owner")
    expect(page.locator(".messages")).to_contain_text("Department research saved")

    # the first project, then its work: 6 H100s and 2 A100s asked for
    page.goto(f"{url}/org/projects/-/add/?department=research")
    page.fill("#id_name", "vision")
    fill_pool_row(page, "h100", 4, 8)
    fill_pool_row(page, "a100", 4, -1)
    page.click("#preview-owner")
    expect(page.locator('table.preview-table[data-pool="h100"] tr[data-queue="vision-h100"]')).to_contain_text("new")
    page.click("#save-owner")
    expect(page.locator("h1")).to_contain_text("Project vision")
    submit(cluster, "vision", "h100", [4, 2])
    submit(cluster, "vision", "a100", [2])

    # the second project's preview shows every queue's share in each pool with it: vision's H100 share
    page.goto(f"{url}/org/projects/-/add/?department=research")
    page.fill("#id_name", "nlp")
    page.select_option("#id_department", "research")
    fill_pool_row(page, "h100", 4, 8)
    fill_pool_row(page, "a100", 2, 4)
    page.click("#preview-owner")
    expect(page.locator('table.preview-table[data-pool="h100"] tr[data-queue="nlp-h100"]')).to_contain_text("new")
    vision_h100_after = float(preview_cell(page, "h100", "vision-h100", 2).inner_text())
    vision_a100_after = float(preview_cell(page, "a100", "vision-a100", 2).inner_text())
    assert (vision_h100_after, vision_a100_after) == (6, 2)
    shot(page, "project-preview")
    page.click("#save-owner")
    expect(page.locator("h1")).to_contain_text("Project nlp")
    submit(cluster, "nlp", "a100", [1])

    for pool in NodePool.objects.select_related("shard"):
        run_and_record_cycle(pool.shard, trigger="manual")

    # charged to the right project queue in the right pool, as the preview said
    page.goto(f"{url}/org/projects/vision/")
    allocated = page.locator('#project-status tr[data-pool="h100"][data-resource="gpu"] td[data-figure="allocated"]')
    expect(allocated).to_have_text(f"{vision_h100_after:g}")
    expect(page.locator('#project-status tr[data-pool="a100"][data-resource="gpu"] td[data-figure="allocated"]')
           ).to_have_text(f"{vision_a100_after:g}")
    expect(page.locator('#project-status tr[data-pool="total"][data-resource="gpu"] td[data-figure="allocated"]')
           ).to_have_text("8")
    shot(page, "project-status")
    page.goto(f"{url}/org/")
    expect(page.locator('tr[data-owner="vision"] .pool-line[data-pool="h100"]')).to_contain_text(
        "h100: 4 guaranteed, 8 at most, 6 in use")
    expect(page.locator('tr[data-owner="nlp"] .pool-line[data-pool="a100"]')).to_contain_text(
        "a100: 2 guaranteed, 4 at most, 1 in use")
    expect(page.locator('tr[data-owner="research"] .pool-line[data-pool="a100"]')).to_contain_text("3 in use")
    shot(page, "org-tree")
    placed = Pod.objects.filter(workload__queue__name__in=["vision-h100", "vision-a100", "nlp-a100"]
                                ).select_related("node", "workload__queue")
    assert {(p.workload.queue.name, p.node.labels[GPU]) for p in placed} == {
        ("vision-h100", "H100"), ("vision-a100", "A100"), ("nlp-a100", "A100")}
