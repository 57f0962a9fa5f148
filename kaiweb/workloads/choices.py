"""Choices of the workloads app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class WorkloadState(models.TextChoices):
    """A PodGroup's state as kaiweb sees it."""

    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    PARTIAL = "partial", _("Partially running")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    EVICTED = "evicted", _("Evicted")


WORKLOAD_STATE_BADGE = {
    WorkloadState.PENDING: "yellow",
    WorkloadState.RUNNING: "green",
    WorkloadState.PARTIAL: "blue",
    WorkloadState.COMPLETED: "gray",
    WorkloadState.FAILED: "red",
    WorkloadState.EVICTED: "orange",
}
ACTIVE_WORKLOAD_STATES = (WorkloadState.PENDING, WorkloadState.RUNNING, WorkloadState.PARTIAL)


class PodState(models.TextChoices):
    """A pod's status as the scheduler reads it (KAI pod_status)."""

    PENDING = "Pending", _("Pending")
    GATED = "Gated", _("Gated")
    BINDING = "Binding", _("Binding")
    BOUND = "Bound", _("Bound")
    RUNNING = "Running", _("Running")
    RELEASING = "Releasing", _("Releasing")
    SUCCEEDED = "Succeeded", _("Succeeded")
    FAILED = "Failed", _("Failed")
    UNKNOWN = "Unknown", _("Unknown")


# Pods that hold node resources and count as the queue's "allocated".
ALLOCATED_POD_STATES = (PodState.BINDING, PodState.BOUND, PodState.RUNNING)
