"""The org from the browser on a real API server: two node pools, a department and two projects made in the
forms with the fair-share preview, then pods submitted through the API server into the projects'
namespaces, placed by the node-pool assigner and scheduled by each pool's shard, charged and placed as the
preview said."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from devkube.localkube import LocalKube
from tests.e2e.test_org_ui import add_pool
from tests.kube.fixtures import kwok_scenario_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.kube]

GPU = "nvidia.com/gpu.product"


@pytest.fixture(scope="module")
def kwok_cluster() -> Iterator[LocalKube]:
    yield from kwok_scenario_cluster()


@pytest.fixture
def kube_org(kwok_cluster: LocalKube, transactional_db: Any, settings: Any,
             monkeypatch: pytest.MonkeyPatch) -> Any:
    """The product on the Kubernetes backend against the KWOK cluster: two H100 and two A100 nodes of 8 GPUs,
    the default shard, the nodes mirrored."""
    from devkube.e2e import applier_for, shard_object
    from kaiweb.cluster import mirror
    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
    from tests.org_scenarios.build import node

    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    settings.KAI_KUBERNETES_HOST = ""
    monkeypatch.setenv("KUBECONFIG", str(kwok_cluster.kubeconfig))
    # Nodes carrying only their GPU product: the pools' labels are the org's to write.
    nodes = [node(f"{product.lower()}-{i}", product, None) for product in ("H100", "A100") for i in range(2)]
    applier = applier_for(kwok_cluster)
    applier.apply(nodes)
    applier.apply_one(shard_object({}))
    cluster = mirror.kubernetes_cluster()
    gateway = KubernetesGateway(kwok_cluster.api_client(), request_timeout=10.0)
    mirror.sync_full(gateway, cluster)
    return gateway


def add_owner(page: Any, url: str, path: str, name: str, rows: dict[str, tuple[float, float]]) -> None:
    page.goto(f"{url}{path}")
    page.fill("#id_name", name)
    if "department=" in path:
        page.select_option("#id_department", path.rsplit("=", 1)[1])
    for pool, (deserved, limit) in rows.items():
        page.check(f"#id_q-{pool}-on")
        page.fill(f"#id_q-{pool}-gpu-deserved", str(deserved))
        page.fill(f"#id_q-{pool}-gpu-limit", str(limit))
    page.click("#preview-owner")
    expect(page.locator(f'table.preview-table[data-pool="h100"] tr[data-queue="{name}-h100"]')).to_contain_text("new")


def after(page: Any, pool: str, queue: str) -> float:
    """The preview's GPU share of a queue in a pool with the change."""
    return float(page.locator(f'table.preview-table[data-pool="{pool}"] tr[data-queue="{queue}"] td').nth(2)
                 .inner_text())


def pod(namespace: str, name: str, gpus: int, pools: str) -> dict[str, Any]:
    """A pod naming no queue and no node pool but the pools it asks for, as a team member writes it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {"kai.scheduler/node-pools": pools}},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "ubuntu",
                                     "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": str(gpus)},
                                                   "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def test_an_org_built_in_the_browser_places_and_charges_pods_from_the_api_server_as_previewed(
        page: Any, live_server: Any, kube_org: Any, kwok_cluster: LocalKube, platform_admin: Any, login: Any,
        shot: Any) -> None:
    from kubernetes import client

    from devkube.org_scenarios import every_shard_cycle, every_shard_invariants
    from kaiweb.org import krm_sync

    url = live_server.url
    login(page, platform_admin)
    add_pool(page, url, "h100", "H100")
    add_pool(page, url, "a100", "A100")
    add_owner(page, url, "/org/departments/-/add/", "research", {"h100": (8, 16), "a100": (8, -1)})
    page.click("#save-owner")
    expect(page.locator(".messages")).to_contain_text("Department research saved")
    add_owner(page, url, "/org/projects/-/add/?department=research", "vision", {"h100": (4, 8), "a100": (4, -1)})
    page.click("#save-owner")
    expect(page.locator("h1")).to_contain_text("Project vision")

    # What the org gives the cluster (the org.publish task's work): the pools' shards, the queues, the
    # project's namespace and the nodes' pool labels.
    report = krm_sync.publish(kube_org)
    assert report.problems == []
    core = client.CoreV1Api(kwok_cluster.api_client())
    assert core.read_namespace("kai-vision").metadata.labels["kai/project"] == "vision"
    assert core.read_node("h100-0").metadata.labels["kai.scheduler/node-pool"] == "h100"
    assert core.read_node("a100-0").metadata.labels["kai.scheduler/node-pool"] == "a100"

    # Work through the API server, naming pools, no queue: vision asks for 4 + 2 H100s and 2 A100s.
    violations: list[str] = []

    def cycles(n: int) -> None:
        for _ in range(n):
            violations.extend(every_shard_invariants(every_shard_cycle()))
            kwok_cluster.wait_for_pods(timeout=60)

    for name, gpus, pools in (("train-a", 4, "h100"), ("train-b", 2, "h100"), ("eval", 2, "a100 h100")):
        core.create_namespaced_pod("kai-vision", pod("kai-vision", name, gpus, pools))
    cycles(2)

    # The second project's preview: every queue's share in each pool with it, vision's from what it runs.
    add_owner(page, url, "/org/projects/-/add/?department=research", "nlp", {"h100": (4, 8), "a100": (2, 4)})
    vision_h100, vision_a100 = after(page, "h100", "vision-h100"), after(page, "a100", "vision-a100")

    assert (vision_h100, vision_a100) == (6, 2)
    shot(page, "kube-project-preview")
    page.click("#save-owner")
    expect(page.locator("h1")).to_contain_text("Project nlp")
    assert krm_sync.publish(kube_org).problems == []
    core.create_namespaced_pod("kai-nlp", pod("kai-nlp", "tune", 1, "a100"))
    cycles(2)
    assert violations == []

    # Placed on the pools' nodes and charged to the projects' queues there, as the preview (with the second
    # project added) said: vision holds 6 H100s and 2 A100s.
    page.goto(f"{url}/org/projects/vision/")
    for pool, figure in (("h100", vision_h100), ("a100", vision_a100), ("total", vision_h100 + vision_a100)):
        expect(page.locator(f'#project-status tr[data-pool="{pool}"][data-resource="gpu"] '
                            'td[data-figure="allocated"]')).to_have_text(f"{figure:g}")
    shot(page, "kube-project-status")
    page.goto(f"{url}/org/")
    expect(page.locator('tr[data-owner="vision"] .pool-line[data-pool="h100"]')).to_contain_text(
        "h100: 4 guaranteed, 8 at most, 6 in use")
    expect(page.locator('tr[data-owner="nlp"] .pool-line[data-pool="a100"]')).to_contain_text("1 in use")
    nodes = {n.metadata.name: n.metadata.labels[GPU] for n in core.list_node().items}
    placed = {(p.metadata.namespace, p.metadata.name): nodes.get(p.spec.node_name or "")
              for p in core.list_pod_for_all_namespaces().items if p.metadata.namespace.startswith("kai-")}
    assert placed == {("kai-vision", "train-a"): "H100", ("kai-vision", "train-b"): "H100",
                      ("kai-vision", "eval"): "A100", ("kai-nlp", "tune"): "A100"}
    groups = client.CustomObjectsApi(kwok_cluster.api_client()).list_cluster_custom_object(
        "scheduling.run.ai", "v2alpha2", "podgroups")["items"]
    assert sorted((g["metadata"]["namespace"], g["spec"]["queue"], g["metadata"]["labels"].get(
        "kai.scheduler/node-pool")) for g in groups) == [
        ("kai-nlp", "nlp-a100", "a100"), ("kai-vision", "vision-a100", "a100"),
        ("kai-vision", "vision-h100", "h100"), ("kai-vision", "vision-h100", "h100")]
