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


def named_token_user(key: str) -> tuple[Any, Any] | None:
    """(user, ApiToken) for a live named token's key; None when `key` is no named token. An expired or
    revoked one raises AuthenticationFailed saying which."""
    from kaiweb.accounts.models import KEY_PREFIX, ApiToken, hash_key

    if not key.startswith(KEY_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(key_hash=hash_key(key)).first()
    if token is None:
        return None
    if token.revoked_at is not None:
        raise exceptions.AuthenticationFailed(f"Token {token.name!r} was revoked on {token.revoked_at:%Y-%m-%d %H:%M} UTC.")
    if token.expires_at is not None and token.expires_at <= timezone.now():
        raise exceptions.AuthenticationFailed(f"Token {token.name!r} expired on {token.expires_at:%Y-%m-%d %H:%M} UTC; "
                                              "make a new one on your profile page.")
    if not token.user.is_active:
        raise exceptions.AuthenticationFailed("User inactive or deleted.")
    if token.last_used_at is None or (timezone.now() - token.last_used_at).total_seconds() > 60:
        type(token).objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user, token


def header_key(request: Any) -> str | None:
    """The key of `Authorization: Token <key>` or `Bearer <key>`, else None."""
    parts = (request.META.get("HTTP_AUTHORIZATION") or "").split()
    if len(parts) == 2 and parts[0].lower() in ("token", "bearer"):
        return parts[1]
    return None


class ExpiringTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>` (or `Bearer <key>`): a named token from the profile page, or the
    token of POST /api/v1/me/token/, which a token older than KAI_API_TOKEN_LIFETIME_DAYS is refused
    (401); an address that sent too many bad tokens is refused (429) until its lockout ends."""

    def authenticate(self, request: Any) -> Any:
        self._request = request
        key = header_key(request)
        if key is None:
            return None
        return self.authenticate_credentials(key)

    def authenticate_credentials(self, key: str) -> Any:
        request = getattr(self, "_request", None)
        if request is not None and throttle.locked_out(request):
            raise exceptions.Throttled(detail=throttle.lockout_message())
        named = named_token_user(key)
        if named is not None:
            return named
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
