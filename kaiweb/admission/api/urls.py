"""REST routes of the admission app, registered on the shared /api/v1/ router."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from kaiweb.admission.api import views


def register(router: DefaultRouter) -> None:
    """Add this app's viewsets to the v1 router."""
    router.register("namespace-bindings", views.NamespaceQueueBindingViewSet, basename="namespacebinding")
