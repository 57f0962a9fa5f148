"""Serializers of the org API: node pools, departments and projects, addressed by name.

The writes take what the services take (``queues: [{pool, name?, priority?, gpu: {deserved, limit,
over_quota_weight}, cpu, memory}]``, KRM's units); the services check KRM's rules and name the field.
The serializers only check shapes and sizes, and refuse fields they do not know.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kaiweb.cluster.choices import GpuPlacementStrategy, PlacementStrategy
from kaiweb.core.api.base import WarningsMixin
from kaiweb.org import services, status
from kaiweb.org.choices import NODE_POOL_LABEL
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.queues.models import k8s_name_validator

MAX_DEFAULT_POOLS = 16
QUEUES_HELP = ("One entry per node pool: {pool, name?, priority?, gpu: {deserved, limit, over_quota_weight}, cpu, "
               "memory}, in KRM's units (GPUs, millicores, MB); -1 is no limit.")


class StrictFieldsMixin(serializers.Serializer):
    """A write naming a field this resource does not have is a 400 that names it, not silently ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) or hasattr(data, "keys"):
            writable = {name for name, f in self.fields.items() if not f.read_only}
            unknown = sorted(set(data.keys()) - writable)
            if unknown:
                raise serializers.ValidationError({k: [f"is not a field that can be set (allowed: "
                                                       f"{', '.join(sorted(writable))})"] for k in unknown})
        return super().to_internal_value(data)


class EntriesField(serializers.ListField):
    """The ``queues`` entries, passed to the services as given (they check every entry)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.DictField(), max_length=services.MAX_ENTRIES, help_text=QUEUES_HELP,
                         **kwargs)


class PeopleField(serializers.ListField):
    """Usernames, read from and given as the whole list (the services check each name)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=150), required=False,
                         max_length=services.MAX_PEOPLE, **kwargs)

    def to_representation(self, data: Any) -> list[str]:
        return sorted(u.get_username() for u in data.all())


class NodePoolSerializer(StrictFieldsMixin, WarningsMixin, serializers.Serializer):
    """A node pool: the nodes with one label pair, scheduled by its own shard (whose settings are here)."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=63, validators=[k8s_name_validator])
    label_key = serializers.CharField(max_length=253, required=False, allow_blank=True,
                                      help_text="Node label key; empty on the default pool. Fixed once made.")
    label_value = serializers.CharField(max_length=63, required=False, allow_blank=True,
                                        help_text="Node label value, matched exactly. Fixed once made.")
    preferred_topology = serializers.CharField(max_length=253, required=False, allow_blank=True)
    gpu_placement = serializers.ChoiceField(GpuPlacementStrategy.choices, required=False)
    cpu_placement = serializers.ChoiceField(PlacementStrategy.choices, required=False)
    k_value = serializers.FloatField(min_value=0, max_value=1e6, required=False,
                                     help_text="Time-based fair share strength (0 = off).")
    preempt_min_runtime = serializers.DurationField(required=False, allow_null=True)
    reclaim_min_runtime = serializers.DurationField(required=False, allow_null=True)
    shard = serializers.SerializerMethodField(help_text="The shard that schedules this pool.")
    phase = serializers.CharField(read_only=True)
    message = serializers.CharField(read_only=True)
    node_count = serializers.SerializerMethodField()
    gpu_products = serializers.SerializerMethodField(help_text="The GPU products of the pool's nodes.")
    created = serializers.DateTimeField(read_only=True)
    updated = serializers.DateTimeField(read_only=True)

    SHARD_READ = ("gpu_placement", "cpu_placement", "k_value", "preempt_min_runtime", "reclaim_min_runtime")

    def to_representation(self, instance: NodePool) -> dict[str, Any]:
        data = super().to_representation(instance)
        shard = instance.shard
        for key in self.SHARD_READ:
            value = getattr(shard, key, None) if shard is not None else None
            data[key] = self.fields[key].to_representation(value) if value is not None else None
        return data

    def get_shard(self, obj: NodePool) -> str | None:
        return obj.shard.name if obj.shard_id else None

    def _nodes(self, obj: NodePool) -> list[Any]:
        nodes = getattr(obj, "_pool_nodes", None)
        if nodes is None:
            qs = obj.cluster.nodes.all()
            qs = (qs.exclude(labels__has_key=NODE_POOL_LABEL) if obj.is_default
                  else qs.filter(labels__contains={NODE_POOL_LABEL: obj.name}))
            nodes = list(qs.values_list("gpu_product", flat=True)[:10_000])
            obj._pool_nodes = nodes
        return nodes

    def get_node_count(self, obj: NodePool) -> int:
        return len(self._nodes(obj))

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_gpu_products(self, obj: NodePool) -> list[str]:
        return sorted({p for p in self._nodes(obj) if p})


class OwnerSerializer(StrictFieldsMixin, WarningsMixin, serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=63, validators=[k8s_name_validator])
    display_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    queues = EntriesField(required=False)
    created = serializers.DateTimeField(read_only=True)
    updated = serializers.DateTimeField(read_only=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["queues"] = services.entry_dicts(services.entries_of(instance))
        return data


class DepartmentSerializer(OwnerSerializer):
    """A department: its queue per node pool is the parent of its projects' queues there."""

    admins = PeopleField(help_text="Usernames of the department admins (the whole list): they run the "
                                             "department's projects.")
    projects = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = Department


class QuotaFiguresSerializer(serializers.Serializer):
    gpu = serializers.FloatField(help_text="GPUs.")
    cpu = serializers.FloatField(help_text="Millicores.")
    memory = serializers.FloatField(help_text="MB.")


class PoolQuotaStatusSerializer(serializers.Serializer):
    """KRM's quota status of one node pool (or of all): the quota and what the project's workloads take."""

    deserved = QuotaFiguresSerializer()
    limit = QuotaFiguresSerializer(help_text="-1: no limit.")
    requested = QuotaFiguresSerializer(help_text="Pending and running workloads' requests.")
    allocated = QuotaFiguresSerializer(help_text="Running workloads' pods.")
    allocated_non_preemptible = QuotaFiguresSerializer(help_text="Running pods of non-preemptible workloads.")


class ProjectStatusSerializer(serializers.Serializer):
    pools = serializers.DictField(child=PoolQuotaStatusSerializer(), help_text="By node pool name.")
    total = PoolQuotaStatusSerializer()


class ProjectSerializer(OwnerSerializer):
    """A project: its queue per node pool (under its department's there), its namespace and its quota status."""

    uid = serializers.UUIDField(read_only=True)
    department = serializers.CharField(max_length=63, required=False, allow_null=True, allow_blank=True,
                                       help_text="The department's name; empty for none.")
    namespace = serializers.CharField(
        max_length=63, required=False, allow_blank=True, validators=[k8s_name_validator],
        help_text="An existing namespace to adopt; empty: kai-<name>, made and kept. Reads give the one in use.")
    enforce_kai_scheduler = serializers.BooleanField(required=False)
    default_node_pools = serializers.ListField(child=serializers.CharField(max_length=63), required=False,
                                               max_length=MAX_DEFAULT_POOLS,
                                               help_text="Node pools, in order, for workloads that name none.")
    members = PeopleField(help_text="Usernames of the project members (the whole list): they see the "
                                              "project.")
    status = serializers.SerializerMethodField(
        help_text="KRM's nodePoolsQuotaStatuses and quotaStatus: per node pool and in total.")

    class Meta:
        model = Project

    def to_representation(self, instance: Project) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["department"] = instance.department.name if instance.department_id else None
        data["namespace"] = instance.namespace_name
        return data

    @extend_schema_field(ProjectStatusSerializer)
    def get_status(self, obj: Project) -> dict[str, Any]:
        return status.project_quota_status(obj)
