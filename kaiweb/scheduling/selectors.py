"""Reads of the scheduling app: cycles, decisions, preemption events, why-pending, places in the waiting line,
and the reads that join the domain apps' rows with what the cycles recorded of them: each queue's
latest status and its figures (the tree the API serves), workloads with their current why-pending."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
    next_wait: QueueWait | None = None  # the estimated wait of its next job, when estimated


def queue_depth() -> list[QueueDepth]:
    """The queue depth per leaf queue and priority as the shards' latest cycles counted it
    (``WaitingLine.depth``), summed over shards; by queue, then priority, highest first, with the
    estimated wait of each next job (``queue_waits``). One query; its size follows the number of queues
    and priorities, not of workloads."""
    merged: dict[tuple[str, int], list[float]] = {}
    lines = list(WaitingLine.objects.values_list("depth", "queue_estimates", "estimated_at"))
    for depth, _, _ in lines:
        for row in depth or []:
            key = (str(row.get("queue", "")), int(row.get("priority", 0)))
            got = merged.setdefault(key, [0, 0.0, 0.0])
            got[0] += int(row.get("jobs", 0))
            got[1] += float(row.get("gpus", 0.0))
            got[2] = max(got[2], float(row.get("oldest_wait_seconds", 0.0)))
    waits = queue_waits([(rows, at) for _, rows, at in lines if at is not None])
    return [QueueDepth(q, p, int(v[0]), round(v[1], 4), v[2], waits.get((q, p)))
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


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """When a pending workload may start, as the latest refresh of its shard's estimates saw it: the
    median and the 80th percentile (None: not within the horizon), as waits from ``estimated_at`` and
    as moments, and the reason in plain words. Arrivals are not guessed, so it can only move later when new
    work that outranks the workload arrives (or a run ends later than drawn)."""

    p50_wait_seconds: float | None
    p80_wait_seconds: float | None
    p50_at: datetime | None
    p80_at: datetime | None
    code: str
    reason: str
    samples: int
    estimated_at: datetime | None


def estimate_of(row: dict[str, Any], now: float | None, at: datetime | None, samples: int,
              clock_text: Callable[[datetime], str] | None = None) -> StartEstimate:
    """A stored estimate row (``WaitingLine.estimates``) as a ``StartEstimate``; the reason's times in
    ``clock_text`` (default: ``14:20`` in the current time zone)."""
    from django.utils import timezone

    from scheduler_core.eta import WAITS, reason_text

    base = now if now is not None else 0.0

    def wait(value: Any) -> float | None:
        return None if value is None else round(max(0.0, float(value) - base), 1)

    def moment(seconds: float | None) -> datetime | None:
        return None if seconds is None or at is None else at + timedelta(seconds=seconds)

    def when(epoch: float) -> str:
        got = moment(max(0.0, epoch - base))
        if got is None:
            return f"{epoch:.0f}"
        return clock_text(got) if clock_text is not None else timezone.localtime(got).strftime("%H:%M")

    details = {"ahead_in_queue": row.get("ahead"), "queue": row.get("queue"), "pods": row.get("pods"),
               "gpus": row.get("gpus"), "gpus_per_pod": row.get("per_pod"), "whole_node": row.get("whole_node"),
               "frees_at": row.get("frees_at"), "node": row.get("node"), "horizon": row.get("horizon"),
               "after": row.get("after")}
    code = str(row.get("code") or WAITS)
    p50, p80 = wait(row.get("p50")), wait(row.get("p80"))
    return StartEstimate(p50, p80, moment(p50), moment(p80), code, reason_text(code, details, when), samples, at)


def start_estimates(workload_ids: Iterable[int]) -> dict[int, StartEstimate]:
    """The start-time estimates of these workloads (``WaitingLine.estimates``); a workload the latest
    refresh did not estimate has none. Only the asked-for keys are read, as ``places`` does."""
    ids = sorted(set(workload_ids))
    out: dict[int, StartEstimate] = {}
    for i in range(0, len(ids), _PLACES_CHUNK):
        chunk = ids[i:i + _PLACES_CHUNK]
        keys = {line_key(wid): KeyTransform(line_key(wid), "estimates") for wid in chunk}
        for row in WaitingLine.objects.filter(estimated_at__isnull=False).values(
                "estimated_at", "estimated_now", "estimate_samples", **keys):
            for wid in chunk:
                got = row[line_key(wid)]
                if isinstance(got, dict):
                    out[wid] = estimate_of(got, row["estimated_now"], row["estimated_at"], row["estimate_samples"])
    return out


@dataclass(frozen=True, slots=True)
class QueueWait:
    """The estimated wait of the next pending job (in the engine's order) of a leaf queue at a priority."""

    queue: str
    priority: int
    p50_wait_seconds: float | None
    p80_wait_seconds: float | None
    workload_id: int | None
    estimated_at: datetime | None


def queue_waits(lines: Iterable[tuple[Any, datetime]] | None = None) -> dict[tuple[str, int], QueueWait]:
    """Per (leaf queue, priority), the estimated wait of its next job, over the shards' latest refreshes
    (the shortest when several shards hold the queue). ``lines``: the waiting lines' (queue_estimates,
    estimated_at) when read already; else one query."""
    out: dict[tuple[str, int], QueueWait] = {}
    if lines is None:
        lines = WaitingLine.objects.filter(estimated_at__isnull=False).values_list("queue_estimates", "estimated_at")
    for rows, at in lines:
        for row in rows or []:
            if not row.get("estimated"):
                continue
            key = (str(row.get("queue", "")), int(row.get("priority", 0)))
            got = QueueWait(key[0], key[1], row.get("p50_wait_seconds"), row.get("p80_wait_seconds"),
                            row.get("workload"), at)
            held = out.get(key)
            if held is None or (got.p50_wait_seconds is not None and (
                    held.p50_wait_seconds is None or got.p50_wait_seconds < held.p50_wait_seconds)):
                out[key] = got
    return out


def places_and_estimates(workload_ids: Iterable[int]) -> tuple[dict[int, Place], dict[int, StartEstimate]]:
    """``places`` and ``start_estimates`` of these workloads in one read of the waiting lines (a page's rows)."""
    ids = sorted(set(workload_ids))
    where: dict[int, Place] = {}
    when: dict[int, StartEstimate] = {}
    for i in range(0, len(ids), _PLACES_CHUNK):
        chunk = ids[i:i + _PLACES_CHUNK]
        keys = {f"p{line_key(wid)}": KeyTransform(line_key(wid), "positions") for wid in chunk}
        keys |= {f"e{line_key(wid)}": KeyTransform(line_key(wid), "estimates") for wid in chunk}
        for row in WaitingLine.objects.values("cycle_id", "recorded_at", "estimated_at", "estimated_now",
                                              "estimate_samples", **keys):
            for wid in chunk:
                got = row[f"p{line_key(wid)}"]
                if isinstance(got, list) and len(got) == 2:
                    where[wid] = Place(int(got[0]), int(got[1]), row["cycle_id"], row["recorded_at"])
                est = row[f"e{line_key(wid)}"]
                if isinstance(est, dict) and row["estimated_at"] is not None:
                    when[wid] = estimate_of(est, row["estimated_now"], row["estimated_at"], row["estimate_samples"])
    return where, when
