"""Choices of the cluster app."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from kaiweb.cluster.backends.types import EVICT_BY_DELETE, EVICT_BY_EVICTION_API


class BackendKind(models.TextChoices):
    """How kaiweb reaches a cluster."""

    SIMULATED = "simulated", _("Simulated (in the database)")
    KUBERNETES = "kubernetes", _("Kubernetes")


class PlacementStrategy(models.TextChoices):
    """A shard's placement strategy per resource (KAI SchedulingShard `placementStrategy`)."""

    BINPACK = "binpack", _("Bin-pack")
    SPREAD = "spread", _("Spread")


class GpuPlacementStrategy(models.TextChoices):
    """A shard's GPU placement: KAI's two strategies, or ours that keeps fragmentation low."""

    BINPACK = "binpack", _("Bin-pack")
    SPREAD = "spread", _("Spread")
    FRAGMENTATION_AWARE = "fragmentation-aware", _("Fragmentation-aware")


class EvictionMode(models.TextChoices):
    """How a shard's evictions are carried out (`EvictAction.mode`): KAI deletes the victim pod, so
    PodDisruptionBudgets do not apply; the Eviction API lets a budget refuse (the decision then fails
    and the next cycle decides again)."""

    DELETE = EVICT_BY_DELETE, _("Delete the pod, as KAI does (PodDisruptionBudgets do not apply)")
    EVICT = EVICT_BY_EVICTION_API, _("Eviction API (a PodDisruptionBudget may refuse)")


# KAI's default node-pool label: a shard sees the nodes, queues and jobs whose label equals its value.
DEFAULT_PARTITION_LABEL = "kai.scheduler/node-pool"
# KAI Resource Management's (KRM) org objects: group, version and each kind's plural, in the order an
# import applies them (pools, then the departments projects name).
KRM_GROUP, KRM_VERSION = "kai.resources", "v1alpha1"
KRM_PLURALS = {"NodePool": "nodepools", "Department": "departments", "Project": "projects"}
