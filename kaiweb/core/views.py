"""Health, readiness, metrics and error pages."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up (no dependency is touched)."""
    return JsonResponse({"status": "ok"})


@login_not_required
def readyz(request: HttpRequest) -> JsonResponse:
    """Dependencies answer: the database, the broker and the cluster gateway (503 when one does not).

    The workers' reports are shown but do not take this web process out of service: a worker that
    lost its database makes the status ``degraded`` (200), since the pages still answer."""
    from kaiweb.core import readiness

    checks = readiness.run_checks()
    ok = all(c["ok"] for c in checks.values() if c.get("gates", True))
    status = "unavailable" if not ok else ("ok" if all(c["ok"] for c in checks.values()) else "degraded")
    return JsonResponse({"status": status, "checks": checks}, status=200 if ok else 503)


def metrics_allowed(request: HttpRequest) -> bool:
    """May this request read /metrics? With KAI_METRICS_PUBLIC anyone; else a scraper sending
    `Authorization: Bearer <KAI_METRICS_TOKEN>`, or a signed-in staff user."""
    if settings.KAI_METRICS_PUBLIC:
        return True
    token = settings.KAI_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition of the scheduler's gauges and counters (see `metrics_allowed`)."""
    from kaiweb.core import prometheus

    if not metrics_allowed(request):
        response = HttpResponse(
            "/metrics needs `Authorization: Bearer <KAI_METRICS_TOKEN>` or a signed-in staff user "
            "(KAI_METRICS_PUBLIC=true opens it to anyone).\n",
            status=401, content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response

    body, content_type = prometheus.render()
    return HttpResponse(body, content_type=content_type)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "errors/404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    return render(request, "errors/500.html", status=500)


