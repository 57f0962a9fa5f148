"""Reads of the cluster app."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet, Sum

from kaiweb.cluster.models import Cluster, GpuDevice, Node, SchedulingShard


def clusters() -> QuerySet[Cluster]:
    return Cluster.objects.annotate(node_count=Count("nodes", distinct=True)).order_by("name")


def shards() -> QuerySet[SchedulingShard]:
    return SchedulingShard.objects.select_related("cluster").order_by("cluster__name", "name")


def nodes() -> QuerySet[Node]:
    """Nodes with their cluster and GPU devices loaded."""
    return (
        Node.objects.select_related("cluster")
        .prefetch_related(Prefetch("gpus", queryset=GpuDevice.objects.order_by("index")))
        .order_by("cluster__name", "name")
    )


def nodes_of_shard(shard: SchedulingShard) -> QuerySet[Node]:
    """The nodes a shard schedules: label equal to its value, or (empty value) without the label."""
    base = nodes().filter(cluster_id=shard.cluster_id)
    return base.filter(shard.label_q())


def capacity(queryset: QuerySet[Node] | None = None) -> dict[str, float]:
    """Allocatable CPU (millicores), memory (bytes) and GPUs of ready, schedulable nodes."""
    qs = (queryset if queryset is not None else Node.objects.all()).filter(ready=True, unschedulable=False)
    totals = qs.aggregate(cpu=Sum("allocatable_cpu"), memory=Sum("allocatable_memory"), gpu=Sum("allocatable_gpu"))
    return {k: float(v or 0) for k, v in totals.items()}
