"""Writes of the workloads app: submit (simulated cluster) or record (observed) PodGroups and pods.

Every change a person makes (create, move to another queue or any other edit, delete) writes an audit
entry with the old and new values in the same transaction; the cluster mirror does not come here."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.cluster.models import Cluster
from kaiweb.core.services import Change, already_exists, reject_unknown_fields
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.workloads.models import Pod, Workload

WORKLOAD_FIELDS = frozenset(
    {
        "cluster", "namespace", "name", "uid", "queue", "priority_class", "preemptibility", "min_member",
        "min_subgroup", "subgroups", "topology_constraint", "labels", "state", "submitted_at",
        "last_start_at", "last_eviction_at", "stale_since", "finished_at",
    }
)
POD_FIELDS = frozenset(
    {
        "name", "uid", "subgroup", "gpu", "gpu_fraction", "gpu_memory_mib", "gpu_devices", "mig_profile", "cpu",
        "memory", "task_priority", "state", "node", "gpu_groups", "duration_seconds", "started_at", "finished_at",
    }
)


def _resolve(model: type, value: Any, field: str, what: str) -> Any:
    if value is None or isinstance(value, model):
        return value
    lookup = {"pk": value} if isinstance(value, int) else {"name": value}
    obj = model.objects.filter(**lookup).first()
    if obj is None:
        raise ValidationError({field: f"{what} {value!r} does not exist"})
    return obj


def check_leaf_queue(queue: Queue) -> None:
    """Only leaf queues hold workloads (KAI skips jobs whose queue has children)."""
    children = list(queue.children.order_by("name").values_list("name", flat=True)[:5])
    if children:
        raise ValidationError(
            {"queue": f"queue {queue.name} has child queues ({', '.join(children)}); workloads go to leaf queues"}
        )


def _pod_errors(index: int, pod: Pod) -> dict[str, str]:
    prefix = f"pods[{index}]."
    errors: dict[str, str] = {}
    if pod.gpu_fraction is not None:
        if not 0 < pod.gpu_fraction <= 1:
            errors[prefix + "gpu_fraction"] = f"must be greater than 0 and at most 1, not {pod.gpu_fraction:g}"
        if pod.gpu:
            errors[prefix + "gpu"] = "a pod asks for whole GPUs or a GPU fraction, not both"
    if pod.gpu_memory_mib is not None and pod.gpu:
        errors[prefix + "gpu_memory_mib"] = "a pod asks for whole GPUs or an amount of GPU memory, not both"
    if pod.gpu and pod.gpu != int(pod.gpu):
        errors[prefix + "gpu"] = f"whole GPUs must be an integer, not {pod.gpu:g}; use gpu_fraction for a part of one"
    try:
        pod.full_clean(exclude=["workload"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(prefix + key, "; ".join(messages))
    return errors


def create_workload(data: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = (), *, actor: Any = None,
                    source: str = AuditSource.SYSTEM) -> Change[Workload]:
    """Create a workload and its pods in one transaction (queue, class and cluster by object, id or name)."""
    reject_unknown_fields(dict(data), WORKLOAD_FIELDS)
    with transaction.atomic():
        values = dict(data)
        values["queue"] = _resolve(Queue, values.get("queue"), "queue", "queue")
        values["priority_class"] = _resolve(PriorityClass, values.get("priority_class"), "priority_class", "priority class")
        cluster = values.get("cluster") or Cluster.objects.filter(name="default").first()
        values["cluster"] = _resolve(Cluster, cluster, "cluster", "cluster")
        values.setdefault("submitted_at", timezone.now())
        if values["queue"] is None:
            raise ValidationError({"queue": "is required"})
        if values["cluster"] is None:
            raise ValidationError({"cluster": "is required (no default cluster exists)"})
        check_leaf_queue(values["queue"])
        workload = Workload(**values)
        workload.full_clean(validate_unique=False, validate_constraints=False)
        if Workload.objects.filter(cluster=workload.cluster, namespace=workload.namespace, name=workload.name).exists():
            raise already_exists("name", f"workload {workload.namespace}/{workload.name} already exists in {workload.cluster}")
        errors: dict[str, str] = {}
        pod_objects = []
        names: set[str] = set()
        for index, pod_data in enumerate(pods):
            unknown = sorted(set(pod_data) - POD_FIELDS)
            for key in unknown:
                errors[f"pods[{index}].{key}"] = "is not a field that can be set"
            pod = Pod(workload=workload, **{k: v for k, v in pod_data.items() if k in POD_FIELDS})
            # Every pod is known by its uid (decisions name the incarnation they are for).
            pod.uid = pod.uid or uuid.uuid4().hex
            if pod.name in names:
                errors[f"pods[{index}].name"] = f"pod name {pod.name!r} is used twice in this workload"
            names.add(pod.name)
            errors.update(_pod_errors(index, pod))
            pod_objects.append(pod)
        if workload.min_member is not None and pods and workload.min_member > len(pods):
            errors["min_member"] = f"is {workload.min_member} but the workload has only {len(pods)} pod(s)"
        if errors:
            raise ValidationError(errors)
        workload.save()
        for pod in pod_objects:
            pod.workload = workload
        Pod.objects.bulk_create(pod_objects)
        audit.record(workload, AuditAction.CREATE, actor=actor, source=source,
                     after={**audit.snapshot(workload), "pods": len(pod_objects)})
        return Change(workload)


UPDATABLE_FIELDS = frozenset({"queue", "priority_class", "preemptibility", "min_member", "min_subgroup", "labels"})


def update_workload(workload: Workload, data: Mapping[str, Any], *, actor: Any = None,
                    source: str = AuditSource.SYSTEM) -> Change[Workload]:
    """Move a workload to another (leaf) queue, or change its class, preemptibility or gang size."""
    reject_unknown_fields(dict(data), UPDATABLE_FIELDS)
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        before = audit.snapshot(workload)
        values = dict(data)
        if "queue" in values:
            values["queue"] = _resolve(Queue, values["queue"], "queue", "queue")
            if values["queue"] is None:
                raise ValidationError({"queue": "is required"})
            check_leaf_queue(values["queue"])
        if "priority_class" in values:
            values["priority_class"] = _resolve(PriorityClass, values["priority_class"], "priority_class", "priority class")
        for key, value in values.items():
            setattr(workload, key, value)
        workload.full_clean(validate_unique=False, validate_constraints=False)
        pods = workload.pods.count()
        if workload.min_member is not None and pods and workload.min_member > pods:
            raise ValidationError({"min_member": f"is {workload.min_member} but the workload has only {pods} pod(s)"})
        workload.save()
        after = audit.snapshot(workload)
        if after != before:
            audit.record(workload, AuditAction.UPDATE, actor=actor, source=source, before=before, after=after)
        return Change(workload)


def delete_workload(workload: Workload, *, actor: Any = None, source: str = AuditSource.SYSTEM) -> None:
    """Forget a workload and its pods (its scheduling history keeps the names)."""
    with transaction.atomic():
        before = {**audit.snapshot(workload), "pods": workload.pods.count()}
        audit.record(workload, AuditAction.DELETE, actor=actor, source=source, before=before)
        workload.delete()
