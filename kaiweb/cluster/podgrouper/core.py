"""`group_pod`: from a pod and its owners to the PodGroup KAI's pod-grouper would write.

Steps, as KAI's pod controller takes them: a pod of another scheduler, or with
``kai.scheduler/skip-podgrouper: "true"`` (on the pod or any owner), is skipped; so is a pod that
names a PodGroup made by hand. The owner chain is followed through ``ownerReferences[0]`` to the top
owner; the plugin for the top owner's apiVersion/kind builds the plan; the plan becomes the PodGroup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kaiweb.cluster.podgrouper import batch, kubeflow, lws, ray
from kaiweb.cluster.podgrouper import jobset as jobset_kind
from kaiweb.cluster.podgrouper.defaults import Context, Obj, bad, default_plan, workload_defaults_from
from kaiweb.cluster.podgrouper.model import (
    NAMESPACE_PROJECT_LABEL,
    NODE_POOL_LABEL,
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    PODGROUP_KIND,
    PREEMPTIBILITY_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    SKIP_ANNOTATION,
    SUBGROUP_LABEL,
    UNASSIGNED_NODE_POOL,
    Bad,
    Grouping,
    ListPods,
    Lookup,
    Plan,
    Problem,
    Skipped,
    annotations,
    dig,
    labels,
    meta,
)

Plugin = Callable[[Context, Obj, list[Obj]], Plan]
MAX_OWNER_DEPTH = 32


def _default(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    return default_plan(ctx, top, owners)


# (group, version, kind) -> plugin; version "*" matches any version.
PLUGINS: dict[tuple[str, str, str], Plugin] = {
    ("", "v1", "Pod"): _default,
    ("apps", "v1", "ReplicaSet"): _default,
    ("apps", "v1", "StatefulSet"): _default,
    ("apps", "v1", "Deployment"): batch.deployment_plan,
    ("batch", "v1", "Job"): batch.job_plan,
    ("batch", "v1", "CronJob"): batch.cronjob_plan,
    ("kubeflow.org", "v1", "TFJob"): kubeflow.tfjob_plan,
    ("kubeflow.org", "v1", "PyTorchJob"): kubeflow.pytorchjob_plan,
    ("kubeflow.org", "v1", "XGBoostJob"): kubeflow.xgboost_plan,
    ("kubeflow.org", "v1", "JAXJob"): kubeflow.jax_plan,
    ("kubeflow.org", "v1", "MPIJob"): kubeflow.mpijob_plan,
    ("kubeflow.org", "v2beta1", "MPIJob"): kubeflow.mpijob_plan,
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"): lws.lws_plan,
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"): jobset_kind.jobset_plan,
    ("ray.io", "v1", "RayCluster"): ray.ray_plan,
    ("ray.io", "v1", "RayJob"): ray.ray_plan,
    ("ray.io", "v1", "RayService"): ray.ray_plan,
    ("ray.io", "v1alpha1", "RayCluster"): ray.ray_plan,
    ("ray.io", "v1alpha1", "RayJob"): ray.ray_plan,
    ("ray.io", "v1alpha1", "RayService"): ray.ray_plan,
}

# Top owners that only wrap another workload: the PodGroup is built for the owner below them.
SKIPPED_TOP_OWNERS: frozenset[tuple[str, str, str]] = frozenset({
    ("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
    ("argoproj.io", "v1alpha1", "Workflow"),
    ("run.ai", "*", "TrainingWorkload"),
    ("run.ai", "*", "InteractiveWorkload"),
    ("run.ai", "*", "DistributedWorkload"),
    ("run.ai", "*", "InferenceWorkload"),
    ("run.ai", "*", "DistributedInferenceWorkload"),
    ("nvidia.com", "*", "DynamoGraphDeployment"),
})


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj.group, obj.version, obj.kind


def _plugin(obj: Obj) -> Plugin | None:
    group, version, kind = _key(obj)
    return PLUGINS.get((group, version, kind)) or PLUGINS.get((group, "*", kind))


def _is_skipped_top(obj: Obj) -> bool:
    group, version, kind = _key(obj)
    return (group, version, kind) in SKIPPED_TOP_OWNERS or (group, "*", kind) in SKIPPED_TOP_OWNERS


# ------------------------------------------------------------------------------------------ entry point


def group_pod(
    pod: Mapping[str, Any],
    lookup: Lookup,
    *,
    scheduler_name: str = "kai-scheduler",
    default_queue: str | None = None,
    namespace_labels: Callable[[str], Mapping[str, str]] | None = None,
    queue_label: str = QUEUE_LABEL,
    node_pool_label: str = NODE_POOL_LABEL,
    priority_class_exists: Callable[[str], bool] | None = None,
    workload_defaults: Iterable[Mapping[str, Any]] = (),
    list_pods: ListPods | None = None,
) -> Grouping | Skipped | Problem:
    """The PodGroup KAI's pod-grouper would create or update for this pod, and the marks on the pod.

    Inputs: the raw pod; ``lookup(apiVersion, kind, namespace, name)`` reads owners, PriorityClasses
    (``scheduling.k8s.io/v1``, namespace "") and existing PodGroups (``scheduling.run.ai/v2alpha2``),
    None when absent. Optional: ``namespace_labels(ns)`` and ``default_queue`` are the last queue
    fallbacks; ``priority_class_exists(name)`` replaces the PriorityClass lookup;
    ``workload_defaults`` is KAI's default-priorities ConfigMap ``types`` list; ``list_pods(ns,
    labels)`` lets an MPIJob see whether its launcher pod exists (without it the launcher Job stands
    for it).

    Output: a `Grouping`; `Skipped` with the reason; or a `Problem` naming the bad field. Pure and
    deterministic: the same pod and the same answers of the callables give the same result, and a
    later call for any pod of the same owner recomputes the PodGroup from the owner's current spec.
    """
    if not isinstance(pod, Mapping):
        return Problem("pod", "must be an object", f"a pod must be a Kubernetes object, not {type(pod).__name__}")
    pod_meta = meta(pod)
    name, namespace = pod_meta.get("name"), pod_meta.get("namespace")
    if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
        return Problem("metadata.name", "is required with metadata.namespace",
                       f"a pod needs metadata.name and metadata.namespace (got {name!r}, {namespace!r})")
    if dig(pod, "spec", "schedulerName") != scheduler_name:
        return Skipped(f"not scheduled by {scheduler_name}")
    if annotations(pod).get(SKIP_ANNOTATION) == "true":
        return Skipped("skip-podgrouper annotation on the pod")
    ctx = Context(pod=pod, lookup=lookup, namespace_labels=namespace_labels, default_queue=default_queue,
                  queue_label=queue_label, node_pool_label=node_pool_label,
                  priority_class_exists=priority_class_exists,
                  workload_defaults=workload_defaults_from(workload_defaults), list_pods=list_pods)
    try:
        top, owners = _owner_chain(ctx)
        for owner in owners:
            if owner.annotations.get(SKIP_ANNOTATION) == "true":
                return Skipped(f"skip-podgrouper annotation on {owner.describe()}")
        hand_made = _hand_made_pod_group(ctx, owners)
        if hand_made:
            return Skipped(hand_made)
        plan = _plan(ctx, top, owners)
    except Bad as err:
        return Problem(err.field, err.rule, err.message)
    pool = labels(pod).get(node_pool_label)
    if pool is not None and node_pool_label not in plan.labels:
        plan.labels[node_pool_label] = pool
    if node_pool_label not in plan.labels and _in_project_namespace(ctx):
        # KRM's PodGroup admission: not assigned to a node pool yet, so no shard takes it before the
        # org's assigner has chosen its pool (a PodGroup that exists keeps its own, `_keep_from_existing`).
        plan.labels[node_pool_label] = UNASSIGNED_NODE_POOL
    return _grouping(ctx, plan, top)


def _in_project_namespace(ctx: Context) -> bool:
    if ctx.namespace_labels is None:
        return False
    try:
        return bool(ctx.namespace_labels(ctx.pod_namespace).get(NAMESPACE_PROJECT_LABEL))
    except Exception:  # noqa: BLE001 - the caller's reader failing is a missing label, as in `queue_for`
        return False


# ------------------------------------------------------------------------------------------ owners


def _owner_chain(ctx: Context) -> tuple[Obj, list[Obj]]:
    """(top owner, owners from the pod's first owner up to the top). A pod without owners is its own
    top owner and has no owners.

    KAI follows ``ownerReferences[0]`` of the pod and then of each owner. Here: the first owner must
    exist and every owner's uid must match its reference (KAI stops with an error too); an owner
    above the first that cannot be read ends the chain, and the last one read is the top owner.
    """
    pod = Obj.of("v1", "Pod", ctx.pod)
    refs = meta(ctx.pod).get("ownerReferences")
    if not refs:
        return pod, []
    if not isinstance(refs, list):
        raise bad(pod, "metadata.ownerReferences", "must be a list", refs)
    chain: list[Obj] = []
    holder, ref, seen = pod, refs[0], {pod.uid or pod.name}
    while True:
        field = "metadata.ownerReferences[0]"
        if not isinstance(ref, Mapping) or not all(isinstance(ref.get(k), str) and ref.get(k)
                                                   for k in ("apiVersion", "kind", "name")):
            raise bad(holder, field, "must have apiVersion, kind and name", ref)
        raw = ctx.get(ref["apiVersion"], ref["kind"], ctx.pod_namespace, ref["name"])
        if raw is None:
            if not chain:
                raise bad(holder, field, f"names {ref['kind']} {ref['name']}, which does not exist",
                          show_value=False)
            break
        owner = Obj.of(ref["apiVersion"], ref["kind"], raw)
        if ref.get("uid") and owner.uid and ref["uid"] != owner.uid:
            raise bad(holder, f"{field}.uid", f"must be the uid of {owner.describe()} ({owner.uid})", ref["uid"])
        identity = owner.uid or f"{owner.kind}/{owner.name}"
        if identity in seen or len(chain) >= MAX_OWNER_DEPTH:
            raise bad(owner, "metadata.ownerReferences", "must not loop back or nest deeper than "
                      f"{MAX_OWNER_DEPTH} owners", show_value=False)
        seen.add(identity)
        chain.append(owner)
        next_refs = meta(raw).get("ownerReferences")
        if not next_refs:
            break
        if not isinstance(next_refs, list) or len(next_refs) > 1:
            raise bad(owner, "metadata.ownerReferences", "must name at most one owner", next_refs)
        holder, ref = owner, next_refs[0]
    return chain[-1], chain


def _hand_made_pod_group(ctx: Context, owners: list[Obj]) -> str | None:
    """Why the pod is left to a PodGroup made by hand, or None.

    The pod names a PodGroup (``pod-group-name``) and that PodGroup is not one the grouper made for
    this pod: it exists and none of its owners is the pod or one of the pod's owners; or the pod has
    no owners and the PodGroup cannot be found (KAI leaves such a pod alone).
    """
    name = annotations(ctx.pod).get(POD_GROUP_ANNOTATION)
    if not name:
        return None
    existing = ctx.get(PODGROUP_API_VERSION, PODGROUP_KIND, ctx.pod_namespace, name)
    if existing is None:
        return None if owners else f"the pod names PodGroup {name}, which it does not own"
    ours = {o.uid for o in owners} | {str(meta(ctx.pod).get("uid") or "")}
    refs = meta(existing).get("ownerReferences")
    refs = refs if isinstance(refs, list) else []
    if any(isinstance(r, Mapping) and r.get("uid") and r.get("uid") in ours for r in refs):
        return None
    return f"the pod names PodGroup {name}, made by hand"


# ------------------------------------------------------------------------------------------ plan


def _plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    if owners and _is_skipped_top(top):
        return _skip_top_owner(ctx, top, owners)
    plugin = _plugin(top) or _default
    return plugin(ctx, top, owners)


def _skip_top_owner(ctx: Context, skipped: Obj, owners: list[Obj]) -> Plan:
    """KAI's skip-top-owner rule (TrainJob, Argo Workflow, ...): the owner below the top (or the pod)
    is grouped instead, with the skipped owner's labels and annotations added where it has none of
    its own, and the skipped kind's default priority class and preemptibility as labels."""
    below = owners[-2] if len(owners) >= 2 else Obj.of("v1", "Pod", ctx.pod)
    defaults = ctx.defaults_for(skipped) or {}
    priority = defaults.get("priorityName", "")
    if priority and ctx.priority_exists(priority):
        below.labels.setdefault(PRIORITY_LABEL, priority)
    if defaults.get("preemptibility"):
        below.labels.setdefault(PREEMPTIBILITY_LABEL, defaults["preemptibility"])
    for key, value in skipped.labels.items():
        below.labels.setdefault(key, value)
    for key, value in skipped.annotations.items():
        below.annotations.setdefault(key, value)
    plugin = _plugin(below) or _default
    return plugin(ctx, below, owners[:-1])


# ------------------------------------------------------------------------------------------ the PodGroup


def _grouping(ctx: Context, plan: Plan, top: Obj) -> Grouping:
    spec: dict[str, Any] = {"queue": plan.queue}
    if plan.priority_class:
        spec["priorityClassName"] = plan.priority_class
    if plan.preemptibility:
        spec["preemptibility"] = plan.preemptibility
    if plan.preemption_delay is not None:
        spec["preemptionDelay"] = plan.preemption_delay
    if plan.staleness_grace is not None:
        spec["stalenessGracePeriod"] = plan.staleness_grace
    if plan.min_sub_group is not None:
        spec["minSubGroup"] = plan.min_sub_group
    else:
        spec["minMember"] = plan.min_member
    if plan.sub_groups:
        spec["subGroups"] = [s.as_json() for s in plan.sub_groups]
    if plan.topology.as_json():
        spec["topologyConstraint"] = plan.topology.as_json()
    labels_out = dict(plan.labels)
    _keep_from_existing(ctx, plan, spec, labels_out)
    podgroup = {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": PODGROUP_KIND,
        "metadata": {"name": plan.name, "namespace": plan.namespace, "labels": labels_out,
                     "annotations": dict(plan.annotations), "ownerReferences": [dict(plan.owner)]},
        "spec": spec,
    }
    sub_group = next((s.name for s in plan.sub_groups if s.has_pod), None)
    notes = tuple(dict.fromkeys([*ctx.notes, *plan.notes]))
    return Grouping(podgroup=podgroup, pod_annotations={POD_GROUP_ANNOTATION: plan.name},
                    pod_labels={SUBGROUP_LABEL: sub_group} if sub_group else {},
                    top_owner=top.identity(), notes=notes)


def _keep_from_existing(ctx: Context, plan: Plan, spec: dict[str, Any], labels_out: dict[str, str]) -> None:
    """What KAI never changes on a PodGroup it already made: the queue, markUnschedulable,
    schedulingBackoff, a topology constraint when the owner no longer names one, and the queue and
    node-pool labels."""
    existing = ctx.get(PODGROUP_API_VERSION, PODGROUP_KIND, plan.namespace, plan.name)
    if existing is None:
        return
    old_spec = existing.get("spec") if isinstance(existing.get("spec"), Mapping) else {}
    if isinstance(old_spec.get("queue"), str) and old_spec.get("queue"):
        spec["queue"] = old_spec["queue"]
    for key in ("markUnschedulable", "schedulingBackoff"):
        if key in old_spec:
            spec[key] = old_spec[key]
    if "topologyConstraint" not in spec and isinstance(old_spec.get("topologyConstraint"), Mapping) \
            and old_spec["topologyConstraint"]:
        spec["topologyConstraint"] = dict(old_spec["topologyConstraint"])
    old_labels = labels(existing)
    for key in (ctx.queue_label, ctx.node_pool_label):
        if key in old_labels:
            labels_out[key] = old_labels[key]
        elif key == ctx.node_pool_label:
            labels_out.pop(key, None)
