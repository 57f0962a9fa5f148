"""Serializers of the workloads API."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kaiweb.cluster.models import Cluster
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.scheduling.models import PendingReason
from kaiweb.workloads.models import Pod, Workload


class PendingReasonSerializer(serializers.ModelSerializer):
    """Why a workload stays pending: since `recorded_at`, given by `cycle` (written again only when the
    reason or its words change); `is_current` marks the one that holds now, the others are its history."""

    class Meta:
        model = PendingReason
        fields = ("id", "workload", "cycle", "recorded_at", "reason", "message", "details", "is_current")


class PodSerializer(serializers.ModelSerializer):
    """A pod: requests (GPU whole / fraction / memory, CPU millicores, memory bytes), state, node."""

    node = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    gpu_groups = serializers.ListField(child=serializers.CharField(), read_only=True,
                                       help_text="The shared-GPU groups of a fractional pod, one per device.")

    class Meta:
        model = Pod
        fields = (
            "id", "name", "subgroup", "gpu", "gpu_fraction", "gpu_memory_mib", "gpu_devices", "mig_profile", "cpu",
            "memory", "task_priority", "state", "node", "gpu_groups", "duration_seconds", "started_at", "finished_at",
        )
        read_only_fields = ("state", "node", "gpu_groups", "started_at", "finished_at")


class WorkloadSerializer(serializers.ModelSerializer):
    """A PodGroup with its queue, priority class, gang size, state and current why-pending."""

    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all(), required=False)
    queue = serializers.SlugRelatedField(slug_field="name", queryset=Queue.objects.all())
    priority_class = serializers.SlugRelatedField(
        slug_field="name", queryset=PriorityClass.objects.all(), required=False, allow_null=True
    )
    pod_count = serializers.IntegerField(read_only=True, default=0)
    pending_reason = serializers.SerializerMethodField(help_text="The current why-pending, if any.")

    class Meta:
        model = Workload
        fields = (
            "id", "cluster", "namespace", "name", "queue", "priority_class", "preemptibility", "min_member",
            "min_subgroup", "subgroups", "topology_constraint", "labels", "state", "submitted_at", "last_start_at",
            "last_eviction_at", "finished_at", "pod_count", "pending_reason",
        )
        read_only_fields = ("state", "submitted_at", "last_start_at", "last_eviction_at", "finished_at")
        validators: list[Any] = []  # uniqueness is checked by the service

    @extend_schema_field(PendingReasonSerializer(allow_null=True))
    def get_pending_reason(self, obj: Workload) -> dict[str, Any] | None:
        current = getattr(obj, "current_pending", None)
        if current is None:
            current = list(obj.pending_reasons.filter(is_current=True)[:1])
        if not current:
            return None
        # One nested serializer for the whole page: building its fields per row dominated list time.
        nested = getattr(self, "_pending_serializer", None)
        if nested is None:
            nested = self._pending_serializer = PendingReasonSerializer()
        return nested.to_representation(current[0])


class WorkloadDetailSerializer(WorkloadSerializer):
    """A workload with its pods (also the shape used to submit one with its pods)."""

    pods = PodSerializer(many=True, required=False)

    class Meta(WorkloadSerializer.Meta):
        fields = (*WorkloadSerializer.Meta.fields, "pods")


class WorkloadUpdateSerializer(serializers.ModelSerializer):
    """What may change on a workload: its (leaf) queue, class, preemptibility, gang size, labels."""

    queue = serializers.SlugRelatedField(slug_field="name", queryset=Queue.objects.all(), required=False)
    priority_class = serializers.SlugRelatedField(
        slug_field="name", queryset=PriorityClass.objects.all(), required=False, allow_null=True
    )

    class Meta:
        model = Workload
        fields = ("queue", "priority_class", "preemptibility", "min_member", "min_subgroup", "labels")
