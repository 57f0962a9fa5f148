"""REST routes of the org app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.org.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("node-pools", views.NodePoolViewSet, basename="nodepool")
    router.register("departments", views.DepartmentViewSet, basename="department")
    router.register("projects", views.ProjectViewSet, basename="project")
