"""Reads of the scheduling app: cycles, decisions, preemption events, why-pending, places in the waiting line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

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
