"""REST routes of the queues app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.queues.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("queues", views.QueueViewSet, basename="queue")
    router.register("priority-classes", views.PriorityClassViewSet, basename="priorityclass")
    router.register("queue-statuses", views.QueueStatusViewSet, basename="queuestatus")
    router.register("queue-memberships", views.QueueMembershipViewSet, basename="queuemembership")
