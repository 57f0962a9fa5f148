"""Writes of the usage app: retention and roll-up settings (audited)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.core.services import Change, reject_unknown_fields
from kaiweb.usage.models import UsageSettings

SETTINGS_FIELDS = frozenset({"raw_width_seconds", "raw_retention_days", "hourly_retention_days", "daily_retention_days"})


def update_settings(data: Mapping[str, Any], *, actor: Any = None, source: str = AuditSource.SYSTEM) -> Change[UsageSettings]:
    """Change how usage is bucketed and kept; coarser buckets must be kept at least as long as finer ones."""
    reject_unknown_fields(dict(data), SETTINGS_FIELDS)
    with transaction.atomic():
        UsageSettings.load()
        obj = UsageSettings.objects.select_for_update().get(pk=1)
        before = audit.snapshot(obj)
        for key, value in data.items():
            setattr(obj, key, value)
        obj.full_clean(validate_constraints=False)
        if obj.hourly_retention_days < obj.raw_retention_days:
            raise ValidationError({"hourly_retention_days": "must be at least raw_retention_days"})
        if obj.daily_retention_days < obj.hourly_retention_days:
            raise ValidationError({"daily_retention_days": "must be at least hourly_retention_days"})
        if 3600 % obj.raw_width_seconds:
            raise ValidationError({"raw_width_seconds": "must divide an hour evenly (e.g. 10, 60, 300)"})
        obj.save()
        after = audit.snapshot(obj)
        if after != before:
            audit.record(obj, AuditAction.UPDATE, actor=actor, source=source, before=before, after=after)
        return Change(obj)
