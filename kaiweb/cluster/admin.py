"""Admin of the cluster app: clusters and shards (platform admins, audited), nodes and GPUs (read-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from kaiweb.cluster import services
from kaiweb.cluster.models import Cluster, GpuDevice, Node, SchedulingShard, UnreadableObject
from kaiweb.core.admin import SOURCE, ReadOnlyAdmin, ServiceAdmin
from kaiweb.core.services import Change


@admin.register(Cluster)
class ClusterAdmin(ServiceAdmin):
    list_display = ("name", "backend", "enabled")
    list_filter = ("backend", "enabled")
    search_fields = ("name",)
    fields = ("name", "backend", "settings", "enabled", "description")

    def service_save(self, request: Any, obj: Cluster | None, data: dict[str, Any], change: bool) -> Change[Any]:
        return services.save_cluster(obj, data, actor=request.user, source=SOURCE)

    def service_delete(self, request: Any, obj: Cluster) -> None:
        services.delete_cluster(obj, actor=request.user, source=SOURCE)


@admin.register(SchedulingShard)
class SchedulingShardAdmin(ServiceAdmin):
    list_display = ("name", "cluster", "partition_label_key", "partition_label_value", "gpu_placement", "k_value",
                    "eviction_mode", "enabled")
    list_filter = ("cluster", "gpu_placement", "eviction_mode", "enabled")
    search_fields = ("name", "partition_label_value")
    fields = (
        "cluster", "name", "partition_label_key", "partition_label_value", "gpu_placement", "cpu_placement",
        "k_value", "usage_window_seconds", "usage_half_life_seconds", "preempt_min_runtime", "reclaim_min_runtime",
        "eviction_mode", "update_pod_eviction_condition", "enabled", "actions_run", "queue_depths", "usage_source",
        "not_applied",
    )
    readonly_fields = ("actions_run", "queue_depths", "usage_source", "not_applied")

    @admin.display(description="Actions, in order")
    def actions_run(self, obj: SchedulingShard) -> str:
        """The actions a cycle runs, as the SchedulingShard object's spec.actions resolves them."""
        if not isinstance(obj.actions, list):
            return "KAI's default actions in their default order (no spec.actions)"
        return " → ".join(str(a) for a in obj.actions) or "none: every action is disabled"

    @admin.display(description="Time-based fair share reads usage from")
    def usage_source(self, obj: SchedulingShard) -> str:
        """The usage database the SchedulingShard object names, or kaiweb's own accounting, and why."""
        return obj.usage_db_answer()[1]

    @admin.display(description="Queue depth per action")
    def queue_depths(self, obj: SchedulingShard) -> str:
        """KAI's queueDepthPerAction, as the SchedulingShard object sets it."""
        depths = obj.queue_depth_per_action if isinstance(obj.queue_depth_per_action, dict) else {}
        if not depths:
            return "every job of each queue (no queueDepthPerAction)"
        return ", ".join(f"{action}: {depth} job(s) per queue" for action, depth in sorted(depths.items()))

    @admin.display(description="SchedulingShard fields not applied")
    def not_applied(self, obj: SchedulingShard) -> Any:
        """What the shard's SchedulingShard object sets that kaiweb reads but does not apply, and why."""
        from django.utils.html import format_html, format_html_join

        rows = [r for r in (obj.unsupported_fields or []) if isinstance(r, dict)]
        if not rows:
            return "none: every field the SchedulingShard object sets is applied"
        return format_html("<ul>{}</ul>", format_html_join(
            "", "<li><code>{}</code>: {}</li>", ((r.get("field", ""), r.get("reason", "")) for r in rows)))

    def service_save(self, request: Any, obj: SchedulingShard | None, data: dict[str, Any], change: bool) -> Change[Any]:
        return services.save_shard(obj, data, actor=request.user, source=SOURCE)

    def service_delete(self, request: Any, obj: SchedulingShard) -> None:
        services.delete_shard(obj, actor=request.user, source=SOURCE)


class GpuDeviceInline(admin.TabularInline):
    model = GpuDevice
    extra = 0
    can_delete = False
    readonly_fields = ("index", "uuid", "product", "memory_mib", "mig_profile", "healthy", "used_fraction")

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "cluster", "allocatable_gpu", "gpu_product", "ready", "unschedulable", "observed_at")
    list_filter = ("cluster", "ready", "unschedulable", "gpu_product")
    search_fields = ("name",)
    list_select_related = ("cluster",)
    inlines = (GpuDeviceInline,)


@admin.register(UnreadableObject)
class UnreadableObjectAdmin(ReadOnlyAdmin):
    """Objects the scheduler skips, with the field and the rule they break."""

    list_display = ("kind", "namespace", "name", "field", "rule", "deferred", "last_seen", "cluster")
    list_filter = ("cluster", "kind", "deferred")
    search_fields = ("namespace", "name", "field", "message")
