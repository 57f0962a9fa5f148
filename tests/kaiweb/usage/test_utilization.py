"""GPU utilization beside the allocation: buckets get used GPU-hours and GPU models; idle jobs are found."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kaiweb.core.prometheus import render
from kaiweb.usage.accounting import account_usage, roll_up_and_expire
from kaiweb.usage.idle import idle_findings
from kaiweb.usage.models import PodUtilization, UsageBucket
from kaiweb.usage.utilization import UTILIZATION_LABEL, PrometheusSource, SimulatedSource, UtilizationError
from tests.factories import NodeFactory, PodFactory, WorkloadFactory

T = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def running(queue_tree):
    """A busy 4-GPU job on H100s and an idle 2-GPU job on A100s, both in team-training."""
    h100 = NodeFactory(name="h100-0")
    a100 = NodeFactory(name="a100-0", gpu_product="NVIDIA-A100-SXM4-80GB")
    busy = WorkloadFactory(name="busy", queue=queue_tree["team-training"], state="running",
                           labels={UTILIZATION_LABEL: "80"})
    idle = WorkloadFactory(name="stuck", queue=queue_tree["team-training"], state="running",
                           labels={UTILIZATION_LABEL: "1"})
    PodFactory(workload=busy, name="busy-0", gpu=4, state="Running", node=h100)
    PodFactory(workload=idle, name="stuck-0", gpu=2, state="Running", node=a100)
    return {"busy": busy, "idle": idle}


def _gpu_bucket(queue):
    return UsageBucket.objects.get(queue=queue, resource="gpu")


def test_buckets_hold_used_gpu_seconds_and_gpu_models_beside_the_allocation(queue_tree, running):
    account_usage(at=T, source=SimulatedSource())
    leaf = _gpu_bucket(queue_tree["team-training"])
    assert leaf.value == pytest.approx(6 * 60)
    assert leaf.by_gpu_model == {"NVIDIA-A100-SXM4-80GB": pytest.approx(2 * 60),
                                 "NVIDIA-H100-80GB-HBM3": pytest.approx(4 * 60)}
    assert leaf.measured_value == pytest.approx(6 * 60)
    # 4 GPUs near 80 % and 2 GPUs near 1 %: the simulation wobbles ±6 and ±1 points.
    assert 4 * 60 * 0.74 + 2 * 60 * 0.0 <= leaf.used_value <= 4 * 60 * 0.86 + 2 * 60 * 0.02
    assert leaf.gpu_memory_used_value > 0
    parent = _gpu_bucket(queue_tree["department-b"])  # parents get their subtree's sums
    assert parent.used_value == pytest.approx(leaf.used_value)
    assert parent.by_gpu_model == leaf.by_gpu_model


def test_without_a_source_utilization_stays_unknown(queue_tree, running, settings):
    settings.KAI_CLUSTER_BACKEND = "kubernetes"
    settings.KAI_PROMETHEUS_URL = ""
    account_usage(at=T)
    leaf = _gpu_bucket(queue_tree["team-training"])
    assert leaf.used_value is None
    assert leaf.measured_value == 0
    assert leaf.by_gpu_model["NVIDIA-H100-80GB-HBM3"] == pytest.approx(240)
    assert not PodUtilization.objects.exists()


def test_an_unreachable_prometheus_leaves_the_allocation_accounted(queue_tree, running, settings):
    settings.KAI_PROMETHEUS_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    settings.KAI_PROMETHEUS_TIMEOUT = 1.0
    assert account_usage(at=T) > 0
    leaf = _gpu_bucket(queue_tree["team-training"])
    assert leaf.value == pytest.approx(360)
    assert leaf.used_value is None


def test_a_bad_prometheus_url_is_refused_by_name():
    with pytest.raises(UtilizationError, match="KAI_PROMETHEUS_URL"):
        PrometheusSource("prometheus:9090")


def test_a_job_under_the_threshold_for_longer_than_the_window_is_idle(queue_tree, running, settings):
    settings.KAI_IDLE_GPU_UTILIZATION_PERCENT = 5.0
    settings.KAI_IDLE_GPU_WINDOW_SECONDS = 600.0
    for minute in range(0, 12):
        account_usage(at=T + timedelta(minutes=minute), source=SimulatedSource())
    assert idle_findings(now=T + timedelta(minutes=9)) == []  # low for 9 minutes: not yet
    findings = idle_findings(now=T + timedelta(minutes=11))
    assert [f["workload"] for f in findings] == ["team/stuck"]
    f = findings[0]
    assert f["gpus"] == 2
    assert f["queue"] == "team-training"
    assert f["nodes"] == ["a100-0"]
    assert f["idle_seconds"] == pytest.approx(660)
    assert f["idle_gpu_hours"] == pytest.approx(2 * 660 / 3600)
    assert 0 <= f["mean_utilization_percent"] < 2.5
    # A reading above the threshold ends the idle stretch.
    running["idle"].labels = {UTILIZATION_LABEL: "60"}
    running["idle"].save()
    account_usage(at=T + timedelta(minutes=12), source=SimulatedSource())
    assert idle_findings(now=T + timedelta(minutes=13)) == []


def test_idle_jobs_are_exported_as_our_own_metrics(queue_tree, running, settings):
    settings.KAI_IDLE_GPU_WINDOW_SECONDS = 0.0
    account_usage(at=datetime.now(tz=UTC) - timedelta(seconds=5), source=SimulatedSource())
    body = render()[0].decode()
    assert 'kai_idle_gpu_workload_gpus{namespace="team",queue_name="team-training",workload="stuck"} 2.0' in body
    assert "kai_idle_gpus 2.0" in body
    assert "kai_idle_gpu_workloads 1.0" in body


def test_the_overview_panel_and_pages_show_the_finding(client, viewer, queue_tree, running, settings):
    settings.KAI_IDLE_GPU_WINDOW_SECONDS = 0.0
    account_usage(at=datetime.now(tz=UTC) - timedelta(seconds=5), source=SimulatedSource())
    client.force_login(viewer)
    overview = client.get("/").content.decode()
    assert 'hx-get="/usage/idle-gpus/"' in overview
    panel = client.get("/usage/idle-gpus/").content.decode()
    assert "team/stuck" in panel
    assert "team/busy" not in panel
    workload = client.get(f"/workloads/{running['idle'].pk}/").content.decode()
    assert 'id="gpu-utilization"' in workload
    assert "stuck-0" in workload
    assert "idle for" in workload
    queue = client.get("/queues/team-training/").content.decode()
    assert 'id="gpu-utilization"' in queue
    assert "team/stuck" in queue
    nodes = client.get("/usage/node-utilization/").content.decode()
    assert "a100-0" in nodes
    assert "h100-0" in nodes


def test_roll_up_keeps_used_and_per_model_gpu_seconds(queue_tree, running):
    old = T - timedelta(days=30)
    for minute in range(3):
        account_usage(at=old + timedelta(minutes=minute), source=SimulatedSource())
    minutes = UsageBucket.objects.filter(queue=queue_tree["team-training"], resource="gpu", width_seconds=60)
    used = sum(b.used_value for b in minutes)
    roll_up_and_expire(now=T)
    hour = UsageBucket.objects.get(queue=queue_tree["team-training"], resource="gpu", width_seconds=3600)
    assert hour.value == pytest.approx(3 * 360)
    assert hour.used_value == pytest.approx(used)
    assert hour.measured_value == pytest.approx(3 * 360)
    assert hour.by_gpu_model["NVIDIA-A100-SXM4-80GB"] == pytest.approx(3 * 120)
