"""The pod-grouper, as KAI's: every pod of our scheduler belongs to its top owner's PodGroup.

The decision is pure: raw Kubernetes objects (plain dicts) in, plain dicts out, no framework and no
cluster access; the caller passes a lookup. `controller` is the grouper at work on a cluster (one pass in
the cycle's observe step, or `LiveGrouper` beside ``watch_cluster``'s Pod watch): it reads pods and
owners through the gateway and writes the PodGroups and the pods' marks. Follows KAI-Scheduler's ``pkg/podgrouper`` rules per kind:

* bare Pod, ReplicaSet, StatefulSet, unknown kinds: one PodGroup per top owner, minMember 1;
* Job: minMember from ``kai.scheduler/batch-min-member``; CronJob: one PodGroup per Job it runs;
* Deployment: one PodGroup per pod, default priority class ``inference`` (``train`` elsewhere);
* Kubeflow TFJob / XGBoostJob / JAXJob / MPIJob / PyTorchJob: the gang is all replicas (or
  ``runPolicy.schedulingPolicy.minAvailable``); PyTorchJob has master/worker subgroups;
* JobSet: subgroup tree of replicated jobs and replicas, minSubGroup at the root;
* LeaderWorkerSet: one PodGroup per group with leader/workers (or segment) subgroups;
* RayCluster / RayJob / RayService: head + worker-group subgroups;
* TrainJob, Argo Workflow: grouped as the owner right below them.

Queue precedence and other differences from KAI are in `defaults.queue_for` and `core.group_pod`.
"""

from kaiweb.cluster.podgrouper.core import PLUGINS, SKIPPED_TOP_OWNERS, group_pod
from kaiweb.cluster.podgrouper.model import (
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    SUBGROUP_LABEL,
    Grouping,
    ListPods,
    Lookup,
    Problem,
    Skipped,
)

__all__ = [
    "PLUGINS",
    "POD_GROUP_ANNOTATION",
    "PODGROUP_API_VERSION",
    "SKIPPED_TOP_OWNERS",
    "SUBGROUP_LABEL",
    "Grouping",
    "ListPods",
    "Lookup",
    "Problem",
    "Skipped",
    "group_pod",
]
