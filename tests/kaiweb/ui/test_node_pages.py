"""The node map: node × device, coloured by queue, fractions as partial cells, filters by shard and labels."""

from __future__ import annotations

import pytest

from kaiweb.cluster.models import GpuDevice, Node
from kaiweb.ui.charts import queue_colour
from kaiweb.workloads.models import Pod
from tests.sample_data import build_dataset, query_counts_before_and_after_more_data


@pytest.fixture
def ui_data(queue_tree):
    return build_dataset(nodes=10, workloads=60, cycles=4, seed=21)


def _node_rows(html: str) -> list[str]:
    body = html[html.index('id="gpu-map"'):]
    return body.split('class="node-name"')[1:]


def test_map_has_one_cell_per_gpu_coloured_by_queue(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/nodes/").content.decode()
    rows = _node_rows(html)
    assert len(rows) == Node.objects.count() == 10
    first = rows[0].split("node-meta")[0]
    assert first.count('class="gpu') == 8
    pod = (Pod.objects.filter(state="Running", node__name="gpu-node-001", gpu__gt=0)
           .select_related("workload__queue").first())
    on_map = sorted(set(Pod.objects.filter(state__in=["Running", "Bound", "Binding"], node__isnull=False)
                        .values_list("workload__queue__name", flat=True)))
    if pod is not None:
        assert f"--c: {queue_colour(pod.workload.queue.name, on_map)}" in first


def test_every_queue_on_the_map_has_a_colour_of_its_own(client, viewer, ui_data):
    import re

    client.force_login(viewer)
    html = client.get("/nodes/").content.decode()
    from kaiweb.ui.charts import PALETTE

    colours = [c for c in re.findall(r"--c: (#[0-9a-f]{6})", html) if c in PALETTE]  # not the free cells
    shown = sorted(set(Pod.objects.filter(state__in=["Running", "Bound", "Binding"], node__isnull=False)
                       .values_list("workload__queue__name", flat=True)))
    assert 1 < len(shown) <= 16
    assert len(set(colours)) == len(shown)  # one colour per queue, no two queues alike


def test_fractional_gpus_are_partial_cells(client, viewer, ui_data):
    pod = Pod.objects.filter(state="Running", gpu_fraction__isnull=False).select_related("node").first()
    client.force_login(viewer)
    html = client.get(f"/nodes/?name_contains={pod.node.name}").content.decode()
    assert f"width: {pod.gpu_fraction * 100:.0f}%" in html


def test_filter_by_label_and_shard(client, viewer, ui_data):
    client.force_login(viewer)
    rows = _node_rows(client.get("/nodes/?label=kai.scheduler/node-pool=pool-b").content.decode())
    expected = [n for n in Node.objects.all() if n.labels.get("kai.scheduler/node-pool") == "pool-b"]
    assert len(rows) == len(expected) == 2
    from kaiweb.cluster.models import SchedulingShard

    pool_b = SchedulingShard.objects.get(name="pool-b")
    default = SchedulingShard.objects.get(name="default")
    assert len(_node_rows(client.get(f"/nodes/?shard={pool_b.pk}").content.decode())) == 2
    assert len(_node_rows(client.get(f"/nodes/?shard={default.pk}").content.decode())) == 8


def test_unknown_shard_says_so(client, viewer, ui_data):
    client.force_login(viewer)
    html = client.get("/nodes/?shard=999").content.decode()
    assert "no shard with id" in html


def test_map_query_count_does_not_grow_with_the_data(client, viewer, ui_data, django_assert_max_num_queries):
    client.force_login(viewer)
    small, large = query_counts_before_and_after_more_data(client, "/nodes/", nodes=40, workloads=100, cycles=2, seed=22)
    assert large == small
    with django_assert_max_num_queries(13):  # +2: the typical pods behind the stranded GPUs; +1: the topologies
        client.get("/nodes/")


def test_a_node_page_shows_its_gpus_pods_queues_constraints_and_events(client, viewer, ui_data):
    from kaiweb.scheduling.models import Decision

    pod = (Pod.objects.filter(state="Running", node__isnull=False, gpu__gt=0)
           .select_related("workload__queue", "node").first())
    node = pod.node
    node.taints = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    node.labels = {**node.labels, "zone": "z1"}
    node.save()
    client.force_login(viewer)
    html = client.get(f"/nodes/{node.name}/").content.decode()
    devices = html[html.index('id="node-devices"'):html.index("</table>", html.index('id="node-devices"'))]
    assert devices.count("<tr>") == max(int(node.allocatable_gpu), GpuDevice.objects.filter(node=node).count()) + 1
    assert f"{pod.workload.namespace}/{pod.workload.name}" in devices
    pods = html[html.index('id="node-pods"'):]
    assert f'href="/workloads/{pod.workload_id}/"' in pods
    assert f'href="/queues/{pod.workload.queue.name}/"' in html[html.index('id="node-queues"'):]
    assert "dedicated=infra:NoSchedule" in html
    assert "<code>zone</code> = z1" in html
    decision = Decision.objects.filter(node_name=node.name).select_related("cycle").first()
    if decision is not None:
        assert f"cycle #{decision.cycle_id}" in html[html.index('id="node-events"'):]


def test_a_node_page_lists_the_pods_of_other_schedulers_that_hold_it(client, viewer, ui_data):
    from kaiweb.cluster.models import OtherPod

    node = Node.objects.order_by("name").first()
    client.force_login(viewer)
    assert 'id="node-other-pods"' not in client.get(f"/nodes/{node.name}/").content.decode()
    OtherPod.objects.create(cluster=node.cluster, namespace="kube-system", name="dcgm-exporter-x1",
                            node_name=node.name, scheduler_name="default-scheduler", gpus=2, cpu_millis=500)
    html = client.get(f"/nodes/{node.name}/").content.decode()
    section = html[html.index('id="node-other-pods"'):]
    assert "kube-system/dcgm-exporter-x1" in section
    assert "default-scheduler" in section


def test_node_names_link_to_their_page_and_an_unknown_node_is_a_404(client, viewer, ui_data):
    client.force_login(viewer)
    node = Node.objects.order_by("name").first()
    assert f'href="/nodes/{node.name}/"' in client.get("/nodes/").content.decode()
    pod = Pod.objects.filter(node=node).first()
    if pod is not None:
        assert f'href="/nodes/{node.name}/"' in client.get(f"/workloads/{pod.workload_id}/").content.decode()
    assert client.get("/nodes/no-such-node/").status_code == 404


def test_the_node_page_query_count_does_not_grow_with_its_pods(client, viewer, ui_data, django_assert_max_num_queries):
    node = Pod.objects.filter(node__isnull=False).values_list("node__name", flat=True).first()
    client.force_login(viewer)
    client.get(f"/nodes/{node}/")
    with django_assert_max_num_queries(16):
        client.get(f"/nodes/{node}/")


def _dra_row(device: str, *, gpu: bool = True, claim: str = "", pods: tuple[str, ...] = (),
             admin_access: bool = False) -> dict:
    return {"driver": "gpu.nvidia.com" if gpu else "nic.example.com", "pool": "p", "device": device, "gpu": gpu,
            "claim": claim, "pods": list(pods), "admin_access": admin_access}


def test_a_node_page_lists_its_dra_devices_and_counts_the_claimed_gpus_in_use(client, viewer, ui_data):
    from kaiweb.scheduling.models import SchedulingCycle
    from kaiweb.ui.nodes import build_map

    pod = (Pod.objects.filter(state="Running", node__isnull=False)
           .select_related("workload__queue", "node").first())
    node = pod.node
    client.force_login(viewer)
    plain = client.get(f"/nodes/{node.name}/")
    assert 'id="node-dra-devices"' not in plain.content.decode()
    (before,), _ = build_map([node])
    read_by = SchedulingCycle.objects.order_by("pk").first()
    holder = f"{pod.workload.namespace}/{pod.name}"
    node.dra_devices = [_dra_row("gpu-0", claim=f"{pod.workload.namespace}/train", pods=(holder,)),
                        _dra_row("gpu-1"),
                        _dra_row("gpu-2", claim="other/watcher", admin_access=True),
                        _dra_row("nic-0", gpu=False, claim="other/net", pods=("other/router",))]
    node.dra_devices_total, node.dra_read_cycle = 4, read_by.pk
    node.save()

    (after,), _ = build_map([node])
    page = client.get(f"/nodes/{node.name}/")
    html = page.content.decode()

    # three GPU devices more, one in use (an admin-access claim holds none; a NIC is no GPU)
    assert (after["count"], after["used"]) == (before["count"] + 3, before["used"] + 1)
    gpus = html[html.index('id="node-devices"'):html.index("</table>", html.index('id="node-devices"'))]
    assert gpus.count("<tr>") == after["count"] + 1
    assert f"{after['used']:g} of {after['count']} in use" in html
    section = html[html.index('id="node-dra-devices"'):html.index("</section>", html.index('id="node-dra-devices"'))]
    assert section.count("<tr>") == 5
    assert f'<a href="/workloads/{pod.workload_id}/">{holder}</a>' in section  # a pod of kaiweb's: its job
    assert "<div>other/router</div>" in section  # another scheduler's pod: no page of its own
    assert "admin access" in section
    assert f'cycle #{read_by.pk}</a>' in section
    queue = pod.workload.queue.name
    assert dict(page.context["queues"])[queue] == dict(plain.context["queues"]).get(queue, 0.0) + 1.0


def test_claimed_dra_gpus_are_in_the_node_api(viewer_api, ui_data):
    node = Node.objects.order_by("name").first()
    node.dra_devices = [_dra_row("gpu-0", claim="ns/c", pods=("ns/p",)), _dra_row("gpu-1")]
    node.dra_devices_total = 2
    node.save()

    body = viewer_api.get(f"/api/v1/nodes/{node.name}/").json()

    assert body["dra_gpus"] == {"held": 1, "free": 1}
    assert [d["device"] for d in body["dra_devices"]] == ["gpu-0", "gpu-1"]
