"""The webhooks' verdicts (`mutate`, `validate`) and the writes of namespace→queue bindings.

`mutate` and `validate` take an AdmissionReview's ``request`` (already read by
`kaiweb.admission.review`) and return the AdmissionReview to answer. Their work is bounded: the
object is at most ``KAI_ADMISSION_MAX_BYTES``, the rules are linear in it, and a verdict costs at most
three small queries and one cached namespace read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from kaiweb.admission import cluster, review, rules, selectors
from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.cluster.backends.types import QUEUE_LABEL
from kaiweb.core.services import CONFLICT
from kaiweb.queues.models import Queue

logger = logging.getLogger(__name__)
POD_GROUP_QUEUE_FIELD = "spec.queue"
POD_QUEUE_FIELD = f"metadata.labels[{QUEUE_LABEL}]"


def _kind(request: Mapping[str, Any]) -> tuple[str, str]:
    kind = request.get("kind") or {}
    return str(kind.get("group") or ""), str(kind.get("kind") or "")


def _namespace(request: Mapping[str, Any], obj: Mapping[str, Any]) -> str:
    return str(request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")


def _ours(pod: Mapping[str, Any]) -> bool:
    return str((pod.get("spec") or {}).get("schedulerName") or "") == settings.KAI_SCHEDULER_NAME


def _denied(request: Mapping[str, Any], denial: rules.Denial, what: str) -> dict[str, Any]:
    logger.info("admission: refused %s: %s", what, denial)
    return review.deny(request, str(denial), field=denial.field, rule=denial.rule)


def mutate(request: Mapping[str, Any]) -> dict[str, Any]:
    """The pod mutations of `kaiweb.admission.rules` for a pod of our scheduler being created."""
    group, kind = _kind(request)
    original = pod = request.get("object") or {}
    if (group, kind) != ("", "Pod") or request.get("operation") != "CREATE":
        return review.allow(request)
    namespace = _namespace(request, pod)
    enforced = None
    if not _ours(pod):
        # A pod of another scheduler in a namespace whose project enforces ours is put on ours, then
        # mutated as ours are. (A namespace that cannot be read enforces nothing: fail open, logged.)
        if not rules.enforces_scheduler(cluster.namespace_annotations(namespace)):
            return review.allow(request)
        pod, enforced = rules.enforce_scheduler(pod, settings.KAI_SCHEDULER_NAME)
    queue_from_namespace = None
    if not rules.pod_queue(pod) and not rules.labels(pod).get(rules.PROJECT_LABEL):
        queue_from_namespace = cluster.namespace_labels(namespace).get(QUEUE_LABEL) or None
    result = rules.mutate_pod(pod, namespace_queue=queue_from_namespace)
    what = f"pod {namespace}/{(pod.get('metadata') or {}).get('name') or (pod.get('metadata') or {}).get('generateName') or ''}"
    if isinstance(result, rules.Denial):
        return _denied(request, result, what)
    mutated, notes = result
    if enforced:
        notes.insert(0, enforced)
    if notes:
        logger.debug("admission: %s: %s", what, "; ".join(notes))
    return review.patched(request, rules.json_patch(original, mutated))


def _queue_denial(queue: str, namespace: str, field: str) -> rules.Denial | None:
    return rules.queue_denial(queue, namespace, selectors.queue_facts(queue, namespace), field=field)


def _changed(request: Mapping[str, Any], read: Any) -> bool:
    """On an update, whether ``read(object)`` differs from ``read(oldObject)``; always true on create."""
    if request.get("operation") != "UPDATE":
        return True
    return bool(read(request.get("object") or {}) != read(request.get("oldObject") or {}))


def validate(request: Mapping[str, Any]) -> dict[str, Any]:
    """Pods of our scheduler (GPU requests, queue) and PodGroups (subgroups, queue), on create and update.
    An update is checked only in what it changes, so labels and annotations written later by kaiweb or a
    controller are never refused for a binding made after the pod."""
    group, kind = _kind(request)
    obj = request.get("object") or {}
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return review.allow(request)
    namespace = _namespace(request, obj)
    name = (obj.get("metadata") or {}).get("name") or ""
    if (group, kind) == ("", "Pod"):
        if not _ours(obj):
            return review.allow(request)
        what = f"pod {namespace}/{name}"
        if _changed(request, rules.annotations) or _changed(request, lambda p: p.get("spec")):
            denial = rules.gpu_request_denial(obj)
            if denial is not None:
                return _denied(request, denial, what)
        queue = rules.pod_queue(obj)
        if queue and _changed(request, rules.pod_queue):
            denial = _queue_denial(queue, namespace, POD_QUEUE_FIELD)
            if denial is not None:
                return _denied(request, denial, what)
        return review.allow(request)
    if kind == "PodGroup" and group == "scheduling.run.ai":
        what = f"PodGroup {namespace}/{name}"
        denial = rules.subgroup_denial(obj)
        if denial is not None:
            return _denied(request, denial, what)
        queue = str((obj.get("spec") or {}).get("queue") or "")
        if queue and _changed(request, lambda g: (g.get("spec") or {}).get("queue")):
            denial = _queue_denial(queue, namespace, POD_GROUP_QUEUE_FIELD)
            if denial is not None:
                return _denied(request, denial, what)
        return review.allow(request)
    return review.allow(request)


# ------------------------------------------------------------------------------------------ bindings


def bind(namespace: str, queue: Queue, *, actor: Any = None, source: str = AuditSource.SYSTEM) -> NamespaceQueueBinding:
    """Let ``namespace`` use ``queue``; from its first binding on, the namespace may use only its bound queues."""
    binding = NamespaceQueueBinding(namespace=namespace, queue=queue)
    binding.full_clean(validate_unique=False, validate_constraints=False)
    if queue.children.exists():
        raise ValidationError({"queue": f"queue {queue.name} has child queues: bind a namespace to leaf queues"})
    try:
        with transaction.atomic():
            binding.save()
            audit.record(binding, AuditAction.CREATE, actor=actor, source=source, after=audit.snapshot(binding))
    except IntegrityError:
        raise ValidationError({"queue": ValidationError(f"namespace {namespace} is already bound to queue {queue.name}",
                                                         code=CONFLICT)}) from None
    return binding


def unbind(binding: NamespaceQueueBinding, *, actor: Any = None, source: str = AuditSource.SYSTEM) -> None:
    with transaction.atomic():
        before, pk = audit.snapshot(binding), binding.pk
        binding.delete()
        audit.record(binding, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)
