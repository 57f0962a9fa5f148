"""Real Celery workers (subprocesses) against Redis and the test database, for the celery and
fault tests.

The worker needs to share the database with the test, so these tests run on Postgres (CI sets
DATABASE_URL) and are skipped on SQLite, whose test database lives in the test process's memory.
Redis is `KAI_TEST_REDIS_URL` (default redis://127.0.0.1:6379/15), flushed before each test. Under
pytest-xdist (`make test` runs two processes) worker gwN takes the database N below it, so two
workers never flush each other's broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def _test_redis_url() -> str:
    base = os.environ.get("KAI_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return base
    head, _, db = base.rpartition("/")
    return f"{head}/{int(db or 0) - int(worker[2:])}"


REDIS_URL = _test_redis_url()


def database_url() -> str:
    """The URL of the test database (the worker connects to the same one)."""
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    auth = f"{user}:{s['PASSWORD']}" if s.get("PASSWORD") else user
    return f"postgres://{auth}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def cut_other_connections(cursor) -> None:
    """End every other client connection this test's role holds to the test database.

    Only the role's own client backends: an autovacuum worker or another role's session on the same
    database is not ours to end (and ending it needs a superuser)."""
    cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                   "AND usename = current_user AND backend_type = 'client backend'")


@dataclass
class Worker:
    """A `celery -A kaiweb worker` subprocess in its own process group."""

    proc: subprocess.Popen[bytes]
    log: Path
    pause_file: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_ready(self, timeout: float = 45) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            return " ready." in self.output()

        wait_for(ready, timeout, "the Celery worker to be ready")

    def wait_paused(self, timeout: float = 45) -> str:
        return str(wait_for(lambda: self.pause_file.exists() and self.pause_file.read_text(), timeout,
                            f"the worker to reach the pause point\n{self.output()[-2000:]}"))

    def resume(self) -> None:
        self.pause_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes: nothing gets to clean up."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


@dataclass
class CeleryHarness:
    """Starts workers (and beat) for one test and sends tasks through the test broker."""

    tmp: Path
    broker_url: str = REDIS_URL
    started: list[Worker] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "DJANGO_SETTINGS_MODULE": "kaiweb.settings",
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": self.broker_url,
            "REDIS_URL": self.broker_url,
            "CELERY_RESULT_BACKEND": "django-db",
            "KAI_VAR_DIR": str(self.tmp / "var"),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(extra)
        return env

    def start_worker(self, concurrency: int = 1, pause_at: str | None = None, name: str = "w",
                     **extra: str) -> Worker:
        log = self.tmp / f"worker-{name}-{len(self.started)}.log"
        pause_file = self.tmp / f"pause-{name}-{len(self.started)}"
        env = self.env(**extra)
        if pause_at:
            # The product's settings plus an app that stops the cycle at that step (tests/fault/pause).
            env.update(DJANGO_SETTINGS_MODULE="tests.fault.worker_settings", KAI_TEST_PAUSE_AT=pause_at,
                       KAI_TEST_PAUSE_FILE=str(pause_file), KAI_TEST_PAUSE_SECONDS="60")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "kaiweb", "worker", "-l", "info", "-c", str(concurrency),
                 "-n", f"{name}{len(self.started)}@%h", "-Q", "celery,whatif", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "-P", "prefork"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        worker = Worker(proc, log, pause_file)
        self.started.append(worker)
        worker.wait_ready()
        return worker

    def start_beat(self, **extra: str) -> Worker:
        log = self.tmp / f"beat-{len(self.started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "kaiweb", "beat", "-l", "info"],
                cwd=ROOT, env=self.env(**extra), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        beat = Worker(proc, log, self.tmp / "unused")
        self.started.append(beat)
        return beat

    def send(self, task_name: str, *args: object) -> str:
        """Publish a task to the test broker; returns its id."""
        from kombu import Connection

        from kaiweb.celery import app

        # A connection of its own: this process's settings may name another broker and transport.
        with Connection(self.broker_url) as conn:
            result = app.send_task(task_name, args=list(args), connection=conn)
        return result.id

    def stop_all(self) -> None:
        for w in self.started:
            w.stop()


@pytest.fixture
def celery_harness(transactional_db, tmp_path) -> Iterator[CeleryHarness]:
    if connection.vendor != "postgresql":
        pytest.skip("real-worker tests share the test database with a subprocess: run them on Postgres "
                    "(DATABASE_URL=postgres://…, as CI does); SQLite's test database is in memory")
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"Redis is not reachable at {REDIS_URL} (set KAI_TEST_REDIS_URL)")
    client.flushdb()
    (tmp_path / "var").mkdir()
    harness = CeleryHarness(tmp_path)
    try:
        yield harness
    finally:
        harness.stop_all()
        client.flushdb()
        # Connections of killed workers must be gone before the test database is flushed.
        with connection.cursor() as cursor:
            cut_other_connections(cursor)
