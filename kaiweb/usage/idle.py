"""The idle-GPU finding: jobs holding GPUs whose utilization stayed under a threshold for too long.

Read from the pods' utilization records (see `accounting.record_pod_utilization`): a pod is idle
when every reading since `low_since` was under `KAI_IDLE_GPU_UTILIZATION_PERCENT` and that stretch
is at least `KAI_IDLE_GPU_WINDOW_SECONDS` long. Findings are per workload, with the numbers: GPUs
held, mean utilization over the idle stretch, how long, the GPU-hours it held idle so far and the
GPU memory it holds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from kaiweb.usage.models import PodUtilization
from kaiweb.workloads.choices import ALLOCATED_POD_STATES


def idle_settings() -> tuple[float, float]:
    """(threshold in percent, window in seconds)."""
    return (float(getattr(settings, "KAI_IDLE_GPU_UTILIZATION_PERCENT", 5.0)),
            float(getattr(settings, "KAI_IDLE_GPU_WINDOW_SECONDS", 600.0)))


def idle_findings(now: datetime | None = None, *, queue_ids: list[int] | None = None,
                  node_id: int | None = None) -> list[dict[str, Any]]:
    """Idle jobs, the longest idle first (one query). Each: workload, namespace, queue, GPUs, numbers."""
    threshold, window = idle_settings()
    now = now or datetime.now(tz=UTC)
    rows = (PodUtilization.objects.filter(low_since__isnull=False, low_since__lte=now - timedelta(seconds=window),
                                          pod__state__in=ALLOCATED_POD_STATES)
            .select_related("pod__workload__queue", "pod__node").order_by("low_since", "pod_id"))
    if queue_ids is not None:
        rows = rows.filter(pod__workload__queue_id__in=queue_ids)
    if node_id is not None:
        rows = rows.filter(pod__node_id=node_id)
    by_workload: dict[int, dict[str, Any]] = {}
    for u in rows:
        pod, w = u.pod, u.pod.workload
        f = by_workload.setdefault(w.pk, {
            "workload_id": w.pk, "workload": f"{w.namespace}/{w.name}", "namespace": w.namespace, "name": w.name,
            "queue": w.queue.name, "queue_id": w.queue_id, "pods": 0, "gpus": 0.0, "nodes": [],
            "idle_since": u.low_since.isoformat(), "idle_seconds": 0.0, "mean_utilization_percent": 0.0,
            "idle_gpu_hours": 0.0, "memory_used_mib": None, "_sum": 0.0, "_n": 0,
        })
        gpus = pod.gpu_request
        idle_for = (now - u.low_since).total_seconds()
        f["pods"] += 1
        f["gpus"] += gpus
        f["idle_seconds"] = max(f["idle_seconds"], idle_for)
        f["idle_since"] = min(f["idle_since"], u.low_since.isoformat())
        f["idle_gpu_hours"] += gpus * idle_for / 3600.0
        f["_sum"] += u.low_utilization_sum
        f["_n"] += u.low_samples
        if u.memory_used_mib is not None:
            f["memory_used_mib"] = (f["memory_used_mib"] or 0.0) + u.memory_used_mib
        if pod.node is not None and pod.node.name not in f["nodes"]:
            f["nodes"].append(pod.node.name)
    out = []
    for f in by_workload.values():
        f["mean_utilization_percent"] = round(f.pop("_sum") / f["_n"], 2) if f["_n"] else 0.0
        f.pop("_n")
        f["threshold_percent"], f["window_seconds"] = threshold, window
        out.append(f)
    return sorted(out, key=lambda f: (-f["idle_seconds"], f["workload"]))
