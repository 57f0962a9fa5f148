"""Read helpers for the pages (UI-only): the queue tree with current figures, cluster totals, series.

Each helper runs a fixed number of queries whatever the number of queues, nodes or workloads,
which is what keeps every page inside its query budget (tests/kaiweb/*/test_views*.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, Sum

from kaiweb.core.choices import RESOURCES
from scheduler_core.units import mb_to_bytes


@dataclass
class QueueRow:
    """One queue of the tree, with its place in it and its latest recorded figures."""

    queue: Any
    depth: int
    path: str  # "/department-a/team-x/": a prefix test finds every descendant
    children: int
    status: Any | None
    pending_workloads: int = 0
    running_workloads: int = 0
    editable: bool = False
    parent_name: str = ""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return self.children == 0

    @property
    def over_fair_share(self) -> list[str]:
        """The resources in which the queue holds more than its fair share."""
        return [r for r, f in self.resources.items()
                if f["fair_share"] is not None and f["allocated"] is not None
                and f["allocated"] > f["fair_share"] + 1e-6]


def latest_statuses(queue_ids: list[int] | None = None) -> dict[int, Any]:
    """The most recent QueueStatus of each queue (the control plane's selector; two queries)."""
    from kaiweb.scheduling.selectors import latest_statuses as select_latest

    return select_latest(queue_ids)


def queue_tree(user: Any = None) -> list[QueueRow]:
    """Every queue in depth-first order (siblings by name) with its figures as of the latest cycle
    that recorded it (workloads pending and running in its subtree too): three queries in all,
    whatever the number of workloads."""
    from kaiweb.queues.models import Queue
    from kaiweb.ui.access import editable_queue_ids

    queues = list(Queue.objects.order_by("name"))
    statuses = latest_statuses()
    editable = editable_queue_ids(user) if user is not None else frozenset()
    kids: dict[int | None, list[Any]] = {}
    by_id = {q.pk: q for q in queues}
    for q in queues:
        parent = q.parent_id if q.parent_id in by_id else None
        kids.setdefault(parent, []).append(q)

    rows: list[QueueRow] = []

    def walk(q: Any, depth: int, prefix: str, seen: set[int]) -> None:
        if q.pk in seen:  # a cycle cannot be saved, but never loop on bad data
            return
        seen.add(q.pk)
        path = f"{prefix}{q.name}/"
        row = QueueRow(queue=q, depth=depth, path=path, children=len(kids.get(q.pk, [])),
                       status=statuses.get(q.pk),
                       editable=editable is None or q.pk in (editable or ()),
                       parent_name=by_id[q.parent_id].name if q.parent_id in by_id else "")
        row.resources = queue_resources(q, row.status)
        if row.status is not None:  # the cycle counted the queue's subtree
            row.pending_workloads, row.running_workloads = row.status.pending_workloads, row.status.running_workloads
        rows.append(row)
        for child in kids.get(q.pk, []):
            walk(child, depth + 1, path, seen)

    seen: set[int] = set()
    for top in kids.get(None, []):
        walk(top, 0, "/", seen)
    return rows


def queue_resources(queue: Any, status: Any | None) -> dict[str, dict[str, Any]]:
    """Per resource: quota, limit, over-quota weight from the queue; allocated, fair share, requested
    and pending from its status (``scheduling.selectors.queue_figures``, the API's keys)."""
    from kaiweb.scheduling.selectors import queue_figures

    return queue_figures(queue, status)


@dataclass
class ClusterTotals:
    nodes: int
    ready_nodes: int
    gpu_total: float
    cpu_total: float  # millicores
    memory_total: float  # bytes
    gpu_allocated: float
    cpu_allocated: float
    memory_allocated: float

    @property
    def gpu_pct(self) -> float:
        return 100.0 * self.gpu_allocated / self.gpu_total if self.gpu_total else 0.0

    @property
    def cpu_pct(self) -> float:
        return 100.0 * self.cpu_allocated / self.cpu_total if self.cpu_total else 0.0


def cluster_totals(tree: list[QueueRow]) -> ClusterTotals:
    """Capacity of ready nodes (one aggregate over the nodes) and what the queues hold: the sum of
    the top-level rows of ``tree`` (``queue_tree()``), as the latest cycle recorded each (queue
    units: memory in MB). Nothing here grows with the number of pods."""
    from kaiweb.cluster.models import Node

    cap = Node.objects.aggregate(
        node_count=Count("id"), ready_count=Count("id", filter=Q(ready=True)),
        gpu=Sum("allocatable_gpu", filter=Q(ready=True)), cpu=Sum("allocatable_cpu", filter=Q(ready=True)),
        memory=Sum("allocatable_memory", filter=Q(ready=True)),
    )
    used = dict.fromkeys(RESOURCES, 0.0)
    for row in tree:
        if row.depth == 0:
            for r in RESOURCES:
                used[r] += float(row.resources[r]["allocated"] or 0)
    return ClusterTotals(
        nodes=cap["node_count"] or 0, ready_nodes=cap["ready_count"] or 0, gpu_total=float(cap["gpu"] or 0),
        cpu_total=float(cap["cpu"] or 0), memory_total=float(cap["memory"] or 0),
        gpu_allocated=used["gpu"], cpu_allocated=used["cpu"], memory_allocated=mb_to_bytes(used["memory"]),
    )


def leaf_queue_ids() -> list[int]:
    from kaiweb.queues.models import Queue

    return list(Queue.objects.filter(children__isnull=True).values_list("pk", flat=True))


def usage_series(resource: str, since: datetime, until: datetime | None = None,
                 queue_ids: list[int] | None = None) -> list[tuple[datetime, float]]:
    """Average amount in use per usage bucket (value / width), summed over the given queues.

    With no queue ids, the leaf queues are summed (parents would count their children twice).
    One query, aggregated by the database.
    """
    from kaiweb.usage.models import UsageBucket

    ids = queue_ids if queue_ids is not None else leaf_queue_ids()
    qs = UsageBucket.objects.filter(resource=resource, start__gte=since, queue_id__in=ids)
    if until is not None:
        qs = qs.filter(start__lt=until)
    rows = qs.values("start", "width_seconds").annotate(total=Sum("value")).order_by("start")
    return [(row["start"], row["total"] / row["width_seconds"]) for row in rows]


def fragmentation_series(since: datetime) -> list[tuple[datetime, float, float]]:
    """Free and stranded GPUs per minute (summed over shards, averaged over the minute's cycles), from
    the figures each cycle records. One query, aggregated by the database: at most one row a minute."""
    from django.db.models import Avg
    from django.db.models.functions import TruncMinute

    from kaiweb.scheduling.models import SchedulingCycle

    rows = (SchedulingCycle.objects.filter(started_at__gte=since, stranded_gpus__isnull=False)
            .annotate(minute=TruncMinute("started_at")).values("minute", "shard_id")
            .annotate(free=Avg("free_gpus"), stranded=Avg("stranded_gpus")).order_by("minute"))
    per_minute: dict[datetime, list[float]] = {}
    for row in rows:
        acc = per_minute.setdefault(row["minute"], [0.0, 0.0])
        acc[0] += row["free"] or 0.0
        acc[1] += row["stranded"] or 0.0
    return [(t, free, stranded) for t, (free, stranded) in per_minute.items()]


def status_history(queue: Any, limit: int = 720) -> list[Any]:
    """The queue's most recent recorded figures (oldest first), bounded so a busy day stays cheap."""
    from kaiweb.scheduling.models import QueueStatus

    rows = list(QueueStatus.objects.filter(queue=queue).order_by("-recorded_at", "-id")
                .only("recorded_at", "allocated", "fair_share", "requested")[:limit])
    rows.reverse()
    return rows
