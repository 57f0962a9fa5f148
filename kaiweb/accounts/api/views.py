"""The signed-in user's roles and API token."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.authtoken.models import Token
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from kaiweb.accounts import roles
from kaiweb.accounts.api.serializers import MeSerializer, TokenSerializer
from kaiweb.core.api.schema import SingleObjectSchema
from kaiweb.queues.models import Queue


class _ReadOnlyBrowsableAPIRenderer(BrowsableAPIRenderer):
    """The browsable page without a form: who you are is not something to post."""

    def show_form_for_method(self, view: Any, method: str, request: Any, obj: Any) -> bool:
        return False


class MeViewSet(viewsets.GenericViewSet):
    """Who am I, what may I change; and my token for automation (named tokens: /accounts/profile/)."""

    renderer_classes = [JSONRenderer, _ReadOnlyBrowsableAPIRenderer]

    permission_classes = [IsAuthenticated]  # any signed-in user may manage their own token
    schema = SingleObjectSchema()
    serializer_class = MeSerializer
    pagination_class = None
    filter_backends: list[Any] = []

    @extend_schema(responses=MeSerializer)
    def list(self, request: Request) -> Response:
        user = request.user
        if roles.is_platform_admin(user):
            names = list(Queue.objects.order_by("name").values_list("name", flat=True))
        else:
            ids = roles.administered_queue_ids(user)
            names = list(Queue.objects.filter(pk__in=ids).order_by("name").values_list("name", flat=True))
        data = {"username": user.get_username(), "is_platform_admin": roles.is_platform_admin(user),
                "administered_queues": names}
        return Response(MeSerializer(data).data)

    @extend_schema(request=None, responses={201: TokenSerializer})
    @action(detail=False, methods=["post"])
    def token(self, request: Request) -> Response:
        """Create a new API token for the signed-in user; any previous token stops working."""
        Token.objects.filter(user=request.user).delete()
        token = Token.objects.create(user=request.user)
        return Response(TokenSerializer({"token": token.key}).data, status=201)
