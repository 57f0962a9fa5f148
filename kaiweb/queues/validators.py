"""The rules of a queue's own fields; the tree rules live in services (they need the database)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

from kaiweb.core.choices import RESOURCES
from scheduler_core import queue_crd

if TYPE_CHECKING:
    from kaiweb.queues.models import Queue

#: The longest minimum runtime: KAI's CRD field is a Go duration (int64 nanoseconds, about 292 years).
MAX_DURATION = dt.timedelta(microseconds=queue_crd.MAX_DURATION_US)
#: A queue priority is a 32-bit integer in KAI's Queue CRD.
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1


def quota_errors(resource: str, quota: float, limit: float, weight: float) -> dict[str, str]:
    """Errors of one resource's quota/limit/weight, keyed by model field (empty when valid). The
    rule is the Queue CRD's (``scheduler_core.queue_crd.resource_problems``), in any one unit."""
    return {f"{resource}_{queue_crd.RESOURCE_KEYS[key]}": message
            for key, message in queue_crd.resource_problems(quota, limit, weight).items()}


def validate_queue_fields(queue: Queue) -> None:
    """Raise ValidationError naming each field that breaks a rule of its own values."""
    errors: dict[str, str] = {}
    for r in RESOURCES:
        errors.update(
            quota_errors(
                r, getattr(queue, f"{r}_quota"), getattr(queue, f"{r}_limit"), getattr(queue, f"{r}_over_quota_weight")
            )
        )
    priority = queue.priority
    if isinstance(priority, int) and not isinstance(priority, bool) and not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        errors["priority"] = f"must be between {PRIORITY_MIN} and {PRIORITY_MAX} (a 32-bit integer, as in KAI's Queue)"
    for field in ("preempt_min_runtime", "reclaim_min_runtime"):
        value = getattr(queue, field)
        if isinstance(value, dt.timedelta) and not dt.timedelta(0) <= value <= MAX_DURATION:
            errors[field] = "must be between 0 and 2562047h (the longest duration KAI's Queue can hold)"
    labels = queue.labels
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        errors["labels"] = "must be an object mapping label names to string values"
    if queue.pk is not None and queue.parent_id == queue.pk:
        errors["parent"] = "a queue cannot be its own parent"
    if errors:
        raise ValidationError(errors)
