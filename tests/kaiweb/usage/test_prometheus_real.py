"""Utilization from a real Prometheus server (Debian's `prometheus`), scraping DCGM-shaped metrics.

The test serves a small exporter on loopback with the DCGM exporter's metric names and its `pod`
and `namespace` labels for known pods, starts the prometheus binary on a free loopback port with
a temporary config and storage directory, waits until the samples are queryable, and runs usage
accounting against it. Skipped, with a notice, when the binary is absent (apt-get install prometheus).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from kaiweb.core.prometheus import render
from kaiweb.usage.accounting import account_usage
from kaiweb.usage.idle import idle_findings
from kaiweb.usage.models import PodUtilization, UsageBucket
from kaiweb.usage.utilization import PrometheusSource
from tests.factories import NodeFactory, PodFactory, WorkloadFactory
from tests.prometheus_server import Exposition, needs_prometheus, running_prometheus

pytestmark = needs_prometheus

# (namespace, pod, gpu index, utilization %, framebuffer used MiB, free MiB)
DEVICES = [
    ("team", "train-0", 0, 90, 60_000, 21_559),
    ("team", "train-0", 1, 70, 50_000, 31_559),
    ("team", "stuck-0", 2, 0, 1_000, 80_559),
    ("other", "not-ours-0", 3, 50, 10_000, 71_559),
    ("", "", 4, 0, 0, 81_559),  # a free GPU: the exporter leaves pod and namespace empty
]


def _exposition() -> bytes:
    lines = []
    for metric, column, kind in (("DCGM_FI_DEV_GPU_UTIL", 3, "GPU utilization (in %)."),
                                 ("DCGM_FI_DEV_FB_USED", 4, "Framebuffer memory used (in MiB)."),
                                 ("DCGM_FI_DEV_FB_FREE", 5, "Framebuffer memory free (in MiB).")):
        lines += [f"# HELP {metric} {kind}", f"# TYPE {metric} gauge"]
        for row in DEVICES:
            ns, pod, gpu = row[0], row[1], row[2]
            lines.append(f'{metric}{{gpu="{gpu}",UUID="GPU-{gpu:08d}",device="nvidia{gpu}",'
                         f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-0",container="main",'
                         f'namespace="{ns}",pod="{pod}"}} {row[column]}')
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exporter = Exposition(_exposition)
    try:
        # ready once samples are queryable from 3 s ago on
        with running_prometheus(tmp_path_factory.mktemp("prometheus"), exporter.target,
                                "count_over_time(DCGM_FI_DEV_FB_FREE{gpu=\"0\"}[10s])", ready_samples=4) as url:
            yield url
    finally:
        exporter.close()


def test_the_client_reads_dcgm_metrics_per_pod(prometheus):
    readings = PrometheusSource(prometheus).read(datetime.now(tz=UTC))
    assert set(readings) == {("team", "train-0"), ("team", "stuck-0"), ("other", "not-ours-0")}
    train = readings[("team", "train-0")]
    assert train.utilization == pytest.approx(80.0)  # mean of its two devices
    assert train.devices == 2
    assert train.memory_used_mib == pytest.approx(110_000)
    assert train.memory_total_mib == pytest.approx(2 * 81_559)


def test_utilization_flows_into_the_buckets_and_the_idle_finding(prometheus, queue_tree, settings):
    settings.KAI_PROMETHEUS_URL = prometheus
    settings.KAI_IDLE_GPU_UTILIZATION_PERCENT = 5.0
    settings.KAI_IDLE_GPU_WINDOW_SECONDS = 1.0
    node = NodeFactory(name="gpu-node-0")
    q = queue_tree["team-training"]
    train = WorkloadFactory(namespace="team", name="train", queue=q, state="running")
    stuck = WorkloadFactory(namespace="team", name="stuck", queue=q, state="running")
    PodFactory(workload=train, name="train-0", gpu=2, state="Running", node=node)
    PodFactory(workload=stuck, name="stuck-0", gpu=1, state="Running", node=node)

    first = datetime.now(tz=UTC) - timedelta(seconds=2.5)  # Prometheus has samples from then on
    account_usage(at=first)
    bucket = UsageBucket.objects.get(queue=q, resource="gpu")
    width = bucket.width_seconds
    assert bucket.value == pytest.approx(3 * width)
    assert bucket.measured_value == pytest.approx(3 * width)
    assert bucket.used_value == pytest.approx((2 * 0.80 + 1 * 0.0) * width)
    assert bucket.gpu_memory_used_value == pytest.approx((110_000 + 1_000) * width)
    assert bucket.by_gpu_model == {"NVIDIA-H100-80GB-HBM3": pytest.approx(3 * width)}
    assert PodUtilization.objects.get(pod__name="train-0").source == "prometheus"
    assert not PodUtilization.objects.filter(pod__workload__namespace="other").exists()

    second = first + timedelta(seconds=2)
    account_usage(at=second)
    assert idle_findings(now=first + timedelta(seconds=0.5)) == []  # under the threshold, not yet for 1 s
    findings = idle_findings(now=second)
    assert [f["workload"] for f in findings] == ["team/stuck"]
    assert findings[0]["mean_utilization_percent"] == 0.0
    assert findings[0]["idle_seconds"] == pytest.approx(2.0)
    assert findings[0]["memory_used_mib"] == pytest.approx(1_000)
    body = render()[0].decode()
    assert 'kai_idle_gpu_workload_gpus{namespace="team",queue_name="team-training",workload="stuck"} 1.0' in body
