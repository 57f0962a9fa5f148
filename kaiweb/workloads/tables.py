"""The workloads list as a django-tables2 table: columns, sorting and paging; the rows are a template."""

from __future__ import annotations

from typing import Any

import django_tables2 as tables

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
    place = tables.Column(empty_values=(), verbose_name="Place", orderable=False,
                          attrs={"td": {"class": "num"}, "th": {"class": "num",
                                 "title": "Place in the order the latest cycle tried the pending jobs: in the shard (in the queue)"}})
    start = tables.Column(empty_values=(), verbose_name="Est. start", orderable=False,
                          attrs={"td": {"class": "num"}, "th": {"class": "num",
                                 "title": "Estimated wait until it starts: median (80th percentile). New arrivals are "
                                          "not guessed: an estimate only moves later when new work outranks the job"}})
    reason = tables.Column(empty_values=(), verbose_name="Why pending", orderable=False)
    submitted_at = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Submitted", attrs={"td": {"class": "nowrap"}})

    class Meta:
        model = Workload
        fields = ("name", "queue", "state", "priority_class", "pods", "gpus", "place", "start", "reason", "submitted_at")
        template_name = "includes/table.html"
        attrs = {"class": "table", "id": "workload-table"}
        empty_text = "No workload matches these filters."
        order_by = ("-submitted_at",)

    row_template = "workloads/rows/workload.html"
    state_badge = WORKLOAD_STATE_BADGE
    # Filled by the view for the shown page only: {workload id: {"pods": n, "gpus": x}}.
    figures: dict[int, dict[str, float]] = {}
    # Filled by the view for the shown page only: {workload id: its place in the waiting line}.
    places: dict[int, Any] = {}
    # Filled by the view for the shown page only: {workload id: its start-time estimate}.
    estimates: dict[int, Any] = {}
