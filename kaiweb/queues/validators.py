"""The rules of a queue's own fields; the tree rules live in services (they need the database)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

from kaiweb.core.choices import RESOURCES, UNLIMITED

if TYPE_CHECKING:
    from kaiweb.queues.models import Queue


def quota_errors(resource: str, quota: float, limit: float, weight: float) -> dict[str, str]:
    """Errors of one resource's quota/limit/weight, keyed by field name (empty when valid)."""
    errors: dict[str, str] = {}
    for field, value in ((f"{resource}_quota", quota), (f"{resource}_limit", limit)):
        if value is None:
            errors[field] = "is required (-1 for unlimited)"
        elif value < 0 and value != UNLIMITED:
            errors[field] = f"must be -1 (unlimited) or a non-negative amount, not {value:g}"
    if weight is None:
        errors[f"{resource}_over_quota_weight"] = "is required"
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
    labels = queue.labels
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        errors["labels"] = "must be an object mapping label names to string values"
    if queue.pk is not None and queue.parent_id == queue.pk:
        errors["parent"] = "a queue cannot be its own parent"
    if errors:
        raise ValidationError(errors)
