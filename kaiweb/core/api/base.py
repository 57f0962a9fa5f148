"""Base viewset of the API: writes go through the app's services; rule errors become 400s.

A service raises Django's ValidationError keyed by field name; the API answers 400 with the
same keys, so `{"gpu_limit": ["limit 2 is below the quota 4; …"]}` reads the same in the API,
the admin and the forms. Write responses carry the service's `warnings`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response

from kaiweb.audit.choices import AuditSource
from kaiweb.core.services import Change, error_dict, is_conflict


class WarningsField(serializers.SerializerMethodField):
    """The warnings a write produced (empty on reads)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "Allowed but suspicious consequences of this change (writes only).")
        super().__init__(method_name="_get_warnings", **kwargs)


class WarningsMixin(serializers.Serializer):
    """Adds the `warnings` output field."""

    warnings = extend_schema_field(serializers.ListField(child=serializers.CharField()))(WarningsField())

    def _get_warnings(self, obj: Any) -> list[str]:
        return list(getattr(obj, "_change_warnings", []))


def as_api_error(exc: DjangoValidationError) -> ValidationError:
    """A service's ValidationError as the API's 400."""
    return ValidationError(error_dict(exc))


class Conflict(APIException):
    """409: the name is taken (the body names the field, as a 400 does)."""

    status_code = 409
    default_detail = "conflict"
    default_code = "conflict"


class ServiceErrorsMixin:
    """Turns rule errors raised by services (and protected deletes) into 400 answers."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, DjangoValidationError) and is_conflict(exc):
            exc = Conflict(error_dict(exc))
        elif isinstance(exc, DjangoValidationError):
            exc = as_api_error(exc)
        elif isinstance(exc, ProtectedError):
            names = sorted({str(o) for o in exc.protected_objects})[:10]
            exc = ValidationError({"non_field_errors": [f"still used by {', '.join(names)}"]})
        return super().handle_exception(exc)  # type: ignore[misc]  # a mixin: the viewset it is mixed into has handle_exception


class ServiceModelViewSet(ServiceErrorsMixin, viewsets.ModelViewSet):
    """CRUD whose writes call `service_create` / `service_update` / `service_delete`."""

    audit_source = AuditSource.API

    def service_create(self, data: dict[str, Any]) -> Change[Any]:
        raise NotImplementedError

    def service_update(self, instance: Any, data: dict[str, Any]) -> Change[Any]:
        raise NotImplementedError

    def service_delete(self, instance: Any) -> None:
        raise NotImplementedError

    def _respond(self, change: Change[Any], code: int) -> Response:
        change.obj._change_warnings = change.warnings
        obj = self.get_queryset().filter(pk=change.obj.pk).first() or change.obj
        obj._change_warnings = change.warnings
        return Response(self.get_serializer(obj).data, status=code)

    def create(self, request: Any, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return self._respond(self.service_create(dict(serializer.validated_data)), status.HTTP_201_CREATED)

    def update(self, request: Any, *args: Any, **kwargs: Any) -> Response:
        partial = kwargs.pop("partial", False)
        instance = self.get_object()
        serializer = self.get_serializer(instance, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        return self._respond(self.service_update(instance, dict(serializer.validated_data)), status.HTTP_200_OK)

    def destroy(self, request: Any, *args: Any, **kwargs: Any) -> Response:
        self.service_delete(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


def named_detail(description: str = "The object's name, or its numeric id.") -> Any:
    """Class decorator: the schema documents a detail URL's key as a name or an id."""
    from drf_spectacular.types import OpenApiTypes
    from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view

    key = OpenApiParameter("id", OpenApiTypes.STR, OpenApiParameter.PATH, description=description)

    def decorate(viewset: Any) -> Any:
        methods = [m for m in ("retrieve", "update", "partial_update", "destroy") if hasattr(viewset, m)]
        return extend_schema_view(**{m: extend_schema(parameters=[key]) for m in methods})(viewset)

    return decorate


class ByNameLookupMixin:
    """Detail URLs take the object's name, as the UI and kubectl do, or its numeric id.

    `/api/v1/nodes/gpu-node-3/` and `/api/v1/nodes/42/` name the same node. A key of digits only is
    tried as an id first. Names unique only within a cluster (nodes, shards) take `?cluster=<name>`
    when several clusters have one; without it such a name is a 400 that says so.
    """

    lookup_value_regex = r"[^/]+"
    #: the field holding the name, and whether names repeat across clusters
    name_field = "name"
    name_per_cluster = False

    def get_object(self) -> Any:
        from django.http import Http404

        key = str(self.kwargs[self.lookup_url_kwarg or self.lookup_field])  # type: ignore[attr-defined]  # a mixin of a GenericAPIView
        queryset = self.filter_queryset(self.get_queryset())  # type: ignore[attr-defined]  # a mixin of a GenericAPIView
        found = None
        if key.isdigit() and len(key) < 19:
            found = queryset.filter(pk=int(key)).first()
        if found is None:
            named = queryset.filter(**{self.name_field: key[:253]})
            cluster = self.request.query_params.get("cluster") if self.name_per_cluster else None  # type: ignore[attr-defined]  # a mixin of a GenericAPIView
            if cluster:
                named = named.filter(cluster__name=cluster[:253])
            matches = list(named[:2])
            if not matches:
                where = f" in cluster {cluster[:253]!r}" if cluster else ""
                raise Http404(f"no {queryset.model._meta.verbose_name} with id or name {key[:253]!r}{where}")
            if len(matches) > 1:
                raise ValidationError({"cluster": [
                    f"several clusters have a {queryset.model._meta.verbose_name} named {key[:253]!r}: "
                    "add ?cluster=<cluster name>, or use its numeric id"]})
            found = matches[0]
        self.check_object_permissions(self.request, found)  # type: ignore[attr-defined]  # a mixin of a GenericAPIView
        return found
