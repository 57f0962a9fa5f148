"""Admin of the workloads app: workloads and pods as last observed (read-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from kaiweb.core.admin import ReadOnlyAdmin
from kaiweb.workloads.models import Pod, Workload


class PodInline(admin.TabularInline):
    model = Pod
    extra = 0
    can_delete = False
    fields = ("name", "state", "node", "gpu", "gpu_fraction", "gpu_memory_mib", "cpu", "memory")
    readonly_fields = fields

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "queue", "priority_class", "state", "min_member", "submitted_at")
    list_filter = ("state", "priority_class", "cluster")
    search_fields = ("name", "namespace", "queue__name")
    list_select_related = ("queue", "priority_class")
    inlines = (PodInline,)
    date_hierarchy = "submitted_at"
