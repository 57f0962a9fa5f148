"""The workloads list as a django-tables2 table: sortable columns, sensible defaults."""

from __future__ import annotations

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html

from kaiweb.dashboard.formatting import fmt_amount
from kaiweb.workloads.choices import WORKLOAD_STATE_BADGE
from kaiweb.workloads.models import Workload


class WorkloadTable(tables.Table):
    """One row per PodGroup; the why-pending column shows the current reason in words."""

    name = tables.Column(verbose_name="Workload", order_by=("namespace", "name"), attrs={"td": {"class": "nowrap"}})
    queue = tables.Column(order_by=("queue__name",), attrs={"td": {"class": "nowrap"}})
    state = tables.Column()
    priority_class = tables.Column(verbose_name="Priority", order_by=("priority_class__value",),
                                   attrs={"td": {"class": "nowrap"}})
    pods = tables.Column(empty_values=(), verbose_name="Pods", orderable=False,
                         attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    gpus = tables.Column(empty_values=(), verbose_name="GPUs", orderable=False,
                         attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    reason = tables.Column(empty_values=(), verbose_name="Why pending", orderable=False)
    submitted_at = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Submitted", attrs={"td": {"class": "nowrap"}})

    class Meta:
        model = Workload
        fields = ("name", "queue", "state", "priority_class", "pods", "gpus", "reason", "submitted_at")
        template_name = "includes/table.html"
        attrs = {"class": "table", "id": "workload-table"}
        empty_text = "No workload matches these filters."
        order_by = ("-submitted_at",)

    def render_name(self, record: Workload) -> str:
        return format_html('<a href="{}">{}/{}</a>', reverse("workloads:detail", args=[record.pk]),
                           record.namespace, record.name)

    def render_queue(self, record: Workload) -> str:
        return format_html('<a href="{}">{}</a>', reverse("queues:detail", args=[record.queue.name]), record.queue.name)

    def render_state(self, record: Workload) -> str:
        return format_html('<span class="badge {}">{}</span>', WORKLOAD_STATE_BADGE.get(record.state, "gray"),
                           record.get_state_display())

    def render_priority_class(self, record: Workload) -> str:
        pc = record.priority_class
        return format_html("{} <span class=\"faint\">{}</span>", pc.name, pc.value) if pc else "default"

    # Filled by the view for the shown page only: {workload id: {"pods": n, "gpus": x}}.
    figures: dict[int, dict[str, float]] = {}

    def render_pods(self, record: Workload) -> str:
        return str(int(self.figures.get(record.pk, {}).get("pods", 0)))

    def render_gpus(self, record: Workload) -> str:
        return fmt_amount(self.figures.get(record.pk, {}).get("gpus", 0), "gpu")

    def render_reason(self, record: Workload) -> str:
        reasons = getattr(record, "current_reasons", None) or []
        if record.state != "pending" or not reasons:
            return ""
        r = reasons[0]
        return format_html('<span class="badge yellow">{}</span> <span class="muted">{}</span>', r.reason,
                           (r.message[:110] + "…") if len(r.message) > 110 else r.message)
