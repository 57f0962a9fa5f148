"""Models of the what-if app: what-if runs, kept so the page and the API can poll for a result."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    """One what-if: who asked, with which inputs, and (once a worker ran it) its result or error."""

    class State(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"
        TIMED_OUT = "timed-out", "timed out"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="whatif_runs")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    inputs = models.JSONField(help_text="The validated inputs, with the window's end fixed at submission.")
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True, help_text="{field: [messages]} when the run failed.")

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=("user", "state"), name="whatif_run_user_state")]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in (self.State.DONE, self.State.FAILED, self.State.TIMED_OUT)
