"""Serializers of the workloads API."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kaiweb.cluster.models import Cluster
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.scheduling.models import PendingReason
from kaiweb.scheduling.selectors import places_and_estimates
from kaiweb.workloads.choices import WorkloadState
from kaiweb.workloads.models import Pod, Workload
from scheduler_core.eta import ESTIMATE_CODES


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


class PlaceSerializer(serializers.Serializer):
    """A pending workload's place in the order its shard's latest cycle tried the pending jobs
    (jobs started by that cycle not counted), in the shard and in its queue, from 1."""

    in_shard = serializers.IntegerField(min_value=1)
    in_queue = serializers.IntegerField(min_value=1)
    cycle = serializers.IntegerField(source="cycle_id", allow_null=True)
    recorded_at = serializers.DateTimeField(allow_null=True)


class StartEstimateSerializer(serializers.Serializer):
    """When a pending workload may start, from the latest start-time estimates of its shard (the scheduler run
    forward with run times drawn from the recorded history; arrivals are not guessed, so the estimate can only
    move later when new work outranks the workload). Waits are counted from `estimated_at`; null: not within
    the estimates' horizon."""

    p50_wait_seconds = serializers.FloatField(allow_null=True, min_value=0)
    p80_wait_seconds = serializers.FloatField(allow_null=True, min_value=0)
    p50_at = serializers.DateTimeField(allow_null=True)
    p80_at = serializers.DateTimeField(allow_null=True)
    code = serializers.ChoiceField(choices=ESTIMATE_CODES,
                                   help_text="starts-now: room is free; waits: room frees within the horizon; "
                                             "beyond-horizon: not within it with the jobs known now; "
                                             "beyond-bound: further back in line than the estimate runs forward "
                                             "(no p50/p80; the reason says when the jobs ahead have taken the room).")
    reason = serializers.CharField(help_text="Why it waits, in plain words.")
    samples = serializers.IntegerField(min_value=0)
    estimated_at = serializers.DateTimeField(allow_null=True)


class WorkloadSerializer(serializers.ModelSerializer):
    """A PodGroup with its queue, priority class, gang size, state and current why-pending."""

    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all(), required=False)
    queue = serializers.SlugRelatedField(slug_field="name", queryset=Queue.objects.all())
    priority_class = serializers.SlugRelatedField(
        slug_field="name", queryset=PriorityClass.objects.all(), required=False, allow_null=True
    )
    pod_count = serializers.IntegerField(read_only=True, default=0)
    pending_reason = serializers.SerializerMethodField(help_text="The current why-pending, if any.")
    start_estimate = serializers.SerializerMethodField(
        help_text="When a pending workload may start (p50, p80) and why it waits; null when it is not pending or "
                  "no estimate covers it yet. Arrivals are not guessed: it can only move later when new work "
                  "outranks it.")
    place = serializers.SerializerMethodField(
        help_text="Where a pending workload stands in the order the scheduler tries the pending jobs; null when "
                  "it is not pending or the latest cycle did not try it.")

    class Meta:
        model = Workload
        fields = (
            "id", "cluster", "namespace", "name", "queue", "priority_class", "preemptibility", "min_member",
            "min_subgroup", "subgroups", "topology_constraint", "labels", "state", "submitted_at", "last_start_at",
            "last_eviction_at", "finished_at", "pod_count", "pending_reason", "place", "start_estimate",
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


    def _waiting(self, obj: Workload) -> tuple[Any, Any]:
        """The workload's place in line and start estimate. When listed, those of the whole page are
        read in one query the first time a row asks (the rows share this serializer)."""
        asked: set[int] = getattr(self, "_waiting_asked", set())
        if obj.pk not in asked:
            rows = getattr(self.parent, "instance", None) if self.parent is not None else None
            asked = self._waiting_asked = ({w.pk for w in rows} if isinstance(rows, list) else set()) | {obj.pk}
            self._places, self._estimates = places_and_estimates(asked)
        return self._places.get(obj.pk), self._estimates.get(obj.pk)

    @extend_schema_field(PlaceSerializer(allow_null=True))
    def get_place(self, obj: Workload) -> dict[str, Any] | None:
        if obj.state not in (WorkloadState.PENDING, WorkloadState.PARTIAL):
            return None
        got = self._waiting(obj)[0]
        return None if got is None else dict(PlaceSerializer(got).data)

    @extend_schema_field(StartEstimateSerializer(allow_null=True))
    def get_start_estimate(self, obj: Workload) -> dict[str, Any] | None:
        if obj.state not in (WorkloadState.PENDING, WorkloadState.PARTIAL):
            return None
        got = self._waiting(obj)[1]
        return None if got is None else dict(StartEstimateSerializer(got).data)


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
