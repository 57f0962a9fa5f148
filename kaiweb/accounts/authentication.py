"""API token authentication with an expiry, the login throttle, and a short memory of good tokens.

Looking a token up costs a database round trip on every API call, about half of what a cached
list or the queue tree costs to serve. So each server process remembers a token that
authenticated (its user and token rows) for ``KAI_API_AUTH_CACHE_SECONDS`` (5 s; 0 turns it off).
Expiry is checked again on every call. A revoked or deleted token, a deactivated user or a
changed role takes effect at once in the process that made the change (it forgets every token it
remembers) and within that many seconds in the others. Bad tokens are never remembered, and the
throttle is asked first on every call.
"""

from __future__ import annotations

import copy
import threading
import time
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


class RecentTokens:
    """Tokens that authenticated in the last few seconds, by the SHA-256 of their key: (user,
    token, named, until). At most ``max_entries`` are kept (all are forgotten when it is full:
    there is no order to get wrong), so memory stays bounded whatever keys are sent.

    The rows are kept as they were read and every call gets copies of them, so what a request
    caches on its user (its roles, the queues it administers: ``roles``) is found again by the
    next request, as without this memory."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, tuple[Any, Any, bool, float]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str) -> tuple[Any, Any, bool] | None:
        got = self._entries.get(digest)
        if got is None or got[3] <= time.monotonic():
            return None
        user = copy.copy(got[0])
        token = copy.copy(got[1])
        token.user = user  # the token's user is the request's user
        return user, token, got[2]

    def put(self, digest: str, user: Any, token: Any, named: bool, seconds: float) -> None:
        """Remember copies of a token's rows as they were read (before a request caches anything on them)."""
        user, token = copy.copy(user), copy.copy(token)
        token.user = user
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = (user, token, named, time.monotonic() + seconds)

    def forget_all(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


#: this process's memory of good tokens (cleared on any change to tokens, users or their roles)
RECENT = RecentTokens()


def forget_tokens(*args: Any, **kwargs: Any) -> None:
    """Forget every remembered token (a signal receiver, so it takes any arguments)."""
    RECENT.forget_all()


def _named_token(key: str) -> Any:
    """The named token (with its user) whose key is ``key``; None when ``key`` is no named token.
    Marks it used, at most once a minute."""
    from kaiweb.accounts.models import KEY_PREFIX, ApiToken, hash_key

    if not key.startswith(KEY_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(key_hash=hash_key(key)).first()
    if token is not None and (token.last_used_at is None
                              or (timezone.now() - token.last_used_at).total_seconds() > 60):
        type(token).objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def _refuse_named(token: Any) -> None:
    """Raise AuthenticationFailed saying why a named token no longer works (revoked, expired, its
    user inactive)."""
    if token.revoked_at is not None:
        raise exceptions.AuthenticationFailed(f"Token {token.name!r} was revoked on {token.revoked_at:%Y-%m-%d %H:%M} UTC.")
    if token.expires_at is not None and token.expires_at <= timezone.now():
        raise exceptions.AuthenticationFailed(f"Token {token.name!r} expired on {token.expires_at:%Y-%m-%d %H:%M} UTC; "
                                              "make a new one on your profile page.")
    if not token.user.is_active:
        raise exceptions.AuthenticationFailed("User inactive or deleted.")


def _refuse_issued(token: Any) -> None:
    """Raise AuthenticationFailed when a token of POST /api/v1/me/token/ is past its lifetime."""
    expires = token_expires_at(token)
    if expires is not None and timezone.now() >= expires:
        raise exceptions.AuthenticationFailed(
            f"Token expired on {expires:%Y-%m-%d %H:%M} UTC (tokens last {settings.KAI_API_TOKEN_LIFETIME_DAYS:g} "
            "days); sign in and issue a new one with POST /api/v1/me/token/."
        )


def header_key(request: Any) -> str | None:
    """The key of `Authorization: Token <key>` or `Bearer <key>`, else None."""
    parts = (request.META.get("HTTP_AUTHORIZATION") or "").split()
    if len(parts) == 2 and parts[0].lower() in ("token", "bearer"):
        return parts[1]
    return None


class ExpiringTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>` (or `Bearer <key>`): a named token from the profile page, or the
    token of POST /api/v1/me/token/, which a token older than KAI_API_TOKEN_LIFETIME_DAYS is refused
    (401); an address that sent too many bad tokens is refused (429) until its lockout ends. A good
    token is remembered for a few seconds (module docstring)."""

    def authenticate(self, request: Any) -> Any:
        self._request = request
        key = header_key(request)
        if key is None:
            return None
        return self.authenticate_credentials(key)

    def authenticate_credentials(self, key: str) -> Any:
        from kaiweb.accounts.models import hash_key

        request = getattr(self, "_request", None)
        if request is not None and throttle.locked_out(request):
            raise exceptions.Throttled(detail=throttle.lockout_message())
        seconds = float(settings.KAI_API_AUTH_CACHE_SECONDS)
        digest = hash_key(key) if seconds > 0 else ""
        known = RECENT.get(digest) if digest else None
        if known is not None:
            user, token, named = known
        else:
            token = _named_token(key)
            named = token is not None
            if named:
                user = token.user
            else:
                try:
                    user, token = super().authenticate_credentials(key)
                except exceptions.AuthenticationFailed:
                    if request is not None:
                        throttle.record_failure(request)
                    raise
        if named:
            _refuse_named(token)
        else:
            _refuse_issued(token)
        if digest and known is None:
            RECENT.put(digest, user, token, named, seconds)
        return user, token
