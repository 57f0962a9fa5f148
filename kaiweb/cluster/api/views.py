"""Viewsets of the cluster API: clusters and shards (platform admins change them), nodes, topologies."""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from kaiweb.cluster import selectors, services
from kaiweb.cluster.api import serializers as s
from kaiweb.cluster.filtersets import (
    ClusterFilterSet,
    NodeFilterSet,
    SchedulingShardFilterSet,
    TopologyFilterSet,
    UnreadableObjectFilterSet,
)
from kaiweb.cluster.models import Cluster, SchedulingShard, Topology, UnreadableObject
from kaiweb.core.api.base import ByNameLookupMixin, ServiceModelViewSet, named_detail
from kaiweb.core.services import Change


@named_detail()
class ClusterViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """Clusters (platform admins change them), addressed by name or numeric id."""

    serializer_class = s.ClusterSerializer
    filterset_class = ClusterFilterSet
    ordering_fields = ("name", "created")
    ordering = ("name",)

    def get_queryset(self) -> Any:
        return selectors.clusters()

    def service_create(self, data: dict[str, Any]) -> Change[Cluster]:
        return services.save_cluster(None, data, actor=self.request.user, source=self.audit_source)

    def service_update(self, instance: Cluster, data: dict[str, Any]) -> Change[Cluster]:
        return services.save_cluster(instance, data, actor=self.request.user, source=self.audit_source)

    def service_delete(self, instance: Cluster) -> None:
        services.delete_cluster(instance, actor=self.request.user, source=self.audit_source)


@named_detail("The shard's name (with ?cluster=<name> when several clusters have one), or its numeric id.")
class SchedulingShardViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """Scheduling shards (platform admins change them), addressed by name or numeric id."""

    name_per_cluster = True
    serializer_class = s.SchedulingShardSerializer
    filterset_class = SchedulingShardFilterSet
    ordering_fields = ("name", "created")
    ordering = ("cluster__name", "name")

    def get_queryset(self) -> Any:
        return selectors.shards()

    def service_create(self, data: dict[str, Any]) -> Change[SchedulingShard]:
        return services.save_shard(None, data, actor=self.request.user, source=self.audit_source)

    def service_update(self, instance: SchedulingShard, data: dict[str, Any]) -> Change[SchedulingShard]:
        return services.save_shard(instance, data, actor=self.request.user, source=self.audit_source)

    def service_delete(self, instance: SchedulingShard) -> None:
        services.delete_shard(instance, actor=self.request.user, source=self.audit_source)


@named_detail("The node's name (with ?cluster=<name> when several clusters have one), or its numeric id.")
class NodeViewSet(ByNameLookupMixin, viewsets.ReadOnlyModelViewSet):
    """Nodes and their GPUs as last observed (written by the cluster gateway, not through the API),
    addressed by name or numeric id."""

    name_per_cluster = True

    serializer_class = s.NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ("name", "allocatable_gpu", "allocatable_cpu", "observed_at")
    ordering = ("cluster__name", "name")

    def get_queryset(self) -> Any:
        return selectors.nodes()


class TopologyViewSet(viewsets.ReadOnlyModelViewSet):
    """The clusters' Topology objects as last read: levels outermost first, each with its alias
    (written by the cluster gateway, not through the API)."""

    serializer_class = s.TopologySerializer
    filterset_class = TopologyFilterSet
    ordering_fields = ("name",)
    ordering = ("cluster__name", "name")

    def get_queryset(self) -> Any:
        return Topology.objects.select_related("cluster")


class UnreadableObjectViewSet(viewsets.ReadOnlyModelViewSet):
    """Cluster objects the scheduler skips, and why (the field and the rule); they clear once fixed."""

    serializer_class = s.UnreadableObjectSerializer
    filterset_class = UnreadableObjectFilterSet
    ordering_fields = ("kind", "namespace", "name", "last_seen")
    ordering = ("cluster__name", "kind", "namespace", "name")

    def get_queryset(self) -> Any:
        return UnreadableObject.objects.select_related("cluster")
