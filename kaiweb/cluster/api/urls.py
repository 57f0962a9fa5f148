"""REST routes of the cluster app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.cluster.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("clusters", views.ClusterViewSet, basename="cluster")
    router.register("shards", views.SchedulingShardViewSet, basename="shard")
    router.register("nodes", views.NodeViewSet, basename="node")
    router.register("topologies", views.TopologyViewSet, basename="topology")
    router.register("unreadable-objects", views.UnreadableObjectViewSet, basename="unreadable-object")
