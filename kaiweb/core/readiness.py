"""Readiness checks used by /readyz: each returns ok plus a short detail."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def database_ok() -> bool:
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - readiness reports any failure
        return False


def check_database() -> dict[str, Any]:
    ok = database_ok()
    return {"ok": ok, "detail": "reachable" if ok else "database unreachable"}


def check_broker() -> dict[str, Any]:
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://") or url.startswith("memory://"):
        return {"ok": True, "detail": "embedded broker"}
    try:
        from kaiweb.celery import app

        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return {"ok": True, "detail": "reachable"}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "detail": f"broker unreachable: {exc.__class__.__name__}"}


def check_cluster() -> dict[str, Any]:
    try:
        from kaiweb.cluster import gateway

        gw = gateway.get_gateway()
        gw.ping()
        return {"ok": True, "detail": f"{settings.KAI_CLUSTER_BACKEND} gateway reachable"}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "detail": f"cluster unreachable: {exc}"}


def check_workers() -> dict[str, Any]:
    from kaiweb.core.workerhealth import check_workers as workers

    return {**workers(), "gates": False}  # reported; a paused worker does not make the web unready


def run_checks() -> dict[str, dict[str, Any]]:
    return {"database": check_database(), "broker": check_broker(), "cluster": check_cluster(),
            "workers": check_workers()}
