"""Serializers of the usage API."""

from __future__ import annotations

from rest_framework import serializers

from kaiweb.core.api.base import WarningsMixin
from kaiweb.core.choices import Resource
from kaiweb.usage.models import UsageBucket, UsageSettings


class UsageBucketSerializer(serializers.ModelSerializer):
    """Resource-seconds a queue used in one bucket (queue units × seconds)."""

    queue = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = UsageBucket
        fields = ("id", "queue", "resource", "start", "width_seconds", "value", "by_namespace", "by_user",
                  "by_gpu_model")
        extra_kwargs = {
            "by_gpu_model": {"help_text": "The value split by the GPU model of the nodes it was held on (the "
                                          "nodes' nvidia.com/gpu.product; 'unknown' without one)."},
            "by_namespace": {"help_text": "Leaf queues: the value split by the workloads' namespace."},
            "by_user": {"help_text": "Leaf queues: the value split by submitting user (the KAI_USER_LABEL label; "
                                     "'ns/<namespace>' when unlabelled)."},
        }


class UsageTotalSerializer(serializers.Serializer):
    queue = serializers.CharField()
    pool = serializers.CharField(help_text="The queue's node pool.")
    department = serializers.CharField(help_text="The department the queue is charged to: the org's, else its "
                                                 "top-level queue.")
    project = serializers.CharField(help_text="The queue's project, or '(no project)'.")
    resource = serializers.ChoiceField(choices=Resource.choices)
    value = serializers.FloatField(help_text="Resource-seconds (e.g. GPU-seconds).")
    hours = serializers.FloatField(help_text="value / 3600 (e.g. GPU-hours).")
    average = serializers.FloatField(help_text="Mean allocated amount over the window.")
    buckets = serializers.IntegerField()


class UsageSummaryQuerySerializer(serializers.Serializer):
    """The window and selection of a usage summary."""

    start = serializers.DateTimeField(required=False, help_text="Default: `end` minus 7 days.")
    end = serializers.DateTimeField(required=False, help_text="Default: now.")
    resource = serializers.ChoiceField(choices=Resource.choices, required=False)
    queue = serializers.CharField(required=False, help_text="Comma-separated queue names.")
    pool = serializers.CharField(required=False, max_length=63, help_text="Only the queues of this node pool.")
    department = serializers.CharField(required=False, max_length=253,
                                       help_text="Only the queues charged to this department.")
    project = serializers.CharField(required=False, max_length=63, help_text="Only the queues of this project.")

    def validate(self, attrs: dict) -> dict:
        if attrs.get("start") and attrs.get("end") and attrs["start"] >= attrs["end"]:
            raise serializers.ValidationError({"start": "must be before end"})
        return attrs


class UsageSettingsSerializer(WarningsMixin, serializers.ModelSerializer):
    class Meta:
        model = UsageSettings
        fields = ("raw_width_seconds", "raw_retention_days", "hourly_retention_days", "daily_retention_days", "warnings")
