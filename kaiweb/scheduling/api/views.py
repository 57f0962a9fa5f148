"""Viewsets of the scheduling API: cycles, decisions, preemption events, why-pending records (read-only)."""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from kaiweb.scheduling import selectors
from kaiweb.scheduling.api import serializers as s
from kaiweb.scheduling.filtersets import (
    DecisionFilterSet,
    PendingReasonFilterSet,
    PreemptionEventFilterSet,
    SchedulingCycleFilterSet,
)
from kaiweb.workloads.api.serializers import PendingReasonSerializer


class SchedulingCycleViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.SchedulingCycleSerializer
    filterset_class = SchedulingCycleFilterSet
    ordering_fields = ("started_at", "duration_seconds", "binds", "evictions", "pending")
    ordering = ("-started_at", "-id")
    keyset_paging = True  # an append-only history: pages by cursor too (core.api.pagination)

    def get_queryset(self) -> Any:
        return selectors.cycles()


class DecisionViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.DecisionSerializer
    filterset_class = DecisionFilterSet
    ordering_fields = ("id", "kind", "reason")
    ordering = ("-id",)
    keyset_paging = True  # an append-only history: pages by cursor too (core.api.pagination)

    def get_queryset(self) -> Any:
        return selectors.decisions()


class PreemptionEventViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.PreemptionEventSerializer
    filterset_class = PreemptionEventFilterSet
    ordering_fields = ("at", "action", "reason")
    ordering = ("-at", "-id")
    keyset_paging = True  # an append-only history: pages by cursor too (core.api.pagination)

    def get_queryset(self) -> Any:
        return selectors.preemptions()


class PendingReasonViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = PendingReasonSerializer
    filterset_class = PendingReasonFilterSet
    ordering_fields = ("recorded_at", "reason")
    ordering = ("-recorded_at", "-id")
    keyset_paging = True  # an append-only history: pages by cursor too (core.api.pagination)

    def get_queryset(self) -> Any:
        return selectors.pending_reasons()
