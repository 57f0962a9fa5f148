"""Node pools, departments and projects in the Django admin: read only. They change through the org pages
and the API (`kaiweb.org.services`: KRM's rules, the queues and shards they give, the audit)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from kaiweb.org.models import Department, NodePool, OwnerQueue, Project


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(NodePool)
class NodePoolAdmin(ReadOnlyAdmin):
    list_display = ("name", "cluster", "label_key", "label_value", "phase", "shard")
    list_filter = ("phase",)


@admin.register(Department)
class DepartmentAdmin(ReadOnlyAdmin):
    list_display = ("name", "display_name")
    search_fields = ("name",)


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    list_display = ("name", "department", "namespace_name", "enforce_kai_scheduler")
    list_filter = ("department",)
    search_fields = ("name", "namespace")


@admin.register(OwnerQueue)
class OwnerQueueAdmin(ReadOnlyAdmin):
    list_display = ("queue", "node_pool", "department", "project")
    list_filter = ("node_pool",)
