"""FilterSets of the workloads app, shared by the API and the HTML list views."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from kaiweb.workloads.choices import WorkloadState
from kaiweb.workloads.models import Pod, Workload

GPU_KINDS = [("whole", "whole GPUs"), ("fraction", "GPU fraction"), ("memory", "GPU memory"), ("mig", "MIG"),
             ("none", "no GPU")]


class WorkloadFilterSet(django_filters.FilterSet):
    """Workloads by queue (name; `queue_tree` includes the subtree), state, namespace, class, pending reason."""

    q = django_filters.CharFilter(method="search", label="Search namespace/name")
    queue = django_filters.CharFilter(field_name="queue__name")
    queue_tree = django_filters.CharFilter(method="filter_queue_tree", label="Queue name, with its subtree")
    state = django_filters.MultipleChoiceFilter(choices=WorkloadState.choices, distinct=False)  # one column: no duplicates to remove
    priority_class = django_filters.CharFilter(field_name="priority_class__name")
    cluster = django_filters.CharFilter(field_name="cluster__name")
    pending_reason = django_filters.CharFilter(method="filter_pending_reason", label="Current why-pending code")
    gpu_kind = django_filters.ChoiceFilter(choices=GPU_KINDS, method="filter_gpu_kind", label="GPU kind")
    submitted_after = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = Workload
        fields = ("id", "namespace", "name")

    def search(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        namespace, _, rest = value.partition("/")
        if rest:
            return queryset.filter(namespace=namespace, name__icontains=rest)
        return queryset.filter(Q(name__icontains=value) | Q(namespace__icontains=value))

    def filter_queue_tree(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        from kaiweb.queues.models import Queue
        from kaiweb.queues.selectors import subtree_ids

        root = Queue.objects.filter(name=value).first()
        return queryset.filter(queue_id__in=subtree_ids(root)) if root else queryset.none()

    def filter_pending_reason(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        return queryset.filter(pending_reasons__is_current=True, pending_reasons__reason=value)

    def filter_gpu_kind(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        """The kind of GPU the workload's pods ask for (a workload may match several kinds)."""
        kinds = {
            "fraction": Q(pods__gpu_fraction__isnull=False),
            "memory": Q(pods__gpu_memory_mib__isnull=False),
            "mig": Q(pods__mig_profile__gt=""),
            "whole": Q(pods__gpu__gt=0),
        }
        if value == "none":
            any_gpu = kinds["fraction"] | kinds["memory"] | kinds["mig"] | kinds["whole"]
            return queryset.exclude(pk__in=Workload.objects.filter(any_gpu).values("pk"))
        return queryset.filter(pk__in=Workload.objects.filter(kinds[value]).values("pk"))


class PodFilterSet(django_filters.FilterSet):
    workload = django_filters.NumberFilter(field_name="workload_id")
    node = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = Pod
        fields = ("id", "name", "state")
