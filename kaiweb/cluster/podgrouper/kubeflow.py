"""Kubeflow training jobs: TFJob, XGBoostJob, JAXJob, PyTorchJob (with subgroups) and MPIJob.

All are one gang per job. minMember is ``spec.runPolicy.schedulingPolicy.minAvailable`` when set,
else the sum of the replicas of every replica type (each must have at least one). PyTorchJob adds
``elasticPolicy.minReplicas`` and splits the gang into a master and a worker subgroup (the workers
optionally in segments of ``kai.scheduler/segment-size``). MPIJob with ``launcherCreationPolicy:
WaitForWorkersReady`` leaves the launcher out of minMember while no launcher pod exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiweb.cluster.podgrouper.defaults import (
    Context,
    Obj,
    bad,
    default_plan,
    int_field,
    int_text,
    list_matching_pods,
)
from kaiweb.cluster.podgrouper.model import (
    SEGMENT_PREFERRED_ANNOTATION,
    SEGMENT_REQUIRED_ANNOTATION,
    SEGMENT_SIZE_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    Plan,
    SubGroupPlan,
    Topology,
    dig,
    labels,
    meta,
    str_map,
)

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
MAX_SEGMENTS = 10000


def _replica_specs(top: Obj, key: str) -> Mapping[str, Any]:
    specs = dig(top.raw, "spec", key)
    if not isinstance(specs, Mapping):
        raise bad(top, f"spec.{key}", "is required: the replica types of the job", specs)
    return specs


def distributed_plan(ctx: Context, top: Obj, key: str, mandatory: tuple[str, ...] = ()) -> Plan:
    """The plan every Kubeflow job starts from (KAI's KubeflowDistributedGrouper)."""
    plan = default_plan(ctx, top)
    min_available = int_field(top, dig(top.raw, "spec", "runPolicy", "schedulingPolicy", "minAvailable"),
                              "spec.runPolicy.schedulingPolicy.minAvailable")
    if min_available is not None:
        plan.min_member = min_available
        return plan
    specs = _replica_specs(top, key)
    for name in mandatory:
        if name not in specs:
            raise bad(top, f"spec.{key}.{name}", "is required for this kind of job", show_value=False)
    total = 0
    for name in sorted(specs):
        replicas = int_field(top, dig(specs, name, "replicas"), f"spec.{key}.{name}.replicas")
        if not replicas:
            raise bad(top, f"spec.{key}.{name}.replicas", "must be at least 1", replicas)
        total += replicas
    if total <= 0:
        raise bad(top, f"spec.{key}", "must ask for at least one pod in all", total)
    plan.min_member = total
    return plan


def tfjob_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    return distributed_plan(ctx, top, "tfReplicaSpecs")


def xgboost_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    return distributed_plan(ctx, top, "xgbReplicaSpecs", ("Master", "Worker"))


def jax_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    return distributed_plan(ctx, top, "jaxReplicaSpecs", ("Worker",))


# ------------------------------------------------------------------------------------------ MPIJob


def mpijob_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    plan = distributed_plan(ctx, top, "mpiReplicaSpecs", ("Launcher", "Worker"))
    policy = dig(top.raw, "spec", "launcherCreationPolicy")
    if policy == "WaitForWorkersReady" and not _launcher_exists(ctx, top):
        replicas = int_field(top, dig(top.raw, "spec", "mpiReplicaSpecs", "Launcher", "replicas"),
                             "spec.mpiReplicaSpecs.Launcher.replicas")
        if not replicas:
            raise bad(top, "spec.mpiReplicaSpecs.Launcher.replicas", "must be at least 1", replicas)
        plan.min_member -= replicas
    return plan


def _launcher_exists(ctx: Context, top: Obj) -> bool:
    """Whether a live launcher pod of this MPIJob exists (KAI lists the pods by label).

    Without a pod lister: the pod being grouped may be the launcher itself, and otherwise the
    launcher Job the mpi-operator names ``<job>-launcher`` stands for its pod.
    """
    selector = {JOB_NAME_LABEL: top.name, JOB_ROLE_LABEL: "launcher"}
    pods = list_matching_pods(ctx, top.namespace or ctx.pod_namespace, selector)
    if pods is not None:
        return any(not meta(p).get("deletionTimestamp") for p in pods)
    if all(labels(ctx.pod).get(k) == v for k, v in selector.items()):
        return True
    return ctx.get("batch/v1", "Job", top.namespace or ctx.pod_namespace, f"{top.name}-launcher") is not None


# ------------------------------------------------------------------------------------------ PyTorchJob


def pytorchjob_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    plan = distributed_plan(ctx, top, "pytorchReplicaSpecs")
    min_replicas = int_field(top, dig(top.raw, "spec", "elasticPolicy", "minReplicas"),
                             "spec.elasticPolicy.minReplicas")
    if min_replicas is not None:
        plan.min_member = min_replicas
    min_available = int_field(top, dig(top.raw, "spec", "runPolicy", "schedulingPolicy", "minAvailable"),
                              "spec.runPolicy.schedulingPolicy.minAvailable")
    if min_available is not None:
        plan.min_member = min_available
    plan.sub_groups = _pytorch_sub_groups(ctx, top, plan.min_member)
    return plan


def _pytorch_sub_groups(ctx: Context, top: Obj, total_min: int) -> list[SubGroupPlan]:
    specs = _replica_specs(top, "pytorchReplicaSpecs")
    replica_type = labels(ctx.pod).get(REPLICA_TYPE_LABEL)
    master_replicas = int_field(top, dig(specs, "Master", "replicas"),
                                "spec.pytorchReplicaSpecs.Master.replicas") or 0
    out: list[SubGroupPlan] = []
    if "Master" in specs and master_replicas:
        out.append(SubGroupPlan("master", min_member=master_replicas, has_pod=replica_type == "master"))
    if "Worker" not in specs:
        return out
    worker_min = max(0, total_min - master_replicas)
    workers = int_field(top, dig(specs, "Worker", "replicas"), "spec.pytorchReplicaSpecs.Worker.replicas")
    workers = 1 if workers is None else workers
    is_worker = replica_type == "worker"
    segment = _segment_size(ctx, top, specs)
    if segment is None:
        out.append(SubGroupPlan("worker", min_member=worker_min, has_pod=is_worker))
        return out
    count = -(-workers // segment)
    if count > MAX_SEGMENTS:
        raise bad(top, "spec.pytorchReplicaSpecs.Worker.replicas",
                  f"must make at most {MAX_SEGMENTS} segments of {segment}", workers)
    if count == 0:
        out.append(SubGroupPlan("worker", min_member=worker_min, has_pod=is_worker))
        return out
    pod_segment = _pod_segment(ctx, segment) if is_worker else -1
    topology = _segment_topology(ctx, top, specs)
    partial = workers % segment
    mandatory = -(-worker_min // segment)
    out.append(SubGroupPlan("worker", min_sub_group=count))
    for i in range(count):
        size = segment
        if i >= mandatory:
            size = 0
        elif partial and i == count - 1:
            size = partial
        out.append(SubGroupPlan(f"worker-{i}", min_member=size, parent="worker", has_pod=i == pod_segment,
                                topology=topology))
    return out


def _segment_size(ctx: Context, top: Obj, specs: Mapping[str, Any]) -> int | None:
    pod = Obj.of("v1", "Pod", ctx.pod)
    on_pod = str_map(meta(ctx.pod).get("annotations")).get(SEGMENT_SIZE_ANNOTATION)
    if on_pod:
        return int_text(pod, on_pod, f"metadata.annotations[{SEGMENT_SIZE_ANNOTATION}]")
    on_template = str_map(dig(specs, "Worker", "template", "metadata", "annotations")).get(SEGMENT_SIZE_ANNOTATION)
    if not on_template:
        return None
    return int_text(top, on_template, "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations"
                    f"[{SEGMENT_SIZE_ANNOTATION}]", minimum=1)


def _pod_segment(ctx: Context, segment: int) -> int:
    pod = Obj.of("v1", "Pod", ctx.pod)
    index = labels(ctx.pod).get(REPLICA_INDEX_LABEL)
    if index is None:
        raise bad(pod, f"metadata.labels[{REPLICA_INDEX_LABEL}]", "is required on a segmented worker",
                  show_value=False)
    return int_text(pod, index, f"metadata.labels[{REPLICA_INDEX_LABEL}]", minimum=0) // segment


def _segment_topology(ctx: Context, top: Obj, specs: Mapping[str, Any]) -> Topology | None:
    pod_annotations = str_map(meta(ctx.pod).get("annotations"))
    template = str_map(dig(specs, "Worker", "template", "metadata", "annotations"))

    def worker_value(key: str) -> str:
        return pod_annotations.get(key) or template.get(key, "")

    topology = worker_value(TOPOLOGY_ANNOTATION) or top.annotations.get(TOPOLOGY_ANNOTATION, "")
    required, preferred = worker_value(SEGMENT_REQUIRED_ANNOTATION), worker_value(SEGMENT_PREFERRED_ANNOTATION)
    if not topology or not (required or preferred):
        return None
    return Topology(topology, required, preferred)
