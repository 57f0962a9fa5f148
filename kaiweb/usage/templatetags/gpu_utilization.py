"""Small utilization panels the queue, workload, node and overview pages include (one tag each).

Each tag reads what it shows itself (a query or two), so a page adds a panel with one line and
its view does not change. Panels say plainly when no utilization is known.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django import template
from django.db.models import Avg, Count, Sum

from kaiweb.usage.idle import idle_findings, idle_settings
from kaiweb.usage.models import PodUtilization, UsageBucket
from kaiweb.usage.utilization import configured_source
from kaiweb.workloads.choices import ALLOCATED_POD_STATES

register = template.Library()


def _subtree_ids(queue: Any) -> list[int]:
    from kaiweb.queues.models import Queue

    parents = dict(Queue.objects.values_list("pk", "parent_id"))
    kids: dict[int, list[int]] = {}
    for pk, parent in parents.items():
        kids.setdefault(parent, []).append(pk)
    out, stack = [], [queue.pk]
    while stack:
        cur = stack.pop()
        if cur in out:
            continue
        out.append(cur)
        stack.extend(kids.get(cur, []))
    return out


@register.inclusion_tag("usage/partials/utilization_queue.html")
def queue_gpu_utilization(queue: Any, hours: int = 1) -> dict[str, Any]:
    """The queue's (subtree's) GPU-hours allocated and used over the last `hours`, and its idle jobs."""
    since = datetime.now(tz=UTC) - timedelta(hours=hours)
    agg = UsageBucket.objects.filter(queue=queue, resource="gpu", start__gte=since).aggregate(
        allocated=Sum("value"), measured=Sum("measured_value"), used=Sum("used_value"), n=Count("id"))
    measured = (agg["measured"] or 0.0) / 3600.0
    used = agg["used"] / 3600.0 if agg["used"] is not None else None
    threshold, window = idle_settings()
    return {"hours": hours, "allocated": (agg["allocated"] or 0.0) / 3600.0, "measured": measured, "used": used,
            "utilization": 100.0 * used / measured if used is not None and measured > 0 else None,
            "findings": idle_findings(queue_ids=_subtree_ids(queue)), "threshold": threshold, "window": window}


@register.inclusion_tag("usage/partials/utilization_pods.html")
def workload_gpu_utilization(workload: Any) -> dict[str, Any]:
    """The latest reading of each of the workload's pods that holds GPUs."""
    rows = list(PodUtilization.objects.filter(pod__workload=workload, pod__state__in=ALLOCATED_POD_STATES)
                .select_related("pod", "pod__node").order_by("pod__name"))
    threshold, window = idle_settings()
    now = datetime.now(tz=UTC)
    for u in rows:
        u.idle = bool(u.low_since and (now - u.low_since).total_seconds() >= window)
        u.low_for = (now - u.low_since).total_seconds() if u.low_since else None
    return {"rows": rows, "threshold": threshold, "window": window}


@register.inclusion_tag("usage/partials/utilization_nodes.html")
def nodes_gpu_utilization() -> dict[str, Any]:
    """Per node: pods with a reading, their mean GPU utilization, memory used, idle pods."""
    threshold, window = idle_settings()
    cutoff = datetime.now(tz=UTC) - timedelta(seconds=window)
    rows = list(PodUtilization.objects.filter(pod__state__in=ALLOCATED_POD_STATES, pod__node__isnull=False)
                .values("pod__node__name").annotate(pods=Count("id"), mean=Avg("utilization"),
                                                    memory=Sum("memory_used_mib"))
                .order_by("pod__node__name"))
    idle = dict(PodUtilization.objects.filter(pod__state__in=ALLOCATED_POD_STATES, low_since__lte=cutoff)
                .values("pod__node__name").annotate(n=Count("id")).values_list("pod__node__name", "n"))
    for r in rows:
        r["idle"] = idle.get(r["pod__node__name"], 0)
    return {"rows": rows, "threshold": threshold, "window": window}


@register.inclusion_tag("usage/partials/idle_panel.html")
def idle_gpu_panel() -> dict[str, Any]:
    """The overview's idle-GPU finding."""
    threshold, window = idle_settings()
    findings = idle_findings()
    return {"findings": findings[:10], "more": max(0, len(findings) - 10), "threshold": threshold,
            "window": window, "gpus": sum(f["gpus"] for f in findings),
            "known": bool(findings) or configured_source() is not None}
