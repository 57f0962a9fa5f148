"""scheduler_core: the scheduling engine. Pure Python + numpy; imports nothing from Django,
Celery, DRF or kubernetes. A snapshot goes in, a CycleResult comes out; same snapshot and
config, same result.

    from scheduler_core import ClusterSnapshot, CycleConfig, NodeSpec, QueueSpec, JobSpec, TaskSpec, run_cycle
    result = run_cycle(ClusterSnapshot(nodes=..., queues=..., jobs=..., now=...), CycleConfig())
"""

from __future__ import annotations

from scheduler_core.cycle import run_cycle
from scheduler_core.memo import CycleMemo
from scheduler_core.model import (
    BindDecision,
    ClusterSnapshot,
    CycleConfig,
    CycleResult,
    EvictionDecision,
    JobSpec,
    NodeSpec,
    ObjectError,
    PipelineDecision,
    PodSetSpec,
    PriorityClass,
    QueueResource,
    QueueSpec,
    QueueStatus,
    Reason,
    SubGroupSpec,
    TaskOutcome,
    TaskRequest,
    TaskSpec,
    TopologyConstraint,
    TopologySpec,
    resolve_priority,
)

__all__ = [
    "BindDecision", "ClusterSnapshot", "CycleConfig", "CycleMemo", "CycleResult", "EvictionDecision", "JobSpec", "NodeSpec",
    "ObjectError", "PipelineDecision", "PodSetSpec", "PriorityClass", "QueueResource", "QueueSpec", "QueueStatus",
    "Reason", "SubGroupSpec", "TaskOutcome", "TaskRequest", "TaskSpec", "TopologyConstraint", "TopologySpec",
    "resolve_priority", "run_cycle",
]
