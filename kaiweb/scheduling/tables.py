"""Tables of the scheduling pages: preemption events and cycles."""

from __future__ import annotations

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html

from kaiweb.dashboard.formatting import fmt_duration
from kaiweb.scheduling.choices import CYCLE_STATUS_BADGE, PREEMPTION_ACTION_BADGE
from kaiweb.scheduling.models import PreemptionEvent, SchedulingCycle


class PreemptionTable(tables.Table):
    """Who was evicted, for whom, by which action and why."""

    at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="When", attrs={"td": {"class": "nowrap"}})
    action = tables.Column()
    victim_ref = tables.Column(verbose_name="Victim")
    victim_queue = tables.Column(verbose_name="Victim queue", order_by=("victim_queue__name",))
    preemptor_ref = tables.Column(verbose_name="Preemptor", empty_values=())
    preemptor_queue = tables.Column(verbose_name="Preemptor queue", order_by=("preemptor_queue__name",))
    reason = tables.Column()
    message = tables.Column(verbose_name="Why", orderable=False)

    class Meta:
        model = PreemptionEvent
        fields = ("at", "action", "victim_ref", "victim_queue", "preemptor_ref", "preemptor_queue", "reason", "message")
        template_name = "includes/table.html"
        attrs = {"class": "table", "id": "preemption-table"}
        empty_text = "No preemption matches these filters."
        order_by = ("-at",)

    def render_at(self, record: PreemptionEvent) -> str:
        return format_html('<a href="{}">{}</a>', reverse("scheduling:preemption", args=[record.pk]),
                           record.at.strftime("%Y-%m-%d %H:%M:%S"))

    def render_action(self, record: PreemptionEvent) -> str:
        return format_html('<span class="badge {}">{}</span>', PREEMPTION_ACTION_BADGE.get(record.action, "gray"),
                           record.get_action_display())

    def render_victim_ref(self, record: PreemptionEvent) -> str:
        if record.victim_id:
            return format_html('<a href="{}">{}</a>', reverse("workloads:detail", args=[record.victim_id]), record.victim_ref)
        return record.victim_ref

    def render_preemptor_ref(self, record: PreemptionEvent) -> str:
        if not record.preemptor_ref:
            return format_html('<span class="faint">{}</span>', "none (stale gang)" if record.action == "stale-gang" else "—")
        if record.preemptor_id:
            return format_html('<a href="{}">{}</a>', reverse("workloads:detail", args=[record.preemptor_id]),
                               record.preemptor_ref)
        return record.preemptor_ref

    def render_message(self, value: str) -> str:
        return format_html('<span class="muted">{}</span>', value if len(value) <= 140 else value[:140] + "…")


class CycleTable(tables.Table):
    """One row per scheduling cycle: timings and counts."""

    id = tables.Column(verbose_name="Cycle")
    started_at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Started", attrs={"td": {"class": "nowrap"}})
    shard = tables.Column(order_by=("shard__name",))
    status = tables.Column()
    duration_seconds = tables.Column(verbose_name="Duration", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    jobs_considered = tables.Column(verbose_name="Jobs", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    binds = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    pipelined = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    evictions = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    pending = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    trigger = tables.Column()

    class Meta:
        model = SchedulingCycle
        fields = ("id", "started_at", "shard", "status", "duration_seconds", "jobs_considered", "binds",
                  "pipelined", "evictions", "pending", "trigger")
        template_name = "includes/table.html"
        attrs = {"class": "table", "id": "cycle-table"}
        empty_text = "No cycle matches these filters."
        order_by = ("-started_at",)

    def render_id(self, record: SchedulingCycle) -> str:
        return format_html('<a href="{}">#{}</a>', reverse("scheduling:cycle", args=[record.pk]), record.pk)

    def render_shard(self, record: SchedulingCycle) -> str:
        return record.shard.name if record.shard else "—"

    def render_status(self, record: SchedulingCycle) -> str:
        return format_html('<span class="badge {}">{}</span>', CYCLE_STATUS_BADGE.get(record.status, "gray"),
                           record.get_status_display())

    def render_duration_seconds(self, value: float) -> str:
        return fmt_duration(value)
