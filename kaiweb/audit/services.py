"""Writes of the audit app: one entry per change, in the same transaction as the change."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models, transaction

from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.audit.models import AuditEntry
from kaiweb.core.services import Change, reject_unknown_fields

S = TypeVar("S", bound=models.Model)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def snapshot(obj: models.Model) -> dict[str, Any]:
    """The concrete field values of `obj` as JSON (foreign keys by id, durations in seconds)."""
    data: dict[str, Any] = {}
    for field in obj._meta.concrete_fields:
        if field.name in {"created", "updated"}:
            continue  # bookkeeping, not a change anyone made
        data[field.attname] = _jsonable(getattr(obj, field.attname))
    return data


def record(
    obj: models.Model,
    action: str,
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    source: str = AuditSource.SYSTEM,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    object_id: Any = None,
) -> AuditEntry:
    """Write one audit entry for a change to `obj`; call it inside the change's transaction."""
    if action not in AuditAction.values:
        raise ValueError(f"action: {action!r} is not one of {AuditAction.values}")
    user = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(
        actor=user,
        actor_name=user.get_username() if user is not None else "",
        source=source,
        object_type=obj._meta.label_lower,
        object_id=str(object_id if object_id is not None else obj.pk),
        object_repr=str(obj)[:300],
        action=action,
        before=before,
        after=after,
    )


def update_singleton(model: type[S], data: Mapping[str, Any], allowed: frozenset[str], check: Callable[[S], None], *,
                     actor: AbstractBaseUser | AnonymousUser | None, source: str) -> Change[S]:
    """Change fields of a settings row (``model.load()``, the one row with pk 1): only ``allowed`` fields,
    the model's own validation, then ``check`` (raising ``ValidationError`` names the field), saved and
    audited in one transaction; an unchanged row writes no audit entry."""
    reject_unknown_fields(dict(data), allowed)
    with transaction.atomic():
        model.load()  # type: ignore[attr-defined]  # every settings model has load(), which makes its one row
        obj = model._default_manager.select_for_update().get(pk=1)
        before = snapshot(obj)
        for key, value in data.items():
            setattr(obj, key, value)
        obj.full_clean(validate_constraints=False)
        check(obj)
        obj.save()
        after = snapshot(obj)
        if after != before:
            record(obj, AuditAction.UPDATE, actor=actor, source=source, before=before, after=after)
        return Change(obj)
