"""Our own Prometheus figures of GPU utilization: the idle-GPU finding and per-queue utilization."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class IdleGpuCollector(Collector):
    """kai_idle_gpu_* per idle job and in total, read from the pods' utilization records when scraped."""

    def collect(self) -> Iterator[Metric]:
        from kaiweb.usage.idle import idle_findings

        findings = idle_findings()
        labels = ["namespace", "workload", "queue_name"]
        gpus = GaugeMetricFamily("kai_idle_gpu_workload_gpus",
                                 "GPUs held by a job whose GPU utilization stayed under the idle threshold for "
                                 "longer than the idle window.", labels=labels)
        seconds = GaugeMetricFamily("kai_idle_gpu_workload_idle_seconds",
                                    "How long the idle job's GPU utilization has stayed under the threshold.",
                                    labels=labels)
        util = GaugeMetricFamily("kai_idle_gpu_workload_utilization_percent",
                                 "Mean GPU utilization of the idle job over its idle stretch.", labels=labels)
        for f in findings:
            key = [f["namespace"], f["name"], f["queue"]]
            gpus.add_metric(key, f["gpus"])
            seconds.add_metric(key, f["idle_seconds"])
            util.add_metric(key, f["mean_utilization_percent"])
        yield gpus
        yield seconds
        yield util
        total = GaugeMetricFamily("kai_idle_gpus", "GPUs held idle by all idle jobs together.")
        total.add_metric([], sum(f["gpus"] for f in findings))
        yield total
        jobs = GaugeMetricFamily("kai_idle_gpu_workloads", "Jobs holding GPUs idle.")
        jobs.add_metric([], len(findings))
        yield jobs
