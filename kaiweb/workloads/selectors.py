"""Reads of the workloads app: workloads with their queue, class, pods and current why-pending."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from kaiweb.core.queries import related_count
from kaiweb.scheduling.models import PendingReason
from kaiweb.workloads.models import Pod, Workload


def workloads(with_pods: bool = False) -> QuerySet[Workload]:
    """Workloads with queue, priority class, cluster, pod count and the current pending reason
    (as `current_pending`, a list of 0 or 1) loaded in a fixed number of queries."""
    qs = (
        Workload.objects.select_related("queue", "priority_class", "cluster")
        .annotate(pod_count=related_count(Pod.objects.all(), "workload"))
        .prefetch_related(
            Prefetch(
                "pending_reasons", queryset=PendingReason.objects.filter(is_current=True), to_attr="current_pending"
            )
        )
        .order_by("-submitted_at", "namespace", "name")
    )
    if with_pods:
        qs = qs.prefetch_related(Prefetch("pods", queryset=Pod.objects.select_related("node").order_by("name")))
    return qs


def pending_history(workload: Workload) -> QuerySet[PendingReason]:
    """Every recorded why-pending of a workload, newest first."""
    return workload.pending_reasons.order_by("-recorded_at", "-id")
