"""REST routes of the workloads app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.workloads.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("workloads", views.WorkloadViewSet, basename="workload")
    router.register("pods", views.PodViewSet, basename="pod")
