"""The org layer's names: KAI Resource Management's (KRM) label and annotation keys, its pool phases."""

from __future__ import annotations

from django.db import models

from kaiweb.cluster.backends.types import ENFORCE_SCHEDULER_ANNOTATION as ENFORCE_SCHEDULER_ANNOTATION
from kaiweb.cluster.choices import DEFAULT_PARTITION_LABEL, KRM_GROUP, KRM_VERSION  # noqa: F401 - the org's names
from kaiweb.cluster.podgrouper.model import NAMESPACE_PROJECT_LABEL as NAMESPACE_PROJECT_LABEL
from kaiweb.cluster.podgrouper.model import UNASSIGNED_NODE_POOL

# A node's, queue's and PodGroup's node pool; absent means the default pool (as in KRM).
NODE_POOL_LABEL = DEFAULT_PARTITION_LABEL
DEFAULT_POOL = "default"
# On a PodGroup whose pool is not chosen yet: absence already means the default pool.
UNASSIGNED_POOL = UNASSIGNED_NODE_POOL
# On a node cordoned to drain before it moves to another pool (cleared when it moves).
NODE_UNSCHEDULABLE_LABEL = "kai.scheduler/unschedulable"
# On a SchedulingShard the org wrote for a node pool: the pool's name (a shard without it is never deleted).
SHARD_POOL_LABEL = "kaiweb.io/node-pool"
# The pod annotation naming node pools, space-separated, in preference order.
NODE_POOLS_ANNOTATION = "kai.scheduler/node-pools"
# Queue labels.
PROJECT_LABEL = "project"
PROJECT_ID_LABEL = "kai.resources/project-id"
DEPARTMENT_LABEL = "kai.resources/department-name"
# Namespace annotation (its label, NAMESPACE_PROJECT_LABEL, is the pod-grouper's too).
NAMESPACE_PREFIX = "kai-"
# An object so labelled is left alone by the org layer: not updated, not deleted.
MANUAL_OVERRIDE_LABEL = "kai.resources/resource-manual-override"
# Queue names are Kubernetes label values here (the PodGroup's queue label): at most 63 characters.
MAX_QUEUE_NAME = 63
DEFAULT_QUEUE_PRIORITY = 100


class PoolPhase(models.TextChoices):
    READY = "Ready", "Ready"
    EMPTY = "Empty", "Empty"
    UNSCHEDULABLE = "Unschedulable", "Unschedulable"
    MISSING_PREREQUISITES = "MissingPrerequisites", "Missing prerequisites"
    DELETING = "Deleting", "Deleting"


# Only these phases accept workloads (KRM's workload placement).
ACCEPTING_PHASES = frozenset({PoolPhase.READY.value, PoolPhase.EMPTY.value})


class OwnerKind(models.TextChoices):
    DEPARTMENT = "department", "Department"
    PROJECT = "project", "Project"
