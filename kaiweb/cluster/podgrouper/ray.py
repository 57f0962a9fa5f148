"""Ray: RayCluster, and RayJob / RayService through the RayCluster their status names.

One PodGroup per top owner. minMember is 1 (the head) plus, per worker group that is not suspended,
``minReplicas × numOfHosts`` (or ``replicas × numOfHosts`` when minReplicas is 0). Subgroups: the
head group ``headgroup`` and one per worker group (``groupName``, else ``worker-group-<i>``); a
PodGroup that already exists without subgroups keeps having none (KAI's older layout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiweb.cluster.podgrouper.defaults import Context, Obj, bad, default_plan, int_field
from kaiweb.cluster.podgrouper.model import (
    PODGROUP_API_VERSION,
    PODGROUP_KIND,
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

HEAD_GROUP = "headgroup"
GROUP_LABEL = "ray.io/group"
PRIORITY_LABEL = "ray.io/priority-class-name"

CLUSTER_NAME_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "RayCluster": (),
    "RayJob": (("status", "rayClusterName"),),
    "RayService": (("status", "activeServiceStatus", "rayClusterName"),
                   ("status", "pendingServiceStatus", "rayClusterName")),
}


def ray_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    cluster = _cluster(ctx, top)
    plan = default_plan(ctx, top)
    plan.min_member, sub_groups = _gang(cluster)
    if _use_sub_groups(ctx, plan):
        plan.sub_groups = sub_groups
    if PRIORITY_LABEL in top.labels:
        plan.priority_class = top.labels[PRIORITY_LABEL]
    if plan.sub_groups:
        group = labels(ctx.pod).get(GROUP_LABEL)
        match = next((s for s in plan.sub_groups if s.name == group), None)
        if match is None:
            plan.notes.append(f"pod {ctx.pod_namespace}/{ctx.pod_name}: label {GROUP_LABEL}={group!r} names no "
                              f"group of {cluster.describe()}; the pod is in no subgroup")
        else:
            match.has_pod = True
    return plan


def _cluster(ctx: Context, top: Obj) -> Obj:
    paths = CLUSTER_NAME_PATHS.get(top.kind, ())
    if not paths:
        return top
    name: Any = None
    used = paths[0]
    for path in paths:
        name = dig(top.raw, *path)
        used = path
        if name is not None:
            break
    field = ".".join(used)
    if not isinstance(name, str) or not name:
        raise bad(top, field, "must name the RayCluster (is the KubeRay operator running?)", name)
    raw = ctx.get(top.api_version, "RayCluster", top.namespace or ctx.pod_namespace, name)
    if raw is None:
        raise bad(top, field, f"names RayCluster {name}, which does not exist", show_value=False)
    return Obj.of(top.api_version, "RayCluster", raw)


def _gang(cluster: Obj) -> tuple[int, list[SubGroupPlan]]:
    total = 1
    subs = [SubGroupPlan(HEAD_GROUP, min_member=1,
                         topology=_template_topology(cluster, dig(cluster.raw, "spec", "headGroupSpec"),
                                                     "spec.headGroupSpec"))]
    groups = dig(cluster.raw, "spec", "workerGroupSpecs")
    if groups is None:
        return total, subs
    if not isinstance(groups, list):
        raise bad(cluster, "spec.workerGroupSpecs", "must be a list", groups)
    for i, group in enumerate(groups):
        path = f"spec.workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            raise bad(cluster, path, "must be an object", group)
        if group.get("suspended") is True:
            continue
        desired = int_field(cluster, group.get("replicas"), f"{path}.replicas") or 0
        minimum = int_field(cluster, group.get("minReplicas"), f"{path}.minReplicas") or 0
        if minimum > desired:
            raise bad(cluster, f"{path}.replicas", f"must be at least minReplicas ({minimum})", desired)
        if minimum == 0 and desired == 0:
            continue
        hosts = int_field(cluster, group.get("numOfHosts"), f"{path}.numOfHosts")
        hosts = 1 if hosts is None else hosts
        count = (minimum if minimum > 0 else desired) * hosts
        total += count
        name = group.get("groupName") if isinstance(group.get("groupName"), str) and group.get("groupName") \
            else f"worker-group-{i}"
        subs.append(SubGroupPlan(name, min_member=count, topology=_template_topology(cluster, group, path)))
    return total, subs


def _template_topology(cluster: Obj, group: Any, path: str) -> Topology | None:
    found = str_map(dig(group, "template", "metadata", "annotations"))
    topology = found.get(TOPOLOGY_ANNOTATION, "")
    required, preferred = found.get(TOPOLOGY_REQUIRED_ANNOTATION, ""), found.get(TOPOLOGY_PREFERRED_ANNOTATION, "")
    if not (required or preferred):
        return None
    if not topology:
        raise bad(cluster, f"{path}.template.metadata.annotations[{TOPOLOGY_ANNOTATION}]",
                  "is required when a topology placement annotation is set", show_value=False)
    return Topology(topology, required, preferred)


def _use_sub_groups(ctx: Context, plan: Plan) -> bool:
    existing = ctx.get(PODGROUP_API_VERSION, PODGROUP_KIND, plan.namespace, plan.name)
    if existing is None:
        return True
    return bool(dig(existing, "spec", "subGroups"))
