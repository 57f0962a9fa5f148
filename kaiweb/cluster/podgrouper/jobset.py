"""JobSet: one PodGroup for the whole JobSet, a subgroup tree of replicated jobs and their replicas.

Each replicated job ``r`` is a subgroup with minSubGroup = its replicas, and each replica ``i`` a
leaf ``r-replica-i`` with minMember = the Job's parallelism (or the template's
``kai.scheduler/batch-min-member``). The PodGroup itself has minSubGroup = the number of replicated
jobs (1 under ``startupPolicyOrder: InOrder``; at most the JobSet's ``kai.scheduler/batch-min-member``)
and no minMember.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiweb.cluster.podgrouper.defaults import Context, Obj, bad, default_plan, int_field, int_text
from kaiweb.cluster.podgrouper.model import (
    MIN_MEMBER_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    Plan,
    SubGroupPlan,
    Topology,
    dig,
    labels,
    str_map,
)

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


def jobset_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    if not top.name or not top.uid:
        raise bad(top, "metadata", "must have a name and a uid", show_value=False)
    jobs = _replicated_jobs(top)
    plan = default_plan(ctx, top)
    plan.min_sub_group = _min_sub_group(top, len(jobs))
    plan.min_member = 0
    for i, job in enumerate(jobs):
        name = job.get("name")
        if not isinstance(name, str) or not name:
            raise bad(top, f"spec.replicatedJobs[{i}].name", "is required", name)
        replicas = int_field(top, job.get("replicas"), f"spec.replicatedJobs[{i}].replicas", minimum=0)
        replicas = 1 if replicas is None else replicas
        leaf_min = _leaf_min_member(top, job, i)
        leaf_topology = _leaf_topology(job)
        plan.sub_groups.append(SubGroupPlan(name, min_sub_group=replicas))
        for index in range(replicas):
            plan.sub_groups.append(SubGroupPlan(f"{name}-replica-{index}", min_member=leaf_min, parent=name,
                                                topology=leaf_topology))
    _place_pod(ctx, plan)
    return plan


def _replicated_jobs(top: Obj) -> list[Mapping[str, Any]]:
    raw = dig(top.raw, "spec", "replicatedJobs")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise bad(top, "spec.replicatedJobs", "must be a list", raw)
    for i, job in enumerate(raw):
        if not isinstance(job, Mapping):
            raise bad(top, f"spec.replicatedJobs[{i}]", "must be an object", job)
    if not raw:
        raise bad(top, "spec.replicatedJobs", "must list at least one replicated job", raw)
    return raw


def _min_sub_group(top: Obj, count: int) -> int:
    override = top.annotations.get(MIN_MEMBER_ANNOTATION)
    if override is not None:
        wanted = int_text(top, override, f"metadata.annotations[{MIN_MEMBER_ANNOTATION}]", minimum=1)
        return min(wanted, count)
    order = dig(top.raw, "spec", "startupPolicy", "startupPolicyOrder")
    return 1 if order == "InOrder" else count


def _template_annotations(job: Mapping[str, Any]) -> dict[str, str]:
    return str_map(dig(job, "template", "metadata", "annotations"))


def _leaf_min_member(top: Obj, job: Mapping[str, Any], i: int) -> int:
    parallelism = int_field(top, dig(job, "template", "spec", "parallelism"),
                            f"spec.replicatedJobs[{i}].template.spec.parallelism")
    override = _template_annotations(job).get(MIN_MEMBER_ANNOTATION)
    if override:
        return int_text(top, override, f"spec.replicatedJobs[{i}].template.metadata.annotations"
                        f"[{MIN_MEMBER_ANNOTATION}]", minimum=1)
    return 1 if parallelism is None else parallelism


def _leaf_topology(job: Mapping[str, Any]) -> Topology | None:
    found = _template_annotations(job)
    topology = found.get(TOPOLOGY_ANNOTATION, "")
    required, preferred = found.get(TOPOLOGY_REQUIRED_ANNOTATION, ""), found.get(TOPOLOGY_PREFERRED_ANNOTATION, "")
    if not topology or not (required or preferred):
        return None
    return Topology(topology, required, preferred)


def _place_pod(ctx: Context, plan: Plan) -> None:
    pod = Obj.of("v1", "Pod", ctx.pod)
    pod_labels = labels(ctx.pod)
    for key in (REPLICATED_JOB_LABEL, JOB_INDEX_LABEL):
        if not pod_labels.get(key):
            raise bad(pod, f"metadata.labels[{key}]", "is required on a JobSet's pod", show_value=False)
    leaf = f"{pod_labels[REPLICATED_JOB_LABEL]}-replica-{pod_labels[JOB_INDEX_LABEL]}"
    for sub in plan.sub_groups:
        if sub.name == leaf:
            sub.has_pod = True
            return
    raise bad(pod, f"metadata.labels[{JOB_INDEX_LABEL}]", f"must name a replica of the JobSet (no subgroup {leaf})",
              pod_labels[JOB_INDEX_LABEL])
