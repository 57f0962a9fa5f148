"""LeaderWorkerSet: one PodGroup per group (leader + workers), with a leader and a workers subgroup.

The PodGroup of group i is ``pg-<lws>-<uid>-group-<i>``; minMember is the group size
(``spec.leaderWorkerTemplate.size``), except under ``startupPolicy: LeaderReady`` where an
unscheduled leader asks only for itself. With a segment size (``subGroupPolicy.subGroupSize`` or the
``kai.scheduler/segment-size`` annotation) the group is cut into ``segment-<k>`` subgroups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiweb.cluster.podgrouper.defaults import Context, Obj, bad, default_plan, int_field, int_text
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

SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
MAX_SEGMENTS = 10000


def lws_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    plan = default_plan(ctx, top)
    size = int_field(top, dig(top.raw, "spec", "leaderWorkerTemplate", "size"), "spec.leaderWorkerTemplate.size")
    if size is None:
        raise bad(top, "spec.leaderWorkerTemplate.size", "is required", show_value=False)
    if size <= 0:
        raise bad(top, "spec.leaderWorkerTemplate.size", "must be at least 1", size)
    policy = dig(top.raw, "spec", "startupPolicy")
    policy = "LeaderCreated" if policy is None else policy
    pod = Obj.of("v1", "Pod", ctx.pod)
    worker_index = labels(ctx.pod).get(WORKER_INDEX_LABEL)
    if worker_index is not None:
        int_text(pod, worker_index, f"metadata.labels[{WORKER_INDEX_LABEL}]", minimum=0)
    if policy == "LeaderReady":
        plan.min_member = _leader_ready_min(ctx, size)
    elif policy == "LeaderCreated":
        plan.min_member = size
    else:
        raise bad(top, "spec.startupPolicy", "must be LeaderReady or LeaderCreated", policy)
    plan.sub_groups = _sub_groups(ctx, top, plan.min_member)
    group_index = labels(ctx.pod).get(GROUP_INDEX_LABEL)
    if group_index is not None and group_index.strip().lstrip("+-").isdecimal():
        plan.name = f"{plan.name}-group-{int(group_index)}"
    return plan


def _is_leader(ctx: Context) -> bool:
    return labels(ctx.pod).get(WORKER_INDEX_LABEL) == "0"


def _leader_ready_min(ctx: Context, size: int) -> int:
    text = str_map(meta(ctx.pod).get("annotations")).get(SIZE_ANNOTATION, "")
    group_size = int(text) if text.strip().isdecimal() else size
    scheduled = bool(dig(ctx.pod, "spec", "nodeName"))
    return 1 if _is_leader(ctx) and not scheduled else group_size


def _sub_groups(ctx: Context, top: Obj, replicas: int) -> list[SubGroupPlan]:
    segment = _segment_size(top, replicas)
    leader = _is_leader(ctx)
    if segment is None:
        out = [SubGroupPlan("leader", min_member=1, has_pod=leader)]
        if replicas - 1 > 0:
            out.append(SubGroupPlan("workers", min_member=replicas - 1, has_pod=not leader))
        return out
    count = _segment_index(replicas - 1, replicas, segment) + 1
    if count > MAX_SEGMENTS:
        raise bad(top, "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                  f"must make at most {MAX_SEGMENTS} segments", segment)
    topology = _segment_topology(ctx, top)
    out = [SubGroupPlan(f"segment-{i}", min_member=segment, topology=topology) for i in range(count)]
    out[-1].min_member = sum(1 for w in range(replicas) if _segment_index(w, replicas, segment) == count - 1)
    pod = Obj.of("v1", "Pod", ctx.pod)
    index = int_text(pod, labels(ctx.pod).get(WORKER_INDEX_LABEL, ""), f"metadata.labels[{WORKER_INDEX_LABEL}]")
    pod_segment = _segment_index(index, replicas, segment)
    policy = dig(top.raw, "spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupPolicyType") or "LeaderWorker"
    divisible = (replicas - 1) % segment == 0
    placed = False
    if policy == "LeaderWorker":
        first = out[0]
        if divisible:
            first.min_member += 1
        out.append(SubGroupPlan("leader", min_member=1, parent=first.name, has_pod=leader))
        out.append(SubGroupPlan("workers", min_member=first.min_member - 1, parent=first.name,
                                has_pod=pod_segment == 0 and not leader))
        placed = leader or pod_segment == 0
        first.min_sub_group, first.min_member = 2, 0
    elif policy == "LeaderExcluded":
        if not divisible:
            raise bad(top, "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                      f"must divide the {replicas - 1} workers under LeaderExcluded", segment)
        out.insert(0, SubGroupPlan("leader", min_member=1))
        if not leader:
            pod_segment += 1
    else:
        raise bad(top, "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
                  "must be LeaderWorker or LeaderExcluded", policy)
    if not placed:
        out[pod_segment].has_pod = True
    return out


def _segment_index(worker: int, replicas: int, segment: int) -> int:
    if worker == 0:
        return 0  # the leader is always in the first segment
    if (replicas - 1) % segment == 0:
        return (worker - 1) // segment
    return worker // segment


def _segment_size(top: Obj, replicas: int) -> int | None:
    path = "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
    size = int_field(top, dig(top.raw, "spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupSize"), path)
    if size is None and SEGMENT_SIZE_ANNOTATION in top.annotations:
        path = f"metadata.annotations[{SEGMENT_SIZE_ANNOTATION}]"
        size = int_text(top, top.annotations[SEGMENT_SIZE_ANNOTATION], path)
    template = _worker_template_annotations(top)
    if size is None and SEGMENT_SIZE_ANNOTATION in template:
        path = f"spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[{SEGMENT_SIZE_ANNOTATION}]"
        size = int_text(top, template[SEGMENT_SIZE_ANNOTATION], path)
    if size is None:
        return None
    if size <= 1:
        raise bad(top, path, "must be greater than 1", size)
    if size > replicas:
        raise bad(top, path, f"must be at most the {replicas} pods the group asks for", size)
    return size


def _worker_template_annotations(top: Obj) -> dict[str, str]:
    return str_map(dig(top.raw, "spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "annotations"))


def _segment_topology(ctx: Context, top: Obj) -> Topology | None:
    if not isinstance(dig(top.raw, "spec", "leaderWorkerTemplate", "workerTemplate"), Mapping):
        return None
    pod_annotations: dict[str, Any] = str_map(meta(ctx.pod).get("annotations"))
    template = _worker_template_annotations(top)

    def worker_value(key: str) -> str:
        return pod_annotations.get(key) or template.get(key, "")

    topology = worker_value(TOPOLOGY_ANNOTATION) or top.annotations.get(TOPOLOGY_ANNOTATION, "")
    required, preferred = worker_value(SEGMENT_REQUIRED_ANNOTATION), worker_value(SEGMENT_PREFERRED_ANNOTATION)
    if not topology or not (required or preferred):
        return None
    return Topology(topology, required, preferred)
