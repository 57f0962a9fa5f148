"""FilterSets of the cluster app, shared by the API and the HTML list views."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from kaiweb.cluster.models import Cluster, Node, SchedulingShard, Topology, UnreadableObject


class ClusterFilterSet(django_filters.FilterSet):
    class Meta:
        model = Cluster
        fields = ("id", "name", "backend", "enabled")


class SchedulingShardFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = SchedulingShard
        fields = ("id", "name", "partition_label_value", "gpu_placement", "enabled")


class NodeFilterSet(django_filters.FilterSet):
    """Nodes by cluster, name, GPU product, readiness, and one label (`label=key=value`)."""

    cluster = django_filters.CharFilter(field_name="cluster__name")
    name_contains = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    gpu_product = django_filters.CharFilter(field_name="gpu_product", lookup_expr="icontains")
    has_gpus = django_filters.BooleanFilter(method="filter_has_gpus")
    label = django_filters.CharFilter(method="filter_label", label="key=value")

    class Meta:
        model = Node
        fields = ("id", "name", "ready", "unschedulable", "mig_enabled")

    def filter_has_gpus(self, queryset: QuerySet[Node], name: str, value: bool | None) -> QuerySet[Node]:
        if value is None:
            return queryset
        return queryset.filter(allocatable_gpu__gt=0) if value else queryset.filter(allocatable_gpu=0)

    def filter_label(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        key, sep, wanted = value.partition("=")
        if not key:
            return queryset
        # JSON key lookups cannot contain "__"; match in Python on the (small) candidate set instead.
        matching = [
            pk for pk, labels in queryset.values_list("pk", "labels")
            if (labels or {}).get(key) == wanted or (not sep and key in (labels or {}))
        ]
        return queryset.filter(pk__in=matching)


class UnreadableObjectFilterSet(django_filters.FilterSet):
    """Cluster objects kaiweb could not read or cannot schedule, by cluster, kind, namespace and state."""

    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = UnreadableObject
        fields = ("id", "kind", "namespace", "name", "deferred")


class TopologyFilterSet(django_filters.FilterSet):
    """Topology objects by cluster and name."""

    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Topology
        fields = ("id", "name")
