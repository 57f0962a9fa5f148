"""The node page in a real browser: from the GPU map to one node, its GPUs, pods and queues."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_a_viewer_goes_from_the_gpu_map_to_a_node_and_on_to_a_workload(page, live_server, ui_data, viewer, login,
                                                                       shot):
    from kaiweb.workloads.models import Pod

    pod = (Pod.objects.filter(state="Running", node__isnull=False).select_related("node", "workload")
           .order_by("node__name").first())
    login(page, viewer)
    page.goto(f"{live_server.url}/nodes/?name_contains={pod.node.name}")
    page.locator("#gpu-map .node-name a", has_text=pod.node.name).first.click()
    expect(page.locator("h1")).to_contain_text(pod.node.name)
    expect(page.locator("#node-devices")).to_contain_text(f"{pod.workload.namespace}/{pod.workload.name}")
    expect(page.locator("#node-queues")).to_contain_text(pod.workload.queue.name)
    shot(page, "node")
    page.locator("#node-pods a", has_text=f"{pod.workload.namespace}/{pod.workload.name}").first.click()
    expect(page.locator("h1")).to_contain_text(pod.workload.name)
