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
        "eviction_mode", "update_pod_eviction_condition", "enabled",
    )

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
