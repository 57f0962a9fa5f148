"""Serializers of the admission API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.queues.models import Queue


class NamespaceQueueBindingSerializer(serializers.ModelSerializer):
    """A queue a namespace may use; a namespace without bindings may use every queue."""

    queue = serializers.SlugRelatedField(slug_field="name", queryset=Queue.objects.all())

    class Meta:
        model = NamespaceQueueBinding
        fields = ("id", "namespace", "queue", "created")
        read_only_fields = ("created",)
        validators: list[Any] = []  # the service answers a repeated binding with a 409
