"""Tables of the scheduling pages: preemption events and cycles (columns and sorting; rows in templates)."""

from __future__ import annotations

import django_tables2 as tables

from kaiweb.scheduling.choices import CYCLE_STATUS_BADGE, PREEMPTION_ACTION_BADGE, PreemptionAction
from kaiweb.scheduling.models import SchedulingCycle


class PreemptionTable(tables.Table):
    """Who was evicted, for whom, by which action and why: one row per job and cycle, with its pod count
    (rows are `grouped_preemptions` dicts)."""

    last_at = tables.Column(verbose_name="When", attrs={"td": {"class": "nowrap"}})
    action = tables.Column()
    victim_ref = tables.Column(verbose_name="Victim")
    pods = tables.Column(verbose_name="Pods", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    victim_queue__name = tables.Column(verbose_name="Victim queue")
    preemptor_ref = tables.Column(verbose_name="Preemptor", empty_values=())
    preemptor_queue__name = tables.Column(verbose_name="Preemptor queue")
    reason = tables.Column()
    message = tables.Column(verbose_name="Why", orderable=False)

    class Meta:
        template_name = "includes/table.html"
        attrs = {"class": "table", "id": "preemption-table"}
        empty_text = "No preemption matches these filters."
        order_by = ("-last_at",)

    row_template = "scheduling/rows/preemption.html"
    action_badge = PREEMPTION_ACTION_BADGE
    action_labels = dict(PreemptionAction.choices)


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

    row_template = "scheduling/rows/cycle.html"
    status_badge = CYCLE_STATUS_BADGE
