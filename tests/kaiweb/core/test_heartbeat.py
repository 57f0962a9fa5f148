"""Heartbeats of beat and the watcher, and the probe that reads them (a real subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kaiweb.core import heartbeat


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KAI_HEARTBEAT_DIR", str(tmp_path))
    return tmp_path


def probe(folder, name: str, max_age: str = "120") -> subprocess.CompletedProcess:
    env = {**os.environ, "KAI_HEARTBEAT_DIR": str(folder)}
    return subprocess.run([sys.executable, "-m", "kaiweb.core.heartbeat", name, "--max-age", max_age],
                          capture_output=True, text=True, env=env, timeout=60)


def test_the_probe_fails_without_a_heartbeat_passes_after_one_and_fails_when_it_is_stale(folder):
    missing = probe(folder, "beat")
    assert missing.returncode == 1
    assert "no heartbeat" in missing.stderr
    heartbeat.beat("beat")
    assert probe(folder, "beat").returncode == 0
    old = time.time() - 600
    os.utime(folder / "beat", (old, old))
    stale = probe(folder, "beat")
    assert stale.returncode == 1
    assert "more than 120s" in stale.stderr
    assert probe(folder, "watcher").returncode == 1  # each process has its own


def test_beats_scheduler_touches_the_heartbeat_on_every_tick(folder, db, monkeypatch):
    from kaiweb.celery import app
    from kaiweb.core.beat import HeartbeatScheduler

    scheduler = HeartbeatScheduler(app=app, lazy=True)
    monkeypatch.setattr("django_celery_beat.schedulers.DatabaseScheduler.tick", lambda self, *a, **k: 5.0)
    assert heartbeat.age("beat") is None
    assert scheduler.tick() == 5.0
    assert heartbeat.age("beat") < 5


def test_a_tick_that_fails_does_not_beat(folder, db, monkeypatch):
    from kaiweb.celery import app
    from kaiweb.core.beat import HeartbeatScheduler

    def broken(self, *a, **k):
        raise ConnectionError("database gone")

    monkeypatch.setattr("django_celery_beat.schedulers.DatabaseScheduler.tick", broken)
    with pytest.raises(ConnectionError):
        HeartbeatScheduler(app=app, lazy=True).tick()
    assert heartbeat.age("beat") is None


def test_the_watchers_database_heartbeat_also_beats_for_its_probe(folder, db):
    from kaiweb.cluster import mirror
    from kaiweb.cluster.models import Cluster

    cluster, _ = Cluster.objects.get_or_create(name="default")
    mirror.record_heartbeat(cluster)
    assert heartbeat.age("watcher") < 5


def test_celery_uses_the_heartbeat_scheduler(settings):
    assert settings.CELERY_BEAT_SCHEDULER == "kaiweb.core.beat:HeartbeatScheduler"
