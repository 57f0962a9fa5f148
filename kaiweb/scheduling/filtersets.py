"""FilterSets of the scheduling app, shared by the API and the HTML list views."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from django_filters.fields import MultipleChoiceField

from kaiweb.scheduling.choices import CycleStatus, DecisionKind, PreemptionAction
from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, QueueStatus, SchedulingCycle
from scheduler_core import model as m

#: Action names as the database spelled them before it took the engine's (migration 0008): `?action=`
#: still reads them, as the engine's names, so saved links and scripts keep working. Nothing else does.
FORMER_ACTION_NAMES = {"consolidate": m.CONSOLIDATION, "stale-gang": m.STALE_GANG_EVICTION}


class SchedulingCycleFilterSet(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=CycleStatus.choices, distinct=False)
    shard = django_filters.CharFilter(field_name="shard__name")
    started_after = django_filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="gte")
    started_before = django_filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="lt")
    with_evictions = django_filters.BooleanFilter(method="filter_evictions")

    class Meta:
        model = SchedulingCycle
        fields = ("id", "trigger")

    def filter_evictions(self, queryset: QuerySet[SchedulingCycle], name: str, value: bool | None) -> QuerySet:
        if value is None:
            return queryset
        return queryset.filter(evictions__gt=0) if value else queryset.filter(evictions=0)


class DecisionFilterSet(django_filters.FilterSet):
    kind = django_filters.MultipleChoiceFilter(choices=DecisionKind.choices, distinct=False)
    workload = django_filters.NumberFilter(field_name="workload_id")
    node = django_filters.CharFilter(field_name="node_name")

    class Meta:
        model = Decision
        fields = ("id", "cycle", "reason", "status")


class _ActionField(MultipleChoiceField):
    def to_python(self, value: Any) -> list[str]:
        return [FORMER_ACTION_NAMES.get(v, v) for v in super().to_python(value)]


class ActionFilter(django_filters.MultipleChoiceFilter):
    """The evicting actions by the engine's names (``model.EVICTING_ACTIONS``); the former names are
    read as them here, the one place that still knows them."""

    field_class = _ActionField


class PreemptionEventFilterSet(django_filters.FilterSet):
    """Preemptions by action, queue (either side), workload (either side), time."""

    action = ActionFilter(choices=PreemptionAction.choices, distinct=False,
                          help_text="The engine's action names; the former consolidate and stale-gang are read as "
                                    "consolidation and stalegangeviction.")
    queue = django_filters.CharFilter(method="filter_queue", label="Queue name (preemptor or victim side)")
    victim_queue = django_filters.CharFilter(field_name="victim_queue__name")
    preemptor_queue = django_filters.CharFilter(field_name="preemptor_queue__name")
    workload = django_filters.NumberFilter(method="filter_workload", label="Workload id (either side)")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = PreemptionEvent
        fields = ("id", "cycle", "reason")

    def filter_queue(self, queryset: QuerySet[PreemptionEvent], name: str, value: str) -> QuerySet:
        return queryset.filter(Q(victim_queue__name=value) | Q(preemptor_queue__name=value))

    def filter_workload(self, queryset: QuerySet[PreemptionEvent], name: str, value: int) -> QuerySet:
        return queryset.filter(Q(victim_id=value) | Q(preemptor_id=value))


class PendingReasonFilterSet(django_filters.FilterSet):
    queue = django_filters.CharFilter(field_name="workload__queue__name")

    class Meta:
        model = PendingReason
        fields = ("id", "workload", "cycle", "reason", "is_current")


class QueueStatusFilterSet(django_filters.FilterSet):
    """Recorded queue figures by queue name, cycle and time."""

    queue = django_filters.CharFilter(field_name="queue__name")
    since = django_filters.IsoDateTimeFilter(field_name="recorded_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="recorded_at", lookup_expr="lt")

    class Meta:
        model = QueueStatus
        fields = ("id", "cycle")
