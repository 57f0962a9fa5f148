"""FilterSets of the usage app, shared by the API and the HTML views."""

from __future__ import annotations

from typing import Any

import django_filters

from kaiweb.core.choices import Resource
from kaiweb.reports import dimensions
from kaiweb.usage.models import UsageBucket


def queues_placed(group: str, name: str) -> list[int]:
    """The queues whose usage is charged to this node pool, department or project (`dimensions`)."""
    return sorted(pk for pk, place in dimensions.places().items() if dimensions.place_of(place, group) == name)


class UsageBucketFilterSet(django_filters.FilterSet):
    """Buckets by queue name, node pool, department, project, resource, width and start window."""

    queue = django_filters.CharFilter(field_name="queue__name")
    pool = django_filters.CharFilter(method="placed", max_length=63, help_text="Queues of this node pool.")
    department = django_filters.CharFilter(method="placed", max_length=253,
                                           help_text="Queues charged to this department (the org's, else the "
                                                     "top-level queue).")
    project = django_filters.CharFilter(method="placed", max_length=63, help_text="Queues of this project.")
    resource = django_filters.ChoiceFilter(choices=Resource.choices)
    start_after = django_filters.IsoDateTimeFilter(field_name="start", lookup_expr="gte")
    start_before = django_filters.IsoDateTimeFilter(field_name="start", lookup_expr="lt")

    def placed(self, queryset: Any, name: str, value: str) -> Any:
        return queryset.filter(queue_id__in=queues_placed(name, value)) if value else queryset

    class Meta:
        model = UsageBucket
        fields = ("id", "width_seconds")
