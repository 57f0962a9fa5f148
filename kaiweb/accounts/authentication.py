"""API token authentication with an expiry and the login throttle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from kaiweb.accounts import throttle


def token_expires_at(token: Any) -> Any:
    """When ``token`` stops working (None: tokens do not expire, KAI_API_TOKEN_LIFETIME_DAYS=0)."""
    days = float(settings.KAI_API_TOKEN_LIFETIME_DAYS)
    if days <= 0:
        return None
    return token.created + timedelta(days=days)


class ExpiringTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`; a token older than KAI_API_TOKEN_LIFETIME_DAYS is refused (401),
    and an address that sent too many bad tokens is refused (429) until its lockout ends."""

    def authenticate(self, request: Any) -> Any:
        self._request = request
        return super().authenticate(request)

    def authenticate_credentials(self, key: str) -> Any:
        request = getattr(self, "_request", None)
        if request is not None and throttle.locked_out(request):
            raise exceptions.Throttled(detail=throttle.lockout_message())
        try:
            user, token = super().authenticate_credentials(key)
        except exceptions.AuthenticationFailed:
            if request is not None:
                throttle.record_failure(request)
            raise
        expires = token_expires_at(token)
        if expires is not None and timezone.now() >= expires:
            raise exceptions.AuthenticationFailed(
                f"Token expired on {expires:%Y-%m-%d %H:%M} UTC (tokens last {settings.KAI_API_TOKEN_LIFETIME_DAYS:g} "
                "days); sign in and issue a new one with POST /api/v1/me/token/."
            )
        return user, token
