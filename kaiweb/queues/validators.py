"""The rules of a queue's own fields; the tree rules live in services (they need the database)."""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from kaiweb.core.choices import RESOURCES, UNLIMITED

if TYPE_CHECKING:
    from kaiweb.queues.models import Queue

#: The longest minimum runtime: KAI's CRD field is a Go duration (int64 nanoseconds, about 292 years).
MAX_DURATION = dt.timedelta(microseconds=(2**63 - 1) // 1000)
#: A queue priority is a 32-bit integer in KAI's Queue CRD.
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1


def _not_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)


def quota_errors(resource: str, quota: float, limit: float, weight: float) -> dict[str, str]:
    """Errors of one resource's quota/limit/weight, keyed by field name (empty when valid)."""
    errors: dict[str, str] = {}
    for field, value in ((f"{resource}_quota", quota), (f"{resource}_limit", limit)):
        if value is None:
            errors[field] = "is required (-1 for unlimited)"
        elif _not_number(value):
            errors[field] = "must be a finite number (-1 for unlimited)"
        elif value < 0 and value != UNLIMITED:
            errors[field] = f"must be -1 (unlimited) or a non-negative amount, not {value:g}"
    if weight is None:
        errors[f"{resource}_over_quota_weight"] = "is required"
    elif _not_number(weight):
        errors[f"{resource}_over_quota_weight"] = "must be a finite number"
    elif weight < 0:
        errors[f"{resource}_over_quota_weight"] = f"must not be negative (got {weight:g}); 0 means no share of the surplus"
    if f"{resource}_quota" in errors or f"{resource}_limit" in errors:
        return errors
    if limit != UNLIMITED:
        if quota == UNLIMITED:
            errors[f"{resource}_limit"] = (
                f"limit {limit:g} is below the quota (unlimited); use -1 for the limit or lower the quota"
            )
        elif limit < quota:
            errors[f"{resource}_limit"] = f"limit {limit:g} is below the quota {quota:g}; a limit must be -1 or ≥ the quota"
    return errors


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
