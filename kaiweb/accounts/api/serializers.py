"""Serializers of the accounts API."""

from __future__ import annotations

from rest_framework import serializers


class MeSerializer(serializers.Serializer):
    """The signed-in user and their roles."""

    username = serializers.CharField()
    is_platform_admin = serializers.BooleanField()
    administered_queues = serializers.ListField(
        child=serializers.CharField(), help_text="Queues the user may change (subtrees included), by name."
    )


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`.")
