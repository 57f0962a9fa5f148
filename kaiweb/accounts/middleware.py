"""Named API tokens on the pages' CSV and other GET URLs (the API authenticates them itself).

A request without a session that carries `Authorization: Token <key>` (or `Bearer`) on a GET or
HEAD is signed in as the token's user for that request only, so a script can download
/usage/export.csv with the token it uses on /api/v1/. A bad, expired or revoked token gets a 401
naming why, never the login page. Sessions and writes are untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions

from kaiweb.accounts.authentication import ExpiringTokenAuthentication, header_key

#: URLs with an authentication of their own (the API; /metrics takes KAI_METRICS_TOKEN) or none
EXEMPT = ("/api/", "/metrics", "/healthz", "/readyz", "/static/")


class TokenOnPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (request.method in ("GET", "HEAD") and not request.path.startswith(EXEMPT)
                and not getattr(request, "user", None).is_authenticated and header_key(request) is not None):
            try:
                got: Any = ExpiringTokenAuthentication().authenticate(request)
            except exceptions.APIException as exc:
                return JsonResponse({"detail": str(exc.detail)}, status=exc.status_code)
            if got is not None:
                request.user = got[0]
                request._dont_enforce_csrf_checks = True  # no cookie: nothing to forge
        return self.get_response(request)


SESSION_KEY = "kaiweb-time-zone"


class UserTimeZoneMiddleware:
    """Pages show times in the signed-in user's zone (profile page; UTC by default)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        import zoneinfo

        from django.utils import timezone

        zone = "UTC"
        user = getattr(request, "user", None)
        session = getattr(request, "session", None)
        if user is not None and user.is_authenticated and not request.path.startswith(EXEMPT):  # the API stays UTC
            zone = session.get(SESSION_KEY) if session is not None else None
            if zone is None:  # once per session (and per token request)
                from kaiweb.accounts.models import Preference

                zone = Preference.objects.filter(user=user).values_list("time_zone", flat=True).first() or "UTC"
                if session is not None and session.session_key:
                    session[SESSION_KEY] = zone
        try:
            timezone.activate(zoneinfo.ZoneInfo(zone))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            timezone.activate(zoneinfo.ZoneInfo("UTC"))
        request.time_zone = zone
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
