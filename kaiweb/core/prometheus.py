"""/metrics: the scheduler's figures in Prometheus text format, read from the database.

Every scrape reads the latest recorded state (a handful of queries, independent of the number of
workloads), so any web process can serve it and the numbers survive restarts. Names follow KAI's
metrics (`kai_queue_fair_share_gpu`, `kai_queue_allocated_gpus`, …; KAI-SEMANTICS §7) with the
`kai_` namespace KAI adds by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler_core.units import mb_to_bytes


def _cores(millicores: float) -> float:
    return millicores * 0.001


# Queue figures per resource: (metric suffix, conversion from queue units, help).
QUEUE_RESOURCES: dict[str, tuple[str, Callable[[float], float], str]] = {
    "gpu": ("gpus", float, "GPU devices"),
    "cpu": ("cpu_cores", _cores, "CPU cores"),
    "memory": ("memory_bytes", mb_to_bytes, "memory bytes"),
}


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


class SchedulerCollector(Collector):
    """Cycles, decisions and preemptions recorded by the scheduling cycle."""

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count

        from kaiweb.scheduling.choices import CycleStatus
        from kaiweb.scheduling.models import Decision, PreemptionEvent, SchedulingCycle

        cycles = CounterMetricFamily("kai_scheduling_cycles", "Scheduling cycles recorded, by shard and outcome.",
                                     labels=["shard", "status"])
        for row in SchedulingCycle.objects.values("shard__name", "status").annotate(n=Count("id")).order_by():
            cycles.add_metric([row["shard__name"] or "", row["status"]], row["n"])
        yield cycles

        phase = GaugeMetricFamily("kai_cycle_phase_duration_seconds",
                                  "Duration of each phase of the latest successful cycle, per shard.",
                                  labels=["shard", "phase"])
        total = GaugeMetricFamily("kai_cycle_duration_seconds", "Duration of the latest successful cycle, per shard.",
                                  labels=["shard"])
        last = GaugeMetricFamily("kai_cycle_last_success_timestamp_seconds",
                                 "When the latest successful cycle of the shard finished (Unix time).", labels=["shard"])
        deferred = GaugeMetricFamily("kai_cycle_write_back_deferred",
                                     "Writes to the cluster the latest successful cycle of the shard left for the "
                                     "next cycles (its budget spent), by kind: why-pending on pods, PodGroup "
                                     "statuses and events.", labels=["shard", "kind"])
        seen: set[Any] = set()
        latest = (SchedulingCycle.objects.filter(status=CycleStatus.SUCCEEDED)
                  .select_related("shard").order_by("-started_at", "-id")[:50])
        for c in latest:
            if c.shard_id in seen:
                continue
            seen.add(c.shard_id)
            shard = c.shard.name if c.shard else ""
            for name, seconds in sorted((c.phase_durations or {}).items()):
                phase.add_metric([shard, name], _num(seconds))
            total.add_metric([shard], _num(c.duration_seconds))
            if c.finished_at:
                last.add_metric([shard], c.finished_at.timestamp())
            said = c.write_back or {}
            if said:
                deferred.add_metric([shard, "pending_reason"], _num(said.get("pending_deferred")))
                deferred.add_metric([shard, "pod_group"], _num(said.get("pod_group_deferred")))
        yield phase
        yield total
        yield last
        yield deferred

        decisions = CounterMetricFamily("kai_scheduling_decisions", "Decisions recorded, by kind and status.",
                                        labels=["kind", "status"])
        for row in Decision.objects.values("kind", "status").annotate(n=Count("id")).order_by():
            decisions.add_metric([row["kind"], row["status"]], row["n"])
        yield decisions

        preemptions = CounterMetricFamily("kai_preemptions", "Evictions of a victim for a preemptor, by action.",
                                          labels=["action"])
        for row in PreemptionEvent.objects.values("action").annotate(n=Count("id")).order_by():
            preemptions.add_metric([row["action"]], row["n"])
        yield preemptions


class QueueCollector(Collector):
    """Per-queue allocation, fair share, quota and pending work from the latest recorded status."""

    def collect(self) -> Iterator[Metric]:
        from kaiweb.queues.models import Queue
        from kaiweb.scheduling.models import QueueStatus

        families: dict[str, GaugeMetricFamily] = {}

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            if name not in families:
                families[name] = GaugeMetricFamily(name, doc, labels=["queue_name"])
            return families[name]

        # The latest status of each shard's cycles: every shard's queues, not only those of the shard
        # that ran last (KAI's usage queries sum these gauges over time; a gap is usage lost).
        from kaiweb.cluster.models import SchedulingShard

        cycles = set()
        for shard_id in SchedulingShard.objects.filter(enabled=True).values_list("pk", flat=True):
            cycles.add(QueueStatus.objects.filter(cycle__shard_id=shard_id).order_by("-recorded_at", "-id")
                       .values_list("cycle_id", flat=True).first())
        cycles.discard(None)
        if not cycles:
            cycles.add(QueueStatus.objects.order_by("-recorded_at", "-id").values_list("cycle_id", flat=True).first())
        statuses = (QueueStatus.objects.filter(cycle_id__in=cycles).select_related("queue")
                    .order_by("-recorded_at", "-id"))
        seen: set[str] = set()
        for st in statuses:
            q = st.queue.name
            if q in seen:
                continue
            seen.add(q)
            for r, (suffix, convert, what) in QUEUE_RESOURCES.items():
                gauge(f"kai_queue_allocated_{suffix}", f"Allocated {what} of the queue (subtree).").add_metric(
                    [q], convert(_num(st.allocated.get(r))))
                gauge(f"kai_queue_fair_share_{r}", f"Fair share of the queue in {what}.").add_metric(
                    [q], convert(_num(st.fair_share.get(r))))
                gauge(f"kai_queue_requested_{suffix}", f"Requested {what} of the queue (subtree).").add_metric(
                    [q], convert(_num(st.requested.get(r))))
            gauge("kai_queue_pending_workloads", "Workloads of the queue (subtree) still pending.").add_metric(
                [q], st.pending_workloads)
            gauge("kai_queue_running_workloads", "Workloads of the queue (subtree) running.").add_metric(
                [q], st.running_workloads)
        for queue in Queue.objects.only("name", "gpu_quota", "gpu_limit", "cpu_quota", "memory_quota"):
            gauge("kai_queue_deserved_gpus", "GPU quota (deserved) of the queue; -1 = unlimited.").add_metric(
                [queue.name], queue.gpu_quota)
            gauge("kai_queue_limit_gpus", "GPU limit of the queue; -1 = unlimited.").add_metric(
                [queue.name], queue.gpu_limit)
        yield from families.values()


class QueueDepthCollector(Collector):
    """Pending work per leaf queue and priority, as the shards' latest cycles counted it."""

    def collect(self) -> Iterator[Metric]:
        from kaiweb.scheduling.selectors import queue_depth

        labels = ["queue", "priority"]
        jobs = GaugeMetricFamily("kai_queue_depth", "Pending jobs of the queue at this priority.", labels=labels)
        gpus = GaugeMetricFamily("kai_queue_pending_gpus", "GPUs the pending jobs of the queue at this priority "
                                 "ask for.", labels=labels)
        oldest = GaugeMetricFamily("kai_queue_oldest_wait_seconds", "How long the longest-waiting pending job of "
                                   "the queue at this priority had waited, as of the latest cycle.", labels=labels)
        wait = GaugeMetricFamily("kai_queue_wait_time_estimate_seconds", "The estimated wait (median) of the next "
                                 "pending job of the queue at this priority, from the latest start-time estimates; "
                                 "no sample when none is estimated or it is beyond the estimates' horizon. New "
                                 "arrivals are not guessed.", labels=labels)
        for d in queue_depth():
            key = [d.queue, str(d.priority)]
            jobs.add_metric(key, d.jobs)
            gpus.add_metric(key, d.gpus)
            oldest.add_metric(key, d.oldest_wait_seconds)
            if d.next_wait is not None and d.next_wait.p50_wait_seconds is not None:
                wait.add_metric(key, d.next_wait.p50_wait_seconds)
        yield jobs
        yield gpus
        yield oldest
        yield wait


def collectors() -> list[Collector]:
    """Collectors registered for /metrics (each reads the database when scraped)."""
    from kaiweb.scheduling.fragmentation import FragmentationCollector
    from kaiweb.usage.metrics import IdleGpuCollector

    return [SchedulerCollector(), QueueCollector(), QueueDepthCollector(), IdleGpuCollector(), FragmentationCollector()]


def render() -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors():
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST
