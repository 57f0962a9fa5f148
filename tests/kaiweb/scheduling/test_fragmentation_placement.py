"""Fragmentation-aware placement in the control plane: the shard setting, typical pods, stranded GPUs."""

from __future__ import annotations

import datetime as dt

import pytest

from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.backends.types import ObservedShard, Unreadable
from kaiweb.cluster.models import SchedulingShard
from kaiweb.scheduling.cycle import cycle_config
from kaiweb.scheduling.fragmentation import free_per_gpu, node_stranded, stranded_gpus
from kaiweb.scheduling.typical_pods import learned_typical_pods, shard_typical_pods
from tests.factories import T0, NodeFactory, PodFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def _default_shard() -> SchedulingShard:
    return SchedulingShard.objects.get(name="default")


# --------------------------------------------------------------------------- the setting


def test_a_platform_admin_sets_fragmentation_aware_placement_through_the_api(admin_api):
    shard = _default_shard()
    response = admin_api.patch(f"/api/v1/shards/{shard.pk}/", {"gpu_placement": "fragmentation-aware"},
                               format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["gpu_placement"] == "fragmentation-aware"
    assert response.json()["warnings"] == []  # consolidation stays on, unlike spread
    shard.refresh_from_db()
    assert shard.gpu_placement == "fragmentation-aware"
    assert cycle_config(shard).gpu_placement == "fragmentation-aware"


def test_cpu_placement_does_not_accept_fragmentation_aware(admin_api):
    shard = _default_shard()
    response = admin_api.patch(f"/api/v1/shards/{shard.pk}/", {"cpu_placement": "fragmentation-aware"},
                               format="json")
    assert response.status_code == 400
    assert "cpu_placement" in response.json()
    assert '"worstfit" is not a valid choice.' in admin_api.patch(
        f"/api/v1/shards/{shard.pk}/", {"gpu_placement": "worstfit"}, format="json").json()["gpu_placement"][0]


def test_the_schedulingshard_crd_import_accepts_fragmentation_aware_for_gpus_only():
    ok = parse_shard({"metadata": {"name": "s"}, "spec": {"placementStrategy": {"gpu": "fragmentation-aware"}}})
    assert isinstance(ok, ObservedShard)
    assert ok.gpu_placement == "fragmentation-aware"
    bad = parse_shard({"metadata": {"name": "s"}, "spec": {"placementStrategy": {"cpu": "fragmentation-aware"}}})
    assert isinstance(bad, Unreadable)
    assert bad.field == "spec.placementStrategy.cpu"


# --------------------------------------------------------------------------- typical pods


def _pod(gpu: float = 1, fraction: float | None = None, memory_mib: int | None = None, at: dt.datetime = T0,
         labels: dict | None = None):
    wl = WorkloadFactory(submitted_at=at, labels=labels or {})
    return PodFactory(workload=wl, gpu=0 if (fraction or memory_mib) else gpu, gpu_fraction=fraction,
                      gpu_memory_mib=memory_mib)


def test_typical_pods_are_learned_from_the_shards_recent_gpu_pods():
    NodeFactory(gpu_memory_mib=80000)
    for _ in range(6):
        _pod(gpu=1)
    for _ in range(3):
        _pod(fraction=0.49)  # counted as 0.5
    _pod(memory_mib=20000)  # a quarter of the shard's 80 GB GPUs
    _pod(gpu=8, at=T0 - dt.timedelta(days=30))  # outside the window
    _pod(gpu=4, labels={"kai.scheduler/node-pool": "other"})  # another shard's
    _pod(gpu=0)  # CPU only
    shard = _default_shard()
    learned = learned_typical_pods(shard, now=T0 + dt.timedelta(hours=1))
    assert learned == ((1.0, 0.6), (0.5, 0.3), (0.25, 0.1))
    # only a fragmentation-aware shard reads them for its cycle
    assert shard_typical_pods(shard, now=T0) == ()
    shard.gpu_placement = "fragmentation-aware"
    assert shard_typical_pods(shard, now=T0 + dt.timedelta(hours=1)) == learned


def test_without_history_the_engine_default_applies():
    shard = _default_shard()
    shard.gpu_placement = "fragmentation-aware"
    assert shard_typical_pods(shard, now=T0) == ()


# --------------------------------------------------------------------------- stranded GPUs


def test_stranded_gpus_use_the_engines_measure():
    # typical pods: half GPUs. 0.3 free on one GPU is stranded; a whole free GPU is not
    assert stranded_gpus([[1.0, 0.3], [0.6], []], ((0.5, 1),)) == pytest.approx([0.3, 0.0, 0.0])
    # typical pods of 2 GPUs: a node with one free GPU strands it
    assert stranded_gpus([[1.0], [1.0, 1.0]], ((2, 1),)) == [1.0, 0.0]


def test_free_gpus_per_node_come_from_the_placed_pods():
    node = NodeFactory(allocatable_gpu=4)
    for frac in (0.5, 0.25):
        PodFactory(node=node, state="Running", gpu=0, gpu_fraction=frac, gpu_groups=["g1"])
    PodFactory(node=node, state="Running", gpu=2)
    PodFactory(node=node, state="Pending", gpu=1)  # not placed: does not count
    assert sorted(free_per_gpu([node])[node.pk]) == [0.25, 1.0]
    shard = _default_shard()
    shard.gpu_placement = "fragmentation-aware"
    shard.save()
    # no history in the window: default typical pods, whose smallest is a quarter GPU -> nothing stranded
    assert node_stranded([node]) == {node.pk: 0.0}


def test_stranded_gpus_are_on_metrics_and_the_node_map(admin_client):
    node = NodeFactory(name="gpu-a", allocatable_gpu=2)
    wl = WorkloadFactory(submitted_at=T0)
    PodFactory(workload=wl, node=node, state="Running", gpu=0, gpu_fraction=0.9, gpu_groups=["g1"])
    PodFactory(workload=wl, node=node, state="Running", gpu=1)
    # no pod in the window: the default typical pods, the smallest a quarter GPU: 0.1 free is stranded
    body = admin_client.get("/metrics").content.decode()
    assert 'kai_node_stranded_gpus{cluster="default",node="gpu-a"} 0.1' in body
    assert 'kai_cluster_stranded_gpus{cluster="default"} 0.1' in body
    page = admin_client.get("/nodes/").content.decode()
    assert "0.1 stranded" in page
    assert 'id="stranded-total"' in page


def test_the_shard_admin_offers_fragmentation_aware_for_gpus_only(admin_client):
    shard = _default_shard()
    page = admin_client.get(f"/admin/cluster/schedulingshard/{shard.pk}/change/").content.decode()
    gpu_select = page[page.index('name="gpu_placement"'):]
    gpu_select = gpu_select[:gpu_select.index("</select>")]
    cpu_select = page[page.index('name="cpu_placement"'):]
    cpu_select = cpu_select[:cpu_select.index("</select>")]
    assert 'value="fragmentation-aware"' in gpu_select
    assert 'value="fragmentation-aware"' not in cpu_select


# --------------------------------------------------------------------------- over time


def test_each_cycle_records_the_shards_free_and_stranded_gpus_and_the_overview_draws_them(admin_client):
    from kaiweb.scheduling import cycle
    from kaiweb.scheduling.models import SchedulingCycle
    from tests.celery.builders import small_cluster, submit

    sc = small_cluster(nodes=1, gpus=8)
    submit(sc, "team-a", "frac", pods=1, fraction=0.9)
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    row = SchedulingCycle.objects.get(pk=outcome.cycle_id)
    assert outcome.binds == 1
    # one device holds the 0.9 pod: 7 whole GPUs and 0.1 free; no typical pod fits in 0.1
    assert row.free_gpus == pytest.approx(7.1)
    assert row.stranded_gpus == pytest.approx(0.1)
    assert "fragmentation" in row.phase_durations

    SchedulingCycle.objects.filter(pk=row.pk).update(started_at=dt.datetime.now(tz=dt.UTC))
    from kaiweb.ui.queries import fragmentation_series

    series = fragmentation_series(dt.datetime.now(tz=dt.UTC) - dt.timedelta(hours=24))
    assert [(free, stranded) for _, free, stranded in series] == [(pytest.approx(7.1), pytest.approx(0.1))]
    html = admin_client.get("/").content.decode()
    chart = html[html.index('<script id="fragmentation-chart"'):]
    chart = chart[:chart.index("</script>")]
    assert '"name": "free"' in chart
    assert '"name": "stranded"' in chart


def test_a_node_s_dra_gpus_no_claim_holds_are_free_and_held_ones_are_not():
    node = NodeFactory(allocatable_gpu=1)
    node.dra_devices = [{"driver": "gpu.nvidia.com", "pool": "p", "device": f"gpu-{i}", "gpu": True,
                         "claim": claim, "pods": [], "admin_access": admin}
                        for i, (claim, admin) in enumerate([("ns/held", False), ("", False), ("ns/watch", True)])]
    node.dra_devices += [{"driver": "nic.example.com", "pool": "p", "device": "nic-0", "gpu": False, "claim": "",
                          "pods": [], "admin_access": False}]
    node.save()
    # the device plugin's GPU and the two DRA GPUs no claim holds (admin access holds none); no NIC
    assert free_per_gpu([node])[node.pk] == [1.0, 1.0, 1.0]
