"""A project's quota status as KRM reports it (``status.nodePoolsQuotaStatuses`` and ``status.quotaStatus``).

Per node pool and in total: the quota (deserved, limit) and what its queues' workloads take now, read
from the recorded workloads and their pods, in KRM's units (GPUs, millicores, MB):

* ``requested``: the pods of pending and running workloads;
* ``allocated``: the pods that hold node resources (binding, bound, running);
* ``allocated_non_preemptible``: those of them whose workload is not preemptible (its priority class and
  explicit preemptibility resolved as the engine resolves them, ``scheduler_core.model.resolve_priority``).

A GPU is a whole device or the fraction a shared pod asks for; a pod sharing by GPU memory counts no device.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Case, F, FloatField, Q, Sum, When

from kaiweb.core.choices import RESOURCES, UNLIMITED
from kaiweb.org.models import OwnerQueue, Project
from kaiweb.queues.models import PriorityClass
from kaiweb.workloads.choices import ACTIVE_WORKLOAD_STATES, ALLOCATED_POD_STATES
from kaiweb.workloads.models import Pod
from scheduler_core import model as m
from scheduler_core.units import bytes_to_mb

FIGURES = ("requested", "allocated", "allocated_non_preemptible")


def _zero() -> dict[str, float]:
    return {r: 0.0 for r in RESOURCES}


def _preemptibility(classes: dict[str, m.PriorityClass], default_class: str | None,
                    class_name: str | None, explicit: str) -> bool:
    name = class_name or default_class
    try:
        return m.resolve_priority(name, classes, explicit or None)[1]
    except ValueError:
        return m.resolve_priority(name, classes)[1]


def _sum_limit(a: float, b: float) -> float:
    """Limits add up, and an unlimited one (-1) makes the total unlimited."""
    return UNLIMITED if UNLIMITED in (a, b) else a + b


def queue_figures(queue_ids: Iterable[int]) -> dict[int, dict[str, dict[str, float]]]:
    """``{queue id: {"requested": {r: x}, "allocated": {...}, "allocated_non_preemptible": {...}}}`` for the
    queues' own workloads (every id given has an entry). One grouped query for the pods, one for the
    priority classes."""
    ids = list(queue_ids)
    out = {pk: {f: _zero() for f in FIGURES} for pk in ids}
    if not ids:
        return out
    rows_of_classes = list(PriorityClass.objects.all())
    classes = {pc.name: m.PriorityClass(name=pc.name, value=pc.value, preemptible=pc.preemptible)
               for pc in rows_of_classes}
    default_class = next((pc.name for pc in rows_of_classes if pc.global_default), None)
    gpu = Case(When(gpu_fraction__isnull=False, then=F("gpu_fraction") * F("gpu_devices")), default=F("gpu"),
               output_field=FloatField())
    on = Q(state__in=ALLOCATED_POD_STATES)
    rows = (Pod.objects.filter(workload__queue_id__in=ids, workload__state__in=ACTIVE_WORKLOAD_STATES)
            .values("workload__queue_id", "workload__priority_class__name", "workload__preemptibility")
            .annotate(gpu_all=Sum(gpu), cpu_all=Sum("cpu"), memory_all=Sum("memory"),
                      gpu_on=Sum(gpu, filter=on), cpu_on=Sum("cpu", filter=on), memory_on=Sum("memory", filter=on))
            .order_by())
    for row in rows:
        figures = out[row["workload__queue_id"]]
        preemptible = _preemptibility(classes, default_class, row["workload__priority_class__name"],
                                      row["workload__preemptibility"])
        requested = {"gpu": row["gpu_all"] or 0.0, "cpu": row["cpu_all"] or 0.0,
                     "memory": bytes_to_mb(row["memory_all"] or 0)}
        allocated = {"gpu": row["gpu_on"] or 0.0, "cpu": row["cpu_on"] or 0.0,
                     "memory": bytes_to_mb(row["memory_on"] or 0)}
        for r in RESOURCES:
            figures["requested"][r] += requested[r]
            figures["allocated"][r] += allocated[r]
            if not preemptible:
                figures["allocated_non_preemptible"][r] += allocated[r]
    return out


def project_quota_status(project: Project) -> dict[str, Any]:
    """``{"pools": {pool: {"deserved": {r: x}, "limit": {...}, "requested": {...}, "allocated": {...},
    "allocated_non_preemptible": {...}}}, "total": {same keys}}``, pools by name."""
    links = list(OwnerQueue.objects.filter(project=project).select_related("queue", "node_pool")
                 .order_by("node_pool__name"))
    figures = queue_figures(oq.queue_id for oq in links)
    pools: dict[str, dict[str, dict[str, float]]] = {}
    for oq in links:
        q = oq.queue
        pools[oq.node_pool.name] = {
            "deserved": {r: float(getattr(q, f"{r}_quota")) for r in RESOURCES},
            "limit": {r: float(getattr(q, f"{r}_limit")) for r in RESOURCES},
            **figures[q.pk],
        }
    total: dict[str, dict[str, float]] = {"deserved": _zero(), "limit": _zero(), **{f: _zero() for f in FIGURES}}
    for pool in pools.values():
        for r in RESOURCES:
            total["limit"][r] = _sum_limit(total["limit"][r], pool["limit"][r])
            for key in ("deserved", *FIGURES):
                total[key][r] += pool[key][r]
    return {"pools": pools, "total": total}
