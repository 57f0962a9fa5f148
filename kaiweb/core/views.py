"""Health, readiness, metrics and error pages."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up (no dependency is touched)."""
    return JsonResponse({"status": "ok"})


@login_not_required
def readyz(request: HttpRequest) -> JsonResponse:
    """Dependencies answer: the database, the broker and the cluster gateway."""
    from kaiweb.core import readiness

    checks = readiness.run_checks()
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503)


@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition of the scheduler's gauges and counters."""
    from kaiweb.core import prometheus

    body, content_type = prometheus.render()
    return HttpResponse(body, content_type=content_type)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "errors/404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    return render(request, "errors/500.html", status=500)


def database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - readiness reports any failure
        return False
