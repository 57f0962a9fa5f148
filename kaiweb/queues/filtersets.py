"""FilterSets of the queues app, shared by the API and the HTML list views."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from kaiweb.queues.models import PriorityClass, Queue, QueueMembership


class QueueFilterSet(django_filters.FilterSet):
    """Queues by name, parent, priority, being a leaf or a root."""

    q = django_filters.CharFilter(method="search", label="Search name or display name")
    parent = django_filters.CharFilter(field_name="parent__name", label="Parent queue name")
    parent_id = django_filters.ModelMultipleChoiceFilter(queryset=Queue.objects.all(), field_name="parent")
    is_root = django_filters.BooleanFilter(field_name="parent", lookup_expr="isnull", label="Top-level queues")
    is_leaf = django_filters.BooleanFilter(method="filter_leaf", label="Leaf queues (no children)")
    priority_min = django_filters.NumberFilter(field_name="priority", lookup_expr="gte")
    priority_max = django_filters.NumberFilter(field_name="priority", lookup_expr="lte")

    class Meta:
        model = Queue
        fields = ("id", "name", "priority")

    def search(self, queryset: QuerySet[Queue], name: str, value: str) -> QuerySet[Queue]:
        return queryset.filter(Q(name__icontains=value) | Q(display_name__icontains=value))

    def filter_leaf(self, queryset: QuerySet[Queue], name: str, value: bool | None) -> QuerySet[Queue]:
        if value is None:
            return queryset
        return queryset.filter(children__isnull=value).distinct()


class PriorityClassFilterSet(django_filters.FilterSet):
    """Priority classes by name, value range, preemptibility."""

    value_min = django_filters.NumberFilter(field_name="value", lookup_expr="gte")
    value_max = django_filters.NumberFilter(field_name="value", lookup_expr="lte")

    class Meta:
        model = PriorityClass
        fields = ("id", "name", "value", "preemptible", "global_default")


class QueueMembershipFilterSet(django_filters.FilterSet):
    """Memberships by queue name, username, role."""

    queue = django_filters.CharFilter(field_name="queue__name")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = QueueMembership
        fields = ("id", "role")
