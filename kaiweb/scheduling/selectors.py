"""Reads of the scheduling app: cycles, decisions, preemption events, why-pending, places in the waiting line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.db.models.fields.json import KeyTransform

from kaiweb.scheduling.models import (
    Decision,
    PendingReason,
    PreemptionEvent,
    SchedulingCycle,
    WaitingLine,
    line_key,
)


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


def _estimate(row: dict[str, Any], now: float | None, at: datetime | None, samples: int) -> StartEstimate:
    from django.utils import timezone

    from scheduler_core.eta import reason_text

    base = now if now is not None else 0.0

    def wait(value: Any) -> float | None:
        return None if value is None else round(max(0.0, float(value) - base), 1)

    def moment(seconds: float | None) -> datetime | None:
        return None if seconds is None or at is None else at + timedelta(seconds=seconds)

    def when(epoch: float) -> str:
        got = moment(max(0.0, epoch - base))
        return timezone.localtime(got).strftime("%H:%M") if got is not None else f"{epoch:.0f}"

    details = {"ahead_in_queue": row.get("ahead"), "queue": row.get("queue"), "pods": row.get("pods"),
               "gpus": row.get("gpus"), "gpus_per_pod": row.get("per_pod"), "whole_node": row.get("whole_node"),
               "frees_at": row.get("frees_at"), "node": row.get("node"), "horizon": row.get("horizon")}
    code = str(row.get("code") or "waits")
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
                    out[wid] = _estimate(got, row["estimated_now"], row["estimated_at"], row["estimate_samples"])
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
                    when[wid] = _estimate(est, row["estimated_now"], row["estimated_at"], row["estimate_samples"])
    return where, when
