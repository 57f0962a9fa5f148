"""Serializers of the cluster API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from kaiweb.cluster.backends.types import EVICTION_MODE_RULE
from kaiweb.cluster.models import (
    Cluster,
    GpuDevice,
    Node,
    SchedulingShard,
    Topology,
    UnreadableObject,
    redact_url,
)
from kaiweb.core.api.base import WarningsMixin


class ClusterSerializer(WarningsMixin, serializers.ModelSerializer):
    """A cluster and how kaiweb reaches it (settings never hold secrets)."""

    node_count = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = Cluster
        fields = ("id", "name", "backend", "settings", "enabled", "description", "node_count", "created", "updated", "warnings")
        read_only_fields = ("created", "updated")
        extra_kwargs = {"name": {"validators": []}}


class SchedulingShardSerializer(WarningsMixin, serializers.ModelSerializer):
    """A node-label partition scheduled on its own."""

    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    usage_source = serializers.SerializerMethodField(
        help_text="Where the cycle's time-based fair share reads past usage from: `prometheus` (the usage "
        "database the SchedulingShard names, while its answer is fresh) or `kaiweb` (its own accounting), "
        "with the reason and the last fetch's state, error and times.")

    class Meta:
        model = SchedulingShard
        fields = (
            "id", "cluster", "name", "partition_label_key", "partition_label_value", "gpu_placement", "cpu_placement",
            "k_value", "usage_window_seconds", "usage_half_life_seconds", "preempt_min_runtime", "reclaim_min_runtime",
            "eviction_mode", "update_pod_eviction_condition", "queue_depth_per_action", "actions", "unsupported_fields",
            "usage_db", "usage_source", "enabled", "created", "updated", "warnings",
        )
        # set by the cluster's SchedulingShard object (the mirror), never through the API
        read_only_fields = ("created", "updated", "queue_depth_per_action", "actions", "unsupported_fields", "usage_db")
        validators: list = []  # overlaps are checked by the service, with a message naming the other shard
        extra_kwargs = {"eviction_mode": {"error_messages": {"invalid_choice": EVICTION_MODE_RULE + ', not "{input}"'}}}

    def to_representation(self, instance: SchedulingShard) -> dict[str, Any]:
        data = super().to_representation(instance)
        if isinstance(data.get("usage_db"), dict) and data["usage_db"].get("connection_string"):
            data["usage_db"] = {**data["usage_db"],
                                "connection_string": redact_url(data["usage_db"]["connection_string"])}
        return data

    def get_usage_source(self, shard: SchedulingShard) -> dict[str, Any]:
        usage, reason = shard.usage_db_answer()
        reading = shard.usage_db_reading if isinstance(shard.usage_db_reading, dict) else {}
        return {"source": "prometheus" if usage is not None else "kaiweb", "reason": reason,
                "state": reading.get("state", ""), "error": reading.get("reason", ""),
                "attempted_at": reading.get("attempted_at"), "succeeded_at": reading.get("succeeded_at")}


class GpuDeviceSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuDevice
        fields = ("index", "uuid", "product", "memory_mib", "mig_profile", "healthy", "used_fraction")


class NodeSerializer(serializers.ModelSerializer):
    """A node as last observed."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpus = GpuDeviceSerializer(many=True, read_only=True)
    dra_gpus = serializers.SerializerMethodField(
        help_text="The node's DRA GPU devices as the node page counts them: `held` by a claim (each a whole GPU "
        "in use) and `free`.")

    class Meta:
        model = Node
        fields = (
            "id", "cluster", "name", "labels", "allocatable_cpu", "allocatable_memory", "allocatable_gpu",
            "allocatable_pods", "gpu_product", "gpu_memory_mib", "mig_enabled", "topology", "ready", "unschedulable",
            "observed_at", "gpus", "dra_devices", "dra_devices_total", "dra_gpus", "dra_read_at", "dra_read_cycle",
        )

    def get_dra_gpus(self, node: Node) -> dict[str, int]:
        held, free = node.dra_gpus()
        return {"held": held, "free": free}


class TopologyLevelSerializer(serializers.Serializer):
    """One level of a topology: the node label key and its alias ("" for none); a topology
    constraint's requiredTopologyLevel / preferredTopologyLevel may name it by either."""

    node_label = serializers.CharField(read_only=True)
    alias = serializers.CharField(read_only=True)


class TopologySerializer(serializers.ModelSerializer):
    """A Topology object of the cluster (``kai.scheduler/v1alpha1``) as last read."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    levels = TopologyLevelSerializer(many=True, read_only=True, source="level_rows",
                                     help_text="The levels, outermost first.")

    class Meta:
        model = Topology
        fields = ("id", "cluster", "name", "levels")


class UnreadableObjectSerializer(serializers.ModelSerializer):
    """A cluster object that could not be read (or waits for a missing queue/PodGroup), with the field and rule."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = UnreadableObject
        fields = (
            "id", "cluster", "kind", "namespace", "name", "uid", "field", "rule", "message", "deferred",
            "first_seen", "last_seen",
        )

