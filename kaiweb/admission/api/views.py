"""REST views of the admission app: namespace→queue bindings (platform admins write)."""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from kaiweb.admission import selectors, services
from kaiweb.admission.api import serializers as s
from kaiweb.admission.filtersets import NamespaceQueueBindingFilterSet
from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.audit.choices import AuditSource
from kaiweb.core.api.base import ServiceErrorsMixin


class NamespaceQueueBindingViewSet(ServiceErrorsMixin, viewsets.ModelViewSet):
    """Which queues each namespace's pods and PodGroups may use (the validating webhook's rule)."""

    serializer_class = s.NamespaceQueueBindingSerializer
    filterset_class = NamespaceQueueBindingFilterSet
    ordering_fields = ("id", "namespace")
    ordering = ("namespace", "queue__name")
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return selectors.bindings()

    def perform_create(self, serializer: Any) -> None:
        data = serializer.validated_data
        serializer.instance = services.bind(data["namespace"], data["queue"], actor=self.request.user,
                                            source=AuditSource.API)

    def perform_destroy(self, instance: NamespaceQueueBinding) -> None:
        services.unbind(instance, actor=self.request.user, source=AuditSource.API)
