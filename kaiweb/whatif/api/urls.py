"""REST routes of the what-if app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.whatif.api.views import WhatIfViewSet


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("what-if", WhatIfViewSet, basename="whatif")
