"""Choices of the scheduling app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class CycleStatus(models.TextChoices):
    """How a scheduling cycle ended."""

    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    SKIPPED = "skipped", _("Skipped")


CYCLE_STATUS_BADGE = {
    CycleStatus.RUNNING: "blue",
    CycleStatus.SUCCEEDED: "green",
    CycleStatus.FAILED: "red",
    CycleStatus.SKIPPED: "gray",
}


class DecisionKind(models.TextChoices):
    """What the engine decided for one pod."""

    BIND = "bind", _("Bind")
    PIPELINE = "pipeline", _("Pipeline")
    EVICT = "evict", _("Evict")


class DecisionStatus(models.TextChoices):
    """Whether a decision was carried out in the cluster."""

    PLANNED = "planned", _("Planned")
    APPLIED = "applied", _("Applied")
    FAILED = "failed", _("Failed")
    DRY_RUN = "dry-run", _("Dry run")


class PreemptionAction(models.TextChoices):
    """Which action evicted a victim."""

    RECLAIM = "reclaim", _("Reclaim")
    PREEMPT = "preempt", _("Preempt")
    CONSOLIDATE = "consolidate", _("Consolidate")
    STALE_GANG = "stale-gang", _("Stale gang")


PREEMPTION_ACTION_BADGE = {
    PreemptionAction.RECLAIM: "orange",
    PreemptionAction.PREEMPT: "red",
    PreemptionAction.CONSOLIDATE: "blue",
    PreemptionAction.STALE_GANG: "gray",
}
