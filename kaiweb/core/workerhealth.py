"""Worker health: a worker that cannot reach its database stops taking tasks and says so.

Each worker checks its database every ``KAI_WORKER_HEALTH_SECONDS`` (a consumer bootstep, see
`kaiweb.celery`). While the database does not answer, the worker cancels its queues, so cycle
tasks wait in the broker for a healthy worker instead of being consumed and failed one after the
other; when the database answers again it resumes. Every check is reported where the web
process can read it without the worker's database: in the broker (Redis) with a time to live,
or, with the development filesystem broker, in files under KAI_VAR_DIR. `/readyz` turns the
reports into its ``workers`` check.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)
KEY_PREFIX = "kaiweb:worker-health:"


def database_reachable() -> tuple[bool, str]:
    """Does this process's database answer a query? (ok, detail); a broken connection is dropped."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, "database reachable"
    except Exception as exc:  # noqa: BLE001 - any failure means the worker cannot do its work
        try:
            connection.close()
        except Exception:  # noqa: BLE001
            pass
        return False, f"database unreachable: {exc.__class__.__name__}"


def _ttl() -> int:
    return max(10, int(3 * float(settings.KAI_WORKER_HEALTH_SECONDS)))


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)


def _uses_redis() -> bool:
    return settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://"))


def _folder() -> Path:
    folder = Path(settings.VAR_DIR) / "worker-health"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def report(worker: str, ok: bool, detail: str) -> None:
    """Record one worker's state (kept for three check periods); never raises."""
    record = json.dumps({"worker": worker, "ok": ok, "detail": detail, "at": time.time()})
    try:
        if _uses_redis():
            _redis().setex(KEY_PREFIX + worker, _ttl(), record)
        else:
            path = _folder() / f"{worker.replace('/', '_')}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(record)
            tmp.replace(path)
    except Exception as exc:  # noqa: BLE001 - reporting must never stop the worker
        log.warning("could not report worker health: %s", exc)


def forget(worker: str) -> None:
    """Drop a worker's report (it is shutting down); never raises."""
    try:
        if _uses_redis():
            _redis().delete(KEY_PREFIX + worker)
        else:
            (_folder() / f"{worker.replace('/', '_')}.json").unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not drop the worker health report: %s", exc)


def reports() -> list[dict[str, Any]]:
    """The recent reports of every worker (older than the time to live are gone)."""
    out = []
    if _uses_redis():
        client = _redis()
        keys = sorted(client.scan_iter(match=KEY_PREFIX + "*", count=100))
        for raw in client.mget(keys) if keys else []:
            if raw:
                out.append(json.loads(raw))
    else:
        now = time.time()
        for path in sorted(_folder().glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if now - float(record.get("at", 0)) <= _ttl():
                out.append(record)
    return out


def check_workers() -> dict[str, Any]:
    """The readiness check: not ok when a worker reports that it cannot reach its database."""
    try:
        recent = reports()
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "detail": f"worker reports unreadable: {exc.__class__.__name__}"}
    broken = [r for r in recent if not r.get("ok")]
    if broken:
        names = ", ".join(f"{r['worker']} ({r['detail']})" for r in broken[:5])
        return {"ok": False, "detail": f"{len(broken)} of {len(recent)} worker(s) paused: {names}"}
    if not recent:
        return {"ok": True, "detail": "no worker has reported yet"}
    return {"ok": True, "detail": f"{len(recent)} worker(s) healthy"}


class DatabaseGate:
    """Pauses a worker's queues while its database does not answer, resumes them when it does."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.paused: list[str] = []

    @property
    def worker(self) -> str:
        return str(getattr(self.consumer, "hostname", "") or "worker")

    def check(self) -> bool:
        ok, detail = database_reachable()
        if not ok and not self.paused:
            queues = [q.name for q in getattr(self.consumer.task_consumer, "queues", [])]
            for name in queues:
                self.consumer.cancel_task_queue(name)
            self.paused = queues
            log.error("%s: %s; stopped taking tasks from %s until it answers", self.worker, detail,
                      ", ".join(queues) or "its queues")
        elif ok and self.paused:
            for name in self.paused:
                self.consumer.add_task_queue(name)
            log.warning("%s: database reachable again; taking tasks from %s", self.worker, ", ".join(self.paused))
            self.paused = []
        report(self.worker, ok, detail if ok else f"{detail}; not taking tasks")
        return ok
