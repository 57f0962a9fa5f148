"""Viewsets of the audit API (read-only)."""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from kaiweb.audit import selectors
from kaiweb.audit.api.serializers import AuditEntrySerializer
from kaiweb.audit.filtersets import AuditEntryFilterSet


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """Every change to queues, priority classes, clusters, shards, memberships and settings."""

    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    ordering_fields = ("at", "object_type", "action")
    ordering = ("-at", "-id")
    keyset_paging = True  # an append-only history: pages by cursor too (core.api.pagination)

    def get_queryset(self) -> Any:
        return selectors.audit_entries()
