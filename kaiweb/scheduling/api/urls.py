"""REST routes of the scheduling app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.scheduling.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("cycles", views.SchedulingCycleViewSet, basename="cycle")
    router.register("decisions", views.DecisionViewSet, basename="decision")
    router.register("preemptions", views.PreemptionEventViewSet, basename="preemption")
    router.register("pending-reasons", views.PendingReasonViewSet, basename="pendingreason")
