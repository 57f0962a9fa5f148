"""Serializers of the queues API (flat fields, parent by name; CRD shape via import/export)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kaiweb.core.api.base import WarningsMixin
from kaiweb.core.choices import RESOURCES
from kaiweb.queues.models import PriorityClass, Queue, QueueMembership, k8s_name_validator
from kaiweb.scheduling.models import QueueStatus

RESOURCE_FIELDS = tuple(f"{r}_{p}" for r in RESOURCES for p in ("quota", "limit", "over_quota_weight"))


class QueueBriefSerializer(serializers.ModelSerializer):
    """A queue reference for nesting."""

    class Meta:
        model = Queue
        fields = ("id", "name", "display_name")


class QueueSerializer(WarningsMixin, serializers.ModelSerializer):
    """A queue: tree position, priority, per-resource quota / limit / over-quota weight (-1 = unlimited)."""

    parent = serializers.CharField(
        allow_null=True, required=False, allow_blank=True, max_length=253,
        help_text="Name of the parent queue; null or empty for a top-level queue.",
    )
    children = serializers.SerializerMethodField(help_text="Names of the child queues.")
    workload_count = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = Queue
        fields = (
            "id", "name", "display_name", "parent", "children", "priority", *RESOURCE_FIELDS,
            "preempt_min_runtime", "reclaim_min_runtime", "labels", "workload_count", "created", "updated",
            "warnings",
        )
        read_only_fields = ("created", "updated")
        # Uniqueness is checked by the service, with a message that names the rule.
        extra_kwargs = {"name": {"validators": [k8s_name_validator]}}

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_children(self, obj: Queue) -> list[str]:
        return [c.name for c in obj.children.all()]

    def to_representation(self, instance: Queue) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["parent"] = instance.parent.name if instance.parent_id else None
        return data

    def validate_parent(self, value: str | None) -> str | None:
        return value or None


class ResourceFiguresSerializer(serializers.Serializer):
    """One resource of a queue: its settings and the latest recorded figures (queue units)."""

    quota = serializers.FloatField()
    limit = serializers.FloatField()
    over_quota_weight = serializers.FloatField()
    allocated = serializers.FloatField()
    fair_share = serializers.FloatField()
    pending = serializers.FloatField()


class ResourcesFiguresSerializer(serializers.Serializer):
    cpu = ResourceFiguresSerializer(help_text="Millicores.")
    memory = ResourceFiguresSerializer(help_text="MB.")
    gpu = ResourceFiguresSerializer(help_text="Devices.")


class QueueTreeNodeSerializer(serializers.Serializer):
    """A queue of the tree with allocated / fair share / pending per resource and its children (same shape)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    display_name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    priority = serializers.IntegerField()
    resources = ResourcesFiguresSerializer()
    pending_workloads = serializers.IntegerField()
    running_workloads = serializers.IntegerField()
    status_recorded_at = serializers.DateTimeField(allow_null=True)
    children = serializers.ListField(child=serializers.DictField(), help_text="Child queues, each of this same shape.")


class QueueListingRowSerializer(serializers.Serializer):
    """One line of `kubectl get queues`."""

    name = serializers.CharField()
    priority = serializers.CharField()
    parent = serializers.CharField(allow_blank=True)
    children = serializers.CharField(allow_blank=True, help_text="Comma-separated child names.")


class ImportRequestSerializer(serializers.Serializer):
    """A Queue CRD YAML file (also accepted as the raw request body with a YAML content type)."""

    yaml = serializers.CharField(help_text="One or many scheduling.run.ai/v2 Queue documents.")


class ImportResultSerializer(serializers.Serializer):
    created = serializers.ListField(child=serializers.CharField())
    updated = serializers.ListField(child=serializers.CharField())
    unchanged = serializers.ListField(child=serializers.CharField())
    warnings = serializers.ListField(child=serializers.CharField())
    dry_run = serializers.BooleanField()


class ImportProblemSerializer(serializers.Serializer):
    document = serializers.IntegerField(help_text="1-based document number; 0 for the whole file.")
    name = serializers.CharField(allow_blank=True)
    field = serializers.CharField(allow_blank=True, help_text="The CRD field, e.g. spec.resources.gpu.limit.")
    message = serializers.CharField()


class ImportErrorSerializer(serializers.Serializer):
    errors = ImportProblemSerializer(many=True)


class PriorityClassSerializer(WarningsMixin, serializers.ModelSerializer):
    """A workload priority class."""

    preemptible = serializers.BooleanField(
        required=False, help_text="Defaults to KAI's rule: preemptible when the value is below 100."
    )

    class Meta:
        model = PriorityClass
        fields = ("id", "name", "value", "preemptible", "global_default", "description", "created", "updated", "warnings")
        read_only_fields = ("created", "updated")
        extra_kwargs = {"name": {"validators": [k8s_name_validator]}}


class QueueStatusSerializer(serializers.ModelSerializer):
    """A queue's figures recorded by one cycle (queue units)."""

    queue = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = QueueStatus
        fields = (
            "id", "queue", "cycle", "recorded_at", "allocated", "allocated_non_preemptible", "requested",
            "fair_share", "pending", "pending_workloads", "running_workloads",
        )


class QueueMembershipSerializer(serializers.ModelSerializer):
    """A user's role on a queue and its subtree."""

    user = serializers.SlugRelatedField(slug_field="username", queryset=get_user_model().objects.all())
    queue = serializers.SlugRelatedField(slug_field="name", queryset=Queue.objects.all())

    class Meta:
        model = QueueMembership
        fields = ("id", "user", "queue", "role")
        validators: list[Any] = []  # the service replaces an existing membership instead of failing
