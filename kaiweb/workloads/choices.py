"""Choices of the workloads app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_core.model import PodState as EnginePodState


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


#: A pod's status as the scheduler reads it (KAI pod_status): the engine's vocabulary
#: (scheduler_core.model.PodState) as database choices, labelled as they read.
PodState = models.TextChoices("PodState", [(name, (value, _(value))) for name, value in (
    (v.upper(), v) for v in EnginePodState.ALL)])


# Pods that hold node resources and count as the queue's "allocated".
ALLOCATED_POD_STATES = (PodState.BINDING, PodState.BOUND, PodState.RUNNING)
