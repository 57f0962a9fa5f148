"""Reads of the audit app."""

from __future__ import annotations

from django.db.models import QuerySet

from kaiweb.audit.models import AuditEntry


def audit_entries() -> QuerySet[AuditEntry]:
    """All audit entries, newest first, with the actor joined."""
    return AuditEntry.objects.select_related("actor").order_by("-at", "-id")


def history_of(object_type: str, object_id: object) -> QuerySet[AuditEntry]:
    """The changes to one object, newest first."""
    return audit_entries().filter(object_type=object_type, object_id=str(object_id))
