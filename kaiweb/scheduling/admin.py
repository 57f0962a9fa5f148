"""Admin of the scheduling app: cycles, decisions, preemptions, why-pending and queue status (read-only history)."""

from __future__ import annotations

from django.contrib import admin

from kaiweb.core.admin import ReadOnlyAdmin
from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, QueueStatus, SchedulingCycle


@admin.register(SchedulingCycle)
class SchedulingCycleAdmin(ReadOnlyAdmin):
    list_display = ("id", "started_at", "shard", "status", "duration_seconds", "binds", "evictions", "pending")
    list_filter = ("status", "trigger", "shard")
    date_hierarchy = "started_at"


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ("id", "cycle", "kind", "status", "workload_ref", "pod_name", "node_name", "reason")
    list_filter = ("kind", "status", "reason")
    search_fields = ("workload_ref", "pod_name", "node_name", "idempotency_key")


@admin.register(PreemptionEvent)
class PreemptionEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "action", "victim_ref", "victim_queue", "preemptor_ref", "preemptor_queue", "reason")
    list_filter = ("action", "reason")
    search_fields = ("victim_ref", "preemptor_ref")
    list_select_related = ("victim_queue", "preemptor_queue")
    date_hierarchy = "at"


@admin.register(PendingReason)
class PendingReasonAdmin(ReadOnlyAdmin):
    list_display = ("workload", "reason", "is_current", "recorded_at")
    list_filter = ("reason", "is_current")
    list_select_related = ("workload",)


@admin.register(QueueStatus)
class QueueStatusAdmin(ReadOnlyAdmin):
    list_display = ("queue", "recorded_at", "cycle", "pending_workloads", "running_workloads")
    list_select_related = ("queue",)
    list_filter = ("queue",)
