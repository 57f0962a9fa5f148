"""REST routes of the accounts app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.accounts.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("me", views.MeViewSet, basename="me")
