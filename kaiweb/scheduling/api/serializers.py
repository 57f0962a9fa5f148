"""Serializers of the scheduling API (history: read-only)."""

from __future__ import annotations

from rest_framework import serializers

from kaiweb.scheduling.models import Decision, PreemptionEvent, SchedulingCycle


class SchedulingCycleSerializer(serializers.ModelSerializer):
    """A scheduling cycle: timings per phase, counts, outcome."""

    shard = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = SchedulingCycle
        fields = (
            "id", "shard", "trigger", "started_at", "finished_at", "status", "phase_durations", "duration_seconds",
            "jobs_considered", "binds", "pipelined", "evictions", "pending", "write_back", "error",
        )


class DecisionSerializer(serializers.ModelSerializer):
    """A bind, pipeline or eviction with the engine's reason code and numbers."""

    gpu_groups = serializers.ListField(child=serializers.CharField(), read_only=True,
                                       help_text="A shared-GPU bind's device groups, one per device.")

    class Meta:
        model = Decision
        fields = (
            "id", "cycle", "kind", "status", "workload", "workload_ref", "pod_name", "node_name", "gpu_groups", "reason",
            "message", "numbers", "idempotency_key", "applied_at",
        )


class PreemptionEventSerializer(serializers.ModelSerializer):
    """Who was evicted for whom, by which action, why, and both queues' figures."""

    preemptor_queue = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    victim_queue = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = PreemptionEvent
        fields = (
            "id", "cycle", "at", "action", "preemptor", "preemptor_ref", "victim", "victim_ref", "preemptor_queue",
            "victim_queue", "reason", "message", "preemptor_queue_figures", "victim_queue_figures",
        )
