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
#: the preference that follows the browser: pages set this cookie to the zone the browser reports
BROWSER_ZONE = "browser"
BROWSER_COOKIE = "kaiweb_browser_tz"


def _zone(name: str | None) -> Any:
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name) if name and len(name) <= 64 else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


class UserTimeZoneMiddleware:
    """Pages show times in the signed-in user's zone (profile page; UTC by default).

    The preference is an IANA zone or "browser": then the zone the browser reports (a cookie the
    pages' script keeps current) is used, and UTC until the browser has said, or when it names no
    known zone. `request.time_zone` is the zone in effect, `request.time_zone_setting` the choice.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        import zoneinfo

        from django.utils import timezone

        zone: str | None = "UTC"
        user = getattr(request, "user", None)
        session = getattr(request, "session", None)
        if user is not None and user.is_authenticated and not request.path.startswith(EXEMPT):  # the API stays UTC
            zone = session.get(SESSION_KEY) if session is not None else None
            if zone is None:  # once per session (and per token request)
                from kaiweb.accounts.models import Preference

                zone = Preference.objects.filter(user=user).values_list("time_zone", flat=True).first() or "UTC"
                if session is not None and session.session_key:
                    session[SESSION_KEY] = zone
        setting = zone or "UTC"
        if setting == BROWSER_ZONE:
            zone = request.COOKIES.get(BROWSER_COOKIE)
        tz = _zone(zone)
        if tz is None:
            tz, zone = zoneinfo.ZoneInfo("UTC"), "UTC"
        timezone.activate(tz)
        request.time_zone = zone
        request.time_zone_setting = setting
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
