"""Models of the reports app: what a scheduled usage report covers, and each of its runs."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models

from kaiweb.core.models import TimeStampedModel
from kaiweb.reports.choices import ReportFormat, ReportPeriod, ReportScope, RunStatus


class ReportDefinition(TimeStampedModel):
    """A usage report sent every week or month to its recipients, for the cluster, a department or a queue."""

    name = models.CharField(max_length=100, unique=True)
    period = models.CharField(max_length=16, choices=ReportPeriod.choices, default=ReportPeriod.MONTHLY)
    scope = models.CharField(max_length=16, choices=ReportScope.choices, default=ReportScope.CLUSTER)
    queue = models.ForeignKey(
        "queues.Queue", null=True, blank=True, on_delete=models.PROTECT, related_name="report_definitions",
        help_text="The department (a top-level queue) or the queue; empty for the whole cluster.",
    )
    recipients = models.JSONField(default=list, blank=True, help_text="E-mail addresses.")
    formats = models.JSONField(default=list, help_text='Files produced: any of "csv", "json", "pdf".')
    prices = models.JSONField(
        default=dict, blank=True,
        help_text='Price per GPU-hour per GPU model for showback, e.g. {"NVIDIA-A100-SXM4-80GB": 2.5}; '
                  'the key "*" prices every other model.',
    )
    currency = models.CharField(max_length=8, default="USD", blank=True)
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask", null=True, blank=True, editable=False, on_delete=models.SET_NULL,
        related_name="report_definition",
    )

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Every rule, each error under the field it is about (the page and the admin both show them)."""
        errors: dict[str, Any] = {}
        if self.scope == ReportScope.CLUSTER and self.queue_id is not None:
            errors["queue"] = "must be empty for a whole-cluster report"
        elif self.scope in (ReportScope.DEPARTMENT, ReportScope.QUEUE) and self.queue_id is None:
            errors["queue"] = f"is required for a {self.scope} report"
        elif self.scope == ReportScope.DEPARTMENT and self.queue.parent_id is not None:
            errors["queue"] = f"a department is a top-level queue; {self.queue.name!r} has a parent"
        recipients = self.recipients if isinstance(self.recipients, list) else None
        if recipients is None:
            errors["recipients"] = "must be a list of e-mail addresses"
        else:
            bad = []
            for address in recipients:
                try:
                    validate_email(address)
                except ValidationError:
                    bad.append(str(address))
            if bad:
                errors["recipients"] = f"not an e-mail address: {', '.join(bad)}"
        formats = self.formats if isinstance(self.formats, list) else None
        if not formats:
            errors["formats"] = "choose at least one of csv, json, pdf"
        elif set(formats) - set(ReportFormat.values):
            errors["formats"] = f"unknown format(s) {', '.join(sorted(map(str, set(formats) - set(ReportFormat.values))))}"
        if not isinstance(self.prices, dict):
            errors["prices"] = "must map GPU models to a price per GPU-hour"
        else:
            for model, price in self.prices.items():
                if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
                    errors["prices"] = f"{model}: the price per GPU-hour must be a number >= 0, not {price!r}"
                    break
        if errors:
            raise ValidationError(errors)


class ReportRun(models.Model):
    """One run of a definition over one period: the inputs it read, the lines it computed, the files."""

    definition = models.ForeignKey(ReportDefinition, on_delete=models.CASCADE, related_name="runs")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    trigger = models.CharField(max_length=16, default="schedule", help_text="schedule or manual")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    inputs = models.JSONField(default=dict, help_text="Everything the lines are computed from, as read.")
    lines = models.JSONField(default=dict, help_text="The computed lines and their total.")
    csv_content = models.TextField(blank=True)
    json_content = models.TextField(blank=True)
    pdf_content = models.BinaryField(blank=True, default=b"")
    emailed_to = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ("-started_at", "-id")
        indexes = [models.Index(fields=("definition", "period_start"), name="reports_run_def_period")]

    def __str__(self) -> str:
        return f"{self.definition} {self.period_start:%Y-%m-%d}…{self.period_end:%Y-%m-%d}"
