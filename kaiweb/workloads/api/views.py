"""Viewsets of the workloads API: workloads (read, submit to the simulated cluster, delete) and pods."""

from __future__ import annotations

from typing import Any

from django.core.cache import cache
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from kaiweb.audit.choices import AuditSource
from kaiweb.core.api.base import ServiceErrorsMixin
from kaiweb.core.changes import state_key
from kaiweb.scheduling import selectors
from kaiweb.workloads import services
from kaiweb.workloads.api import serializers as s
from kaiweb.workloads.filtersets import PodFilterSet, WorkloadFilterSet
from kaiweb.workloads.models import Pod

#: How long a cached page is kept: a new state of the data gets a new key at once; this only ages
#: out the pages of states nobody asks for any more.
LISTING_CACHE_SECONDS = 300


class WorkloadViewSet(
    ServiceErrorsMixin, mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,
):
    """PodGroups as last observed, with their current why-pending; submitting creates one with its pods;
    PATCH moves one to another leaf queue or changes its class, preemptibility or gang size."""

    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    filterset_class = WorkloadFilterSet
    ordering_fields = ("submitted_at", "name", "namespace", "state", "last_start_at")
    ordering = ("-submitted_at", "namespace", "name")

    def get_serializer_class(self) -> Any:
        if self.action == "partial_update":
            return s.WorkloadUpdateSerializer
        return s.WorkloadDetailSerializer if self.action in ("retrieve", "create") else s.WorkloadSerializer

    def get_queryset(self) -> Any:
        return selectors.workloads(with_pods=self.action == "retrieve", listing=self.action == "list")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # A page is computed once per state of the data (core.changes.state_key) and then
        # served from the cache to every caller asking for the same URL. (No docstring: the
        # schema describes the listing with the viewset's.)
        key = state_key("workloads", request.build_absolute_uri())
        if key is None:
            return super().list(request, *args, **kwargs)
        data = cache.get(key)
        if data is None:
            response = super().list(request, *args, **kwargs)
            if response.status_code == status.HTTP_200_OK:
                cache.set(key, response.data, timeout=LISTING_CACHE_SECONDS)
            return response
        return Response(data)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        pods = [dict(p) for p in data.pop("pods", [])]
        change = services.create_workload(data, pods, actor=request.user, source=AuditSource.API)
        obj = selectors.workloads(with_pods=True).get(pk=change.obj.pk)
        return Response(s.WorkloadDetailSerializer(obj).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        serializer = s.WorkloadUpdateSerializer(instance, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        change = services.update_workload(instance, dict(serializer.validated_data), actor=request.user,
                                          source=AuditSource.API)
        obj = selectors.workloads().get(pk=change.obj.pk)
        return Response(s.WorkloadSerializer(obj).data)

    def perform_destroy(self, instance: Any) -> None:
        services.delete_workload(instance, actor=self.request.user, source=AuditSource.API)

    @extend_schema(responses=s.PendingReasonSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], url_path="pending-history", filterset_class=None)
    def pending_history(self, request: Request, pk: str | None = None) -> Response:
        """Every why-pending recorded for this workload, newest first."""
        page = self.paginate_queryset(selectors.pending_history(self.get_object()))
        return self.get_paginated_response(s.PendingReasonSerializer(page, many=True).data)


class PodViewSet(viewsets.ReadOnlyModelViewSet):
    """Pods as last observed."""

    serializer_class = s.PodSerializer
    filterset_class = PodFilterSet
    ordering_fields = ("name", "state")
    ordering = ("workload", "name")

    def get_queryset(self) -> Any:
        return Pod.objects.select_related("node")
