"""Admin of the audit app: the log, read-only."""

from __future__ import annotations

from django.contrib import admin

from kaiweb.audit.models import AuditEntry
from kaiweb.core.admin import ReadOnlyAdmin


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_name", "source", "action", "object_type", "object_repr")
    list_filter = ("action", "source", "object_type")
    search_fields = ("object_repr", "actor_name", "object_id")
    date_hierarchy = "at"
    readonly_fields = ("at", "actor", "actor_name", "source", "object_type", "object_id", "object_repr", "action",
                       "before", "after")
