"""Serializers of the audit API."""

from __future__ import annotations

from rest_framework import serializers

from kaiweb.audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    """Who changed what, when, before and after."""

    class Meta:
        model = AuditEntry
        fields = (
            "id", "at", "actor_name", "source", "object_type", "object_id", "object_repr", "action", "before", "after",
        )
