"""REST routes of the accounts app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
