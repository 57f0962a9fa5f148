"""FilterSets of the usage app, shared by the API and the HTML views."""

from __future__ import annotations

import django_filters

from kaiweb.core.choices import Resource
from kaiweb.usage.models import UsageBucket


class UsageBucketFilterSet(django_filters.FilterSet):
    """Buckets by queue name, resource, width and start window."""

    queue = django_filters.CharFilter(field_name="queue__name")
    resource = django_filters.ChoiceFilter(choices=Resource.choices)
    start_after = django_filters.IsoDateTimeFilter(field_name="start", lookup_expr="gte")
    start_before = django_filters.IsoDateTimeFilter(field_name="start", lookup_expr="lt")

    class Meta:
        model = UsageBucket
        fields = ("id", "width_seconds")
