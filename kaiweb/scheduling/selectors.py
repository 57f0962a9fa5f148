"""Reads of the scheduling app: cycles, decisions, preemption events, why-pending."""

from __future__ import annotations

from django.db.models import QuerySet

from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, SchedulingCycle


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
