"""Viewsets of the queues API: queues (CRUD, tree, listing, CRD import/export), priority classes,
queue statuses and memberships. Writes go through `kaiweb.queues.services`."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from kaiweb.accounts import roles
from kaiweb.core.api.base import ByNameLookupMixin, ServiceErrorsMixin, ServiceModelViewSet, named_detail
from kaiweb.core.api.renderers import (
    PlainTextParser,
    PlainTextRenderer,
    TextYAMLParser,
    XYAMLTextParser,
    YAMLRenderer,
    YAMLTextParser,
)
from kaiweb.core.services import Change
from kaiweb.queues import selectors, services, yaml_io
from kaiweb.queues.api import serializers as s
from kaiweb.queues.filtersets import PriorityClassFilterSet, QueueFilterSet, QueueMembershipFilterSet
from kaiweb.queues.models import PriorityClass, Queue, QueueMembership
from kaiweb.scheduling import selectors as scheduling_selectors
from kaiweb.scheduling.filtersets import QueueStatusFilterSet
from kaiweb.scheduling.models import QueueStatus

DRY_RUN = OpenApiParameter("dry_run", OpenApiTypes.BOOL, description="Check and report, change nothing.")


@named_detail("The queue's name (as in the UI and the Queue CRD), or its numeric id.")
class QueueViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """The queue tree. Queue admins may change the queues of their subtrees; platform admins everything.
    A queue is addressed by its name or its numeric id: `/api/v1/queues/team-a/`."""

    serializer_class = s.QueueSerializer
    filterset_class = QueueFilterSet
    ordering_fields = ("name", "priority", "created", "updated", *s.RESOURCE_FIELDS)
    ordering = ("name",)
    queue_scoped = True

    def get_queryset(self) -> Any:
        return selectors.queues()

    def _require_parent_access(self, parent_value: Any) -> None:
        parent = services.resolve_parent(parent_value)
        if not roles.can_edit_queue(self.request.user, parent):
            where = f"under {parent.name}" if parent else "at the top level"
            raise PermissionDenied(f"you may not place queues {where}; ask an admin of that queue")

    def service_create(self, data: dict[str, Any]) -> Change[Queue]:
        self._require_parent_access(data.get("parent"))
        return services.create_queue(data, actor=self.request.user, source=self.audit_source)

    def service_update(self, instance: Queue, data: dict[str, Any]) -> Change[Queue]:
        if "parent" in data and (data["parent"] or None) != (instance.parent.name if instance.parent_id else None):
            self._require_parent_access(data["parent"])
        return services.update_queue(instance, data, actor=self.request.user, source=self.audit_source)

    def service_delete(self, instance: Queue) -> None:
        services.delete_queue(instance, actor=self.request.user, source=self.audit_source)

    @extend_schema(responses=s.QueueTreeNodeSerializer(many=True), filters=False)
    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None)
    def tree(self, request: Request) -> Response:
        """The whole tree in one call, with allocated / fair share / pending per resource (latest cycle)."""
        return Response(scheduling_selectors.queue_tree_data())

    @extend_schema(
        responses={200: s.QueueListingRowSerializer(many=True), (200, "text/plain"): OpenApiTypes.STR}, filters=False
    )
    @action(
        detail=False, methods=["get"], pagination_class=None, filterset_class=None,
        renderer_classes=[JSONRenderer, PlainTextRenderer, BrowsableAPIRenderer],
    )
    def listing(self, request: Request) -> Response:
        """NAME, PRIORITY, PARENT, CHILDREN like `kubectl get queues` (`?format=text` for the table)."""
        rows = selectors.queue_listing()
        if request.accepted_renderer.format == "text":
            return Response(selectors.format_listing(rows), content_type="text/plain; charset=utf-8")
        return Response(rows)

    @extend_schema(
        responses={(200, "application/yaml"): OpenApiTypes.STR}, filters=False,
        description="All queues as scheduling.run.ai/v2 Queue documents, parents first.",
    )
    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None, renderer_classes=[YAMLRenderer])
    def export(self, request: Request) -> Response:
        """Export the tree as Queue CRD YAML."""
        response = Response(yaml_io.export_queues(), content_type="application/yaml; charset=utf-8")
        response["Content-Disposition"] = 'inline; filename="queues.yaml"'
        return response

    @extend_schema(
        request={
            "application/json": s.ImportRequestSerializer,
            "application/yaml": OpenApiTypes.STR,
            "multipart/form-data": {"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}},
        },
        parameters=[DRY_RUN],
        responses={
            200: s.ImportResultSerializer,
            400: OpenApiResponse(s.ImportErrorSerializer, description="Every problem found; nothing was changed."),
            403: OpenApiResponse(description="A queue of the file is outside the caller's subtrees."),
        },
        filters=False,
    )
    @action(
        detail=False, methods=["post"], url_path="import", pagination_class=None, filterset_class=None,
        parser_classes=[JSONParser, YAMLTextParser, XYAMLTextParser, TextYAMLParser, PlainTextParser,
                        MultiPartParser, FormParser],
    )
    def import_yaml(self, request: Request) -> Response:
        """Import Queue CRD YAML all-or-nothing: one bad document rejects the file, with every error listed."""
        upload = request.FILES.get("file") if hasattr(request, "FILES") else None
        if upload is not None:
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                return Response({"errors": [_problem("file: must be UTF-8 text")]}, status=400)
        else:
            text = request.data.get("yaml") if hasattr(request.data, "get") else None
        if not isinstance(text, str) or not text.strip():
            return Response({"errors": [_problem("send the YAML as the body, as {'yaml': …} or as a 'file' upload")]}, 400)
        dry_run = str(request.query_params.get("dry_run", "")).lower() in {"1", "true", "yes"}
        try:
            self._require_import_access(text)
            result = yaml_io.import_queues(text, actor=request.user, source="import", dry_run=dry_run)
        except yaml_io.QueueImportError as exc:
            return Response({"errors": [_as_dict(p) for p in exc.problems]}, 400)
        return Response(s.ImportResultSerializer(result).data, status=status.HTTP_200_OK)

    def _require_import_access(self, text: str) -> None:
        """Queue admins may import only queues inside their subtrees (new ones under their queues)."""
        user = self.request.user
        if roles.is_platform_admin(user):
            return
        docs, _ = yaml_io.plan_import(text)
        parents = {d.name: d.values["parent"] for d in docs}
        existing = {q.name: q for q in Queue.objects.all()}
        refused = []
        for name, parent in parents.items():
            if name in existing and not roles.can_edit_queue(user, existing[name]):
                refused.append(name)
                continue
            anchor = parent
            while anchor is not None and anchor not in existing:
                anchor = parents.get(anchor)
            if not roles.can_edit_queue(user, existing.get(anchor) if anchor else None):
                refused.append(name)
        if refused:
            raise PermissionDenied(f"you may not import {', '.join(sorted(refused))}: outside the queues you administer")


def _problem(message: str) -> dict[str, Any]:
    return {"document": 0, "name": "", "field": "", "message": message}


def _as_dict(problem: yaml_io.ImportProblem) -> dict[str, Any]:
    return {"document": problem.document, "name": problem.name, "field": problem.field, "message": problem.message}


@named_detail()
class PriorityClassViewSet(ByNameLookupMixin, ServiceModelViewSet):
    """Workload priority classes (platform admins change them), addressed by name or numeric id."""

    serializer_class = s.PriorityClassSerializer
    filterset_class = PriorityClassFilterSet
    ordering_fields = ("name", "value", "created")
    ordering = ("-value", "name")

    def get_queryset(self) -> Any:
        return selectors.priority_classes()

    def service_create(self, data: dict[str, Any]) -> Change[PriorityClass]:
        return services.create_priority_class(data, actor=self.request.user, source=self.audit_source)

    def service_update(self, instance: PriorityClass, data: dict[str, Any]) -> Change[PriorityClass]:
        return services.update_priority_class(instance, data, actor=self.request.user, source=self.audit_source)

    def service_delete(self, instance: PriorityClass) -> None:
        services.delete_priority_class(instance, actor=self.request.user, source=self.audit_source)


class QueueStatusViewSet(viewsets.ReadOnlyModelViewSet):
    """Queue figures recorded by the scheduling cycles (history; the tree shows the latest)."""

    serializer_class = s.QueueStatusSerializer
    filterset_class = QueueStatusFilterSet
    ordering_fields = ("recorded_at", "id")
    ordering = ("-recorded_at", "-id")
    keyset_paging = True  # an append-only history: pages by cursor too (core.api.pagination)

    def get_queryset(self) -> Any:
        return QueueStatus.objects.select_related("queue")


class QueueMembershipViewSet(ServiceErrorsMixin, viewsets.ModelViewSet):
    """Who administers which subtree (platform admins change them)."""

    serializer_class = s.QueueMembershipSerializer
    filterset_class = QueueMembershipFilterSet
    ordering_fields = ("id", "role")
    ordering = ("queue__name", "user__username")
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return selectors.memberships()

    def perform_create(self, serializer: Any) -> None:
        data = serializer.validated_data
        serializer.instance = services.set_membership(
            data["queue"], data["user"], data.get("role", "admin"), actor=self.request.user, source="api"
        )

    def perform_destroy(self, instance: QueueMembership) -> None:
        services.set_membership(instance.queue, instance.user, None, actor=self.request.user, source="api")

