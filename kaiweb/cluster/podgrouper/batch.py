"""Kubernetes' own workloads: Job, CronJob (through its Job) and Deployment (one PodGroup per pod).

ReplicaSet, StatefulSet and bare pods use the default grouper as they are (see `core`).
"""

from __future__ import annotations

from collections.abc import Mapping

from kaiweb.cluster.podgrouper.defaults import Context, Obj, bad, default_plan, int_text, priority_for
from kaiweb.cluster.podgrouper.model import (
    INFERENCE_PRIORITY,
    MIN_MEMBER_ANNOTATION,
    PODGROUP_API_VERSION,
    PODGROUP_KIND,
    Plan,
    meta,
)


def job_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    """A batch Job: the default PodGroup, minMember from the Job's ``kai.scheduler/batch-min-member``.

    KAI keeps using a PodGroup of the old naming (``pg-<pod name>-<job uid>``) when one exists, and
    then minMember is 1.
    """
    plan = default_plan(ctx, top)
    legacy_name = f"pg-{ctx.pod_name}-{top.uid}"
    if legacy_name != plan.name and ctx.get(PODGROUP_API_VERSION, PODGROUP_KIND, ctx.pod_namespace,
                                            legacy_name) is not None:
        plan.name = legacy_name
        return plan
    override = top.annotations.get(MIN_MEMBER_ANNOTATION)
    if override is not None:
        plan.min_member = int_text(top, override, f"metadata.annotations[{MIN_MEMBER_ANNOTATION}]", minimum=1)
    return plan


def cronjob_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    """A CronJob: each run (Job) is its own gang; the PodGroup is the default one of that Job."""
    refs = meta(ctx.pod).get("ownerReferences")
    job_ref = next((r for r in refs if isinstance(r, Mapping) and r.get("kind") == "Job"), None) \
        if isinstance(refs, list) else None
    pod = Obj.of("v1", "Pod", ctx.pod)
    if job_ref is None or not isinstance(job_ref.get("name"), str):
        raise bad(pod, "metadata.ownerReferences", "must include the Job that runs the CronJob", refs)
    raw = ctx.get("batch/v1", "Job", ctx.pod_namespace, job_ref["name"])
    if raw is None:
        raise bad(pod, "metadata.ownerReferences", f"names Job {job_ref['name']}, which does not exist",
                  show_value=False)
    return default_plan(ctx, Obj.of("batch/v1", "Job", raw))


def deployment_plan(ctx: Context, top: Obj, owners: list[Obj]) -> Plan:
    """A Deployment: every pod is its own PodGroup, named and owned by the pod; default priority
    class ``inference`` instead of ``train``."""
    plan = default_plan(ctx, top)
    pod = Obj.of("v1", "Pod", ctx.pod)
    plan.owner = pod.ref()
    plan.priority_class = priority_for(ctx, top, INFERENCE_PRIORITY)
    plan.name = f"pg-{pod.name}-{pod.uid}"
    return plan
