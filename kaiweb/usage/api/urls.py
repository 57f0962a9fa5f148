"""REST routes of the usage app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.usage.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("usage", views.UsageViewSet, basename="usage")
    router.register("usage-settings", views.UsageSettingsViewSet, basename="usagesettings")
