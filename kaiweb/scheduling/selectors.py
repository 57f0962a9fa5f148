"""Reads of the scheduling app: cycles, decisions, preemption events, why-pending, places in the waiting line,
and the reads that join the domain apps' rows with what the cycles recorded of them: each queue's
latest status and its figures (the tree the API serves), workloads with their current why-pending."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.fields.json import KeyTransform

from kaiweb.core.changes import state_key
from kaiweb.core.choices import RESOURCES
from kaiweb.queues.models import Queue
from kaiweb.scheduling.models import (
    Decision,
    PendingReason,
    PreemptionEvent,
    QueueStatus,
    SchedulingCycle,
    WaitingLine,
    line_key,
)
from kaiweb.workloads import selectors as workload_selectors
from kaiweb.workloads.models import Workload


def cycles() -> QuerySet[SchedulingCycle]:
    return SchedulingCycle.objects.select_related("shard", "shard__cluster").order_by("-started_at", "-id")


def latest_cycle() -> SchedulingCycle | None:
    return SchedulingCycle.objects.order_by("-started_at", "-id").first()


def decisions() -> QuerySet[Decision]:
    return Decision.objects.select_related("cycle", "workload", "node").order_by("-cycle__started_at", "id")


def preemptions() -> QuerySet[PreemptionEvent]:
    """Preemption events with both workloads and both queues loaded."""
    return PreemptionEvent.objects.select_related(
        "preemptor", "victim", "preemptor_queue", "victim_queue", "cycle"
    ).order_by("-at", "-id")


def pending_reasons() -> QuerySet[PendingReason]:
    return PendingReason.objects.select_related("workload", "workload__queue").order_by("-recorded_at", "-id")


@dataclass(frozen=True, slots=True)
class Place:
    """A pending workload's place in its shard's waiting line, as the shard's latest cycle tried it."""

    in_shard: int
    in_queue: int
    cycle_id: int | None
    recorded_at: datetime | None


#: workloads looked up per query of ``places`` (each is one key read out of every shard's line)
_PLACES_CHUNK = 200


def places(workload_ids: Iterable[int]) -> dict[int, Place]:
    """The places of these workloads in their shards' waiting lines (``WaitingLine``); a workload
    the latest cycle did not try has none. Only the asked-for keys are read out of each line, so
    the cost follows the number asked for, not the length of the lines."""
    ids = sorted(set(workload_ids))
    out: dict[int, Place] = {}
    for i in range(0, len(ids), _PLACES_CHUNK):
        chunk = ids[i:i + _PLACES_CHUNK]
        keys = {line_key(wid): KeyTransform(line_key(wid), "positions") for wid in chunk}
        for row in WaitingLine.objects.values("cycle_id", "recorded_at", **keys):
            for wid in chunk:
                got = row[line_key(wid)]
                if isinstance(got, list) and len(got) == 2:
                    out[wid] = Place(int(got[0]), int(got[1]), row["cycle_id"], row["recorded_at"])
    return out


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """The pending workloads of one leaf queue at one priority, over all shards' latest cycles."""

    queue: str
    priority: int
    jobs: int
    gpus: float
    oldest_wait_seconds: float  # as of the cycle that recorded it


def queue_depth() -> list[QueueDepth]:
    """The queue depth per leaf queue and priority as the shards' latest cycles counted it
    (``WaitingLine.depth``), summed over shards; by queue, then priority, highest first. One
    query; its size follows the number of queues and priorities, not of workloads."""
    merged: dict[tuple[str, int], list[float]] = {}
    for depth in WaitingLine.objects.values_list("depth", flat=True):
        for row in depth or []:
            key = (str(row.get("queue", "")), int(row.get("priority", 0)))
            got = merged.setdefault(key, [0, 0.0, 0.0])
            got[0] += int(row.get("jobs", 0))
            got[1] += float(row.get("gpus", 0.0))
            got[2] = max(got[2], float(row.get("oldest_wait_seconds", 0.0)))
    return [QueueDepth(q, p, int(v[0]), round(v[1], 4), v[2])
            for (q, p), v in sorted(merged.items(), key=lambda kv: (kv[0][0], -kv[0][1]))]


# ------------------------------------------------------------------ queues with their recorded status


def latest_statuses(queue_ids: list[int] | None = None) -> dict[int, QueueStatus]:
    """The most recent recorded status of each queue (two queries, however long the history)."""
    latest = QueueStatus.objects.filter(queue=OuterRef("pk")).order_by("-recorded_at", "-id").values("id")[:1]
    base = Queue.objects.all() if queue_ids is None else Queue.objects.filter(pk__in=queue_ids)
    ids = [pk for pk in base.annotate(latest_id=Subquery(latest)).values_list("latest_id", flat=True) if pk]
    return {s.queue_id: s for s in QueueStatus.objects.filter(pk__in=ids)}


#: a queue's figures per resource: its settings, then what its latest status recorded (queue units)
FIGURES = ("quota", "limit", "over_quota_weight", "allocated", "fair_share", "requested", "pending")


def queue_figures(queue: Queue, status: QueueStatus | None) -> dict[str, dict[str, Any]]:
    """Per resource, the queue's quota, limit and over-quota weight, and the allocated, fair share,
    requested and pending its latest status recorded (None without one). The one place the pages and
    the API read a queue's figures: the keys are the API's."""
    out = {}
    for r in RESOURCES:
        fig: dict[str, Any] = {
            "quota": getattr(queue, f"{r}_quota"),
            "limit": getattr(queue, f"{r}_limit"),
            "over_quota_weight": getattr(queue, f"{r}_over_quota_weight"),
            "allocated": None, "fair_share": None, "requested": None, "pending": None,
        }
        if status is not None:
            fig["allocated"] = (status.allocated or {}).get(r)
            fig["fair_share"] = (status.fair_share or {}).get(r)
            fig["requested"] = (status.requested or {}).get(r)
            fig["pending"] = (status.pending or {}).get(r)
        out[r] = fig
    return out


#: the figures the API's tree serves of each resource (``QueueTreeNodeSerializer``)
TREE_FIGURES = ("quota", "limit", "over_quota_weight", "allocated", "fair_share", "pending")


@dataclass(slots=True)
class TreeNode:
    """One queue of the tree with its figures and children, ready to serialise."""

    queue: Queue
    status: QueueStatus | None
    children: list[TreeNode] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        q = self.queue
        figures = queue_figures(q, self.status)
        return {
            "id": q.pk,
            "name": q.name,
            "display_name": q.display_name,
            "parent": q.parent.name if q.parent_id and q.parent else None,
            "priority": q.priority,
            # a figure no cycle recorded yet is 0 in the API
            "resources": {r: {k: 0.0 if figures[r][k] is None else figures[r][k] for k in TREE_FIGURES}
                          for r in RESOURCES},
            "pending_workloads": self.status.pending_workloads if self.status else 0,
            "running_workloads": self.status.running_workloads if self.status else 0,
            "status_recorded_at": self.status.recorded_at if self.status else None,
            "children": [c.as_dict() for c in self.children],
        }


def queue_tree() -> list[TreeNode]:
    """The whole tree (roots sorted by name, children too) with each queue's latest status."""
    all_queues = list(Queue.objects.select_related("parent").order_by("name"))
    statuses = latest_statuses()
    nodes = {q.pk: TreeNode(q, statuses.get(q.pk)) for q in all_queues}
    roots: list[TreeNode] = []
    for q in all_queues:
        node = nodes[q.pk]
        if q.parent_id in nodes:
            nodes[q.parent_id].children.append(node)
        else:
            roots.append(node)
    return roots


def queue_tree_data() -> list[dict[str, Any]]:
    """The tree as the API serves it (``TreeNode.as_dict``), computed once per committed change of
    the queues or their recorded status (``core.changes.state_key("queues", ...)``: once per
    cycle) and then served from the cache, whatever the number of requests."""
    key = state_key("queues", "tree")
    if key is None:
        return [node.as_dict() for node in queue_tree()]
    data: list[dict[str, Any]] | None = cache.get(key)
    if data is None:
        data = [node.as_dict() for node in queue_tree()]
        cache.set(key, data, timeout=3600)
    return data


# ------------------------------------------------------------------ workloads with their why-pending


def workloads(with_pods: bool = False, listing: bool = False) -> QuerySet[Workload]:
    """``workloads.selectors.workloads`` with each workload's current pending reason loaded (as
    ``current_pending``, a list of 0 or 1) in one more query."""
    return workload_selectors.workloads(with_pods=with_pods, listing=listing).prefetch_related(
        Prefetch("pending_reasons", queryset=PendingReason.objects.filter(is_current=True), to_attr="current_pending")
    )


def pending_history(workload: Workload) -> QuerySet[PendingReason]:
    """Every recorded why-pending of a workload, newest first."""
    return PendingReason.objects.filter(workload=workload).order_by("-recorded_at", "-id")
