"""Admin of the usage app: buckets (read-only), retention settings (platform admins, audited)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from kaiweb.core.admin import SOURCE, ReadOnlyAdmin, ServiceAdmin
from kaiweb.core.services import Change
from kaiweb.usage import services
from kaiweb.usage.models import UsageBucket, UsageSettings


@admin.register(UsageBucket)
class UsageBucketAdmin(ReadOnlyAdmin):
    list_display = ("queue", "resource", "start", "width_seconds", "value")
    list_filter = ("resource", "width_seconds", "queue")
    list_select_related = ("queue",)
    date_hierarchy = "start"


@admin.register(UsageSettings)
class UsageSettingsAdmin(ServiceAdmin):
    list_display = ("__str__", "raw_width_seconds", "raw_retention_days", "hourly_retention_days", "daily_retention_days")

    def has_add_permission(self, request: Any) -> bool:
        return False  # one row, created on first use

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: Any) -> Any:
        UsageSettings.load()
        return super().get_queryset(request)

    def service_save(self, request: Any, obj: Any, data: dict[str, Any], change: bool) -> Change[Any]:
        return services.update_settings(data, actor=request.user, source=SOURCE)
