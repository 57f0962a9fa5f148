"""Choices of the reports app: period, scope, file formats, run status (with their badge colours)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class ReportPeriod(models.TextChoices):
    WEEKLY = "weekly", _("Weekly (Monday to Monday, UTC)")
    MONTHLY = "monthly", _("Monthly (calendar month, UTC)")


class ReportScope(models.TextChoices):
    CLUSTER = "cluster", _("The whole cluster (a line per department)")
    DEPARTMENT = "department", _("A department (a line per leaf queue)")
    QUEUE = "queue", _("A queue (one line)")


class ReportFormat(models.TextChoices):
    CSV = "csv", _("CSV")
    JSON = "json", _("JSON")
    PDF = "pdf", _("PDF with charts")


class RunStatus(models.TextChoices):
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")


RUN_STATUS_BADGE = {RunStatus.RUNNING: "blue", RunStatus.SUCCEEDED: "green", RunStatus.FAILED: "red"}
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json", "pdf": "application/pdf"}
