"""FilterSets of the audit app, shared by the API and the HTML views."""

from __future__ import annotations

import django_filters

from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.audit.models import AuditEntry


class AuditEntryFilterSet(django_filters.FilterSet):
    """Audit entries by actor, object, action, source and time."""

    actor = django_filters.CharFilter(field_name="actor_name")
    action = django_filters.MultipleChoiceFilter(choices=AuditAction.choices, distinct=False)
    source = django_filters.MultipleChoiceFilter(choices=AuditSource.choices, distinct=False)
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")
    object_repr = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = AuditEntry
        fields = ("id", "object_type", "object_id")
