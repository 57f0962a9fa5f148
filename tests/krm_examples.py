"""KAI Resource Management's (KRM) example objects (its docs' ``concepts/examples``: a node pool, a department
and a project), restated as test data, and what KRM's docs say they give on the cluster.

The expected objects cite the section of KRM's documentation each fact comes from:
[QQ] concepts/queues-and-quota.md, [NP] concepts/node-pools.md, [LA] reference/labels-and-annotations.md,
[API] reference/api.md, [TUNE] how-to/tune-per-node-pool-scheduling.md, and the examples' own comments [EX].
"""

from __future__ import annotations

from typing import Any

GPU_PRODUCT = "nvidia.com/gpu.product"
KRM = "kai.resources/v1alpha1"


def _amounts(deserved: float, limit: float, weight: float) -> dict[str, float]:
    return {"deserved": deserved, "limit": limit, "overQuotaWeight": weight}


def _queue(name: str, pool: str, gpu: tuple, cpu: tuple, memory: tuple, priority: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "nodepool": pool}
    if priority is not None:
        entry["priority"] = priority
    entry["resources"] = {"gpu": _amounts(*gpu), "cpu": _amounts(*cpu), "memory": _amounts(*memory)}
    return entry


# The H100 nodes by one label pair.
NODEPOOL = {"apiVersion": KRM, "kind": "NodePool", "metadata": {"name": "h100"},
            "spec": {"labelKey": GPU_PRODUCT, "labelValue": "H100"}}
# The department: a default-pool queue (CPU only, explicitly no GPUs) and an H100 queue.
DEPARTMENT = {"apiVersion": KRM, "kind": "Department", "metadata": {"name": "engineering"}, "spec": {"queues": [
    _queue("engineering", "default", (0, 0, 0), (8000, -1, 1), (32000, -1, 1)),
    _queue("engineering-h100", "h100", (8, 16, 1), (32000, 64000, 1), (128000, 256000, 1)),
]}}
# The project in that department, on the scheduler whatever its pods ask, H100 by default.
PROJECT = {"apiVersion": KRM, "kind": "Project", "metadata": {"name": "research"}, "spec": {
    "parent": "engineering", "enforceKaiScheduler": True, "defaultNodePools": ["h100"], "queues": [
        _queue("research", "default", (0, 0, 0), (4000, -1, 1), (16000, -1, 1), priority=100),
        _queue("research-h100", "h100", (4, 8, 2), (16000, 32000, 1), (64000, 128000, 1), priority=100),
    ]}}
EXAMPLES = (NODEPOOL, DEPARTMENT, PROJECT)

PROJECT_ID = "kai.resources/project-id"


def expected_queues(project_uid: str) -> dict[str, dict[str, Any]]:
    """Each Queue KRM makes from the examples: its parent, labels, priority and the Queue CRD's numbers.

    * One queue per entry, named as the entry names it [QQ "Queue names"]; a project's queue is parented to
      its department's queue for the same node pool [QQ "One queue per owner, per node pool"]; a
      department's queues are roots [API "Department"].
    * Labels [LA "Queue labels"]: ``project`` and ``kai.resources/project-id`` (the Project's UID) on a
      project's queues, ``kai.resources/department-name`` on a department's and its projects' queues,
      ``kai.scheduler/node-pool`` naming the pool, absent for the default pool [QQ "The default node pool
      has no label"].
    * Priority 100 when not given [API "QueueConfig"]; the numbers as written, in KRM's units, which are
      the Queue CRD's (GPUs, millicores, MB) [API "QueueConfig", units].
    """
    def resources(gpu: tuple, cpu: tuple, memory: tuple) -> dict[str, dict[str, float]]:
        return {r: {"quota": v[0], "limit": v[1], "overQuotaWeight": v[2]}
                for r, v in (("gpu", gpu), ("cpu", cpu), ("memory", memory))}

    department = {"kai.resources/department-name": "engineering"}
    project = {"project": "research", PROJECT_ID: project_uid, **department}
    h100 = {"kai.scheduler/node-pool": "h100"}
    return {
        "engineering": {"parent": None, "labels": department, "priority": 100,
                        "resources": resources((0, 0, 0), (8000, -1, 1), (32000, -1, 1))},
        "engineering-h100": {"parent": None, "labels": {**department, **h100}, "priority": 100,
                             "resources": resources((8, 16, 1), (32000, 64000, 1), (128000, 256000, 1))},
        "research": {"parent": "engineering", "labels": project, "priority": 100,
                     "resources": resources((0, 0, 0), (4000, -1, 1), (16000, -1, 1))},
        "research-h100": {"parent": "engineering-h100", "labels": {**project, **h100}, "priority": 100,
                          "resources": resources((4, 8, 2), (16000, 32000, 1), (64000, 128000, 1))},
    }


# Each node pool's SchedulingShard, named after it, serving the partition of its name; the default pool's
# partition value is empty [NP "Each node pool gets its own scheduler", "Leaving a partition to another
# scheduler"]. The example sets no schedulingShardConfig, so nothing else is set: unset means the
# scheduler's own default [TUNE "Every field is optional"].
EXPECTED_SHARDS = {"h100": {"partitionLabelValue": "h100"}, "default": {"partitionLabelValue": ""}}

# The project's namespace: kai-<project> [EX project.yaml, API "Project" namespace], labelled
# kai/project=<project> and annotated with its enforceKaiScheduler [LA "Namespace labels and annotations"].
EXPECTED_NAMESPACE = {"name": "kai-research", "labels": {"kai/project": "research"},
                      "annotations": {"kai.resources/enforce-scheduler-name": "true"}}
