"""Viewsets of the usage API: buckets, totals per queue/window/resource, retention settings."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from kaiweb.core.api.base import ServiceErrorsMixin
from kaiweb.reports import dimensions
from kaiweb.usage import selectors, services
from kaiweb.usage.api import serializers as s
from kaiweb.usage.filtersets import UsageBucketFilterSet
from kaiweb.usage.models import UsageSettings


class UsageViewSet(viewsets.ReadOnlyModelViewSet):
    """Usage buckets per queue and resource; `summary` totals them over a window."""

    serializer_class = s.UsageBucketSerializer
    filterset_class = UsageBucketFilterSet
    ordering_fields = ("start", "value")
    ordering = ("-start", "queue__name", "resource")

    def get_queryset(self) -> Any:
        return selectors.buckets()

    @extend_schema(parameters=[s.UsageSummaryQuerySerializer], responses=s.UsageTotalSerializer(many=True), filters=False)
    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None)
    def summary(self, request: Request) -> Response:
        """Resource-seconds, hours and mean allocation per queue and resource over [start, end), each queue with
        its node pool, department and project (`pool`, `department`, `project` filter by them)."""
        query = s.UsageSummaryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        end = query.validated_data.get("end") or timezone.now()
        start = query.validated_data.get("start") or end - dt.timedelta(days=7)
        if start >= end:
            return Response({"start": ["must be before end"]}, status=400)
        names = [n for n in (query.validated_data.get("queue") or "").split(",") if n]
        places = dimensions.places()
        ids: set[int] | None = None
        for group in dimensions.PLACE_GROUPS:
            wanted = query.validated_data.get(group)
            if wanted:
                placed = {pk for pk, p in places.items() if dimensions.place_of(p, group) == wanted}
                ids = placed if ids is None else ids & placed
        rows = selectors.usage_totals(start, end, resource=query.validated_data.get("resource"),
                                      queue_names=names or None, queue_ids=None if ids is None else sorted(ids))
        unknown = dimensions.QueuePlace("", "", "")  # a queue made after the places were read
        for row in rows:
            place = places.get(int(str(row["queue_id"]))) or unknown
            row.update(pool=place.pool, department=place.department, project=place.project)
        return Response(s.UsageTotalSerializer(rows, many=True).data)


class UsageSettingsViewSet(ServiceErrorsMixin, viewsets.GenericViewSet):
    """How usage is bucketed and kept (one object; platform admins change it)."""

    serializer_class = s.UsageSettingsSerializer
    pagination_class = None
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        return UsageSettings.objects.all()

    @extend_schema(methods=["GET"], responses=s.UsageSettingsSerializer)
    @extend_schema(methods=["PATCH"], request=s.UsageSettingsSerializer, responses=s.UsageSettingsSerializer)
    @action(detail=False, methods=["get", "patch"], url_path="current")
    def current(self, request: Request) -> Response:
        """The current settings; PATCH changes them (platform admins)."""
        if request.method == "GET":
            return Response(self.get_serializer(UsageSettings.load()).data)
        serializer = self.get_serializer(UsageSettings.load(), data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        change = services.update_settings(dict(serializer.validated_data), actor=request.user, source="api")
        change.obj._change_warnings = change.warnings
        return Response(self.get_serializer(change.obj).data)
