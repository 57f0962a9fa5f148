"""Reads of the workloads app: workloads with their queue, class and pods (with their current why-pending:
``kaiweb.scheduling.selectors.workloads``)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from kaiweb.core.queries import related_count
from kaiweb.workloads.models import Pod, Workload

#: What a listing shows of a workload and of the rows it names (the rest is not read).
LISTED_COLUMNS = (
    "id", "cluster__name", "namespace", "name", "queue__name", "priority_class__name", "preemptibility",
    "min_member", "min_subgroup", "subgroups", "topology_constraint", "labels", "state", "submitted_at",
    "last_start_at", "last_eviction_at", "finished_at",
)


def workloads(with_pods: bool = False, listing: bool = False) -> QuerySet[Workload]:
    """Workloads with queue, priority class, cluster and pod count loaded in a fixed number of
    queries. A `listing` reads only the columns a listing shows (``LISTED_COLUMNS``): not for rows
    to change."""
    qs = (
        Workload.objects.select_related("queue", "priority_class", "cluster")
        .annotate(pod_count=related_count(Pod.objects.all(), "workload"))
        .order_by("-submitted_at", "namespace", "name")
    )
    if with_pods:
        qs = qs.prefetch_related(Prefetch("pods", queryset=Pod.objects.select_related("node").order_by("name")))
    if listing:
        qs = qs.only(*LISTED_COLUMNS)
    return qs

