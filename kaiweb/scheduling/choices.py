"""Choices of the scheduling app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_core import model as m


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


#: Which action evicted a victim: the engine's evicting actions in the engine's spelling
#: (``scheduler_core.model.EVICTING_ACTIONS``); a member is named by its value in capitals.
PreemptionAction = models.TextChoices(
    "PreemptionAction",
    [(action.upper(), (action, _(m.ACTION_TITLES[action]))) for action in m.EVICTING_ACTIONS],
    module=__name__,
)

PREEMPTION_ACTION_BADGE = {
    m.RECLAIM: "orange",
    m.PREEMPT: "red",
    m.CONSOLIDATION: "blue",
    m.STALE_GANG_EVICTION: "gray",
}
