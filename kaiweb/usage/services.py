"""Writes of the usage app: retention and roll-up settings (audited)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError

from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditSource
from kaiweb.core.services import Change
from kaiweb.usage.models import UsageSettings

SETTINGS_FIELDS = frozenset({"raw_width_seconds", "raw_retention_days", "hourly_retention_days", "daily_retention_days"})


def update_settings(data: Mapping[str, Any], *, actor: Any = None, source: str = AuditSource.SYSTEM) -> Change[UsageSettings]:
    """Change how usage is bucketed and kept; coarser buckets must be kept at least as long as finer ones."""
    return audit.update_singleton(UsageSettings, data, SETTINGS_FIELDS, _check_settings, actor=actor, source=source)


def _check_settings(obj: UsageSettings) -> None:
    if obj.hourly_retention_days < obj.raw_retention_days:
        raise ValidationError({"hourly_retention_days": "must be at least raw_retention_days"})
    if obj.daily_retention_days < obj.hourly_retention_days:
        raise ValidationError({"daily_retention_days": "must be at least hourly_retention_days"})
    if 3600 % obj.raw_width_seconds:
        raise ValidationError({"raw_width_seconds": "must divide an hour evenly (e.g. 10, 60, 300)"})
