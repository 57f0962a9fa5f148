"""Faults during a cycle with a real worker: SIGKILL at each step, Redis restarted, Postgres gone.

Each test stops the worker at an exact point of the cycle (KAI_TEST_PAUSE_AT, tests/fault/pause), breaks something,
lets the next cycle run, and checks that the database agrees with the cluster and that no
decision was lost or carried out twice.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from django.db import connection

from kaiweb.core import locks
from kaiweb.scheduling import cycle
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod
from tests.celery.builders import running_pods, small_cluster, submit
from tests.celery.conftest import ROOT, cut_other_connections, database_url, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.timeout(120)]


def assert_consistent(sc) -> None:
    """Every running pod has exactly one applied bind for its incarnation, and nothing else."""
    pods = running_pods(sc)
    applied = list(Decision.objects.filter(kind=DecisionKind.BIND, status=DecisionStatus.APPLIED))
    keys = [d.idempotency_key.split("#")[0] for d in applied]
    assert len(keys) == len(set(keys)), "a pod incarnation was bound twice"
    assert sorted(f"bind:{p.uid}:{p.node.name}" for p in pods) == sorted(keys)
    assert not Decision.objects.filter(status=DecisionStatus.PLANNED).exists()
    assert not SchedulingCycle.objects.filter(status=CycleStatus.RUNNING).exists()


@pytest.mark.parametrize("point", ["after-decide", "after-record", "after-apply"])
def test_a_worker_killed_mid_cycle_leaves_a_consistent_cluster_after_the_next_cycle(celery_harness, point):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "gang", pods=2, gpus_per_pod=2)
    submit(sc, "team-b", "solo", pods=1, gpus_per_pod=1)
    worker = celery_harness.start_worker(pause_at=point)
    celery_harness.send("scheduling.run_cycle", sc.shard.pk, "doomed")
    worker.wait_paused()

    worker.kill()
    # Postgres ends the killed worker's session (and so its advisory lock) once it sees the socket close.
    wait_for(lambda: not locks.is_locked("scheduling-cycle", str(sc.shard.pk)), 30, "the dead worker's lock to go")

    doomed = SchedulingCycle.objects.get()
    assert doomed.status == CycleStatus.RUNNING
    planned = Decision.objects.filter(status=DecisionStatus.PLANNED).count()
    assert planned == (0 if point == "after-decide" else 3)
    assert len(running_pods(sc)) == (3 if point == "after-apply" else 0)

    # The next cycle: on a fresh worker once, in this process otherwise (the same service the
    # task runs; it keeps the fault tests short).
    if point == "after-decide":
        celery_harness.start_worker(name="next")
        celery_harness.send("scheduling.run_cycle", sc.shard.pk, "next")
        wait_for(lambda: SchedulingCycle.objects.filter(trigger="next", status=CycleStatus.SUCCEEDED).exists(),
                 60, "the next cycle")
    else:
        assert not cycle.run_and_record_cycle(sc.shard, trigger="next").skipped

    doomed.refresh_from_db()
    assert doomed.status == CycleStatus.FAILED
    assert "interrupted" in doomed.error
    assert len(running_pods(sc)) == 3
    assert_consistent(sc)
    if point == "after-apply":
        # The cluster had taken the binds: they are confirmed, not repeated.
        assert Decision.objects.filter(cycle=doomed, status=DecisionStatus.APPLIED).count() == 3
        assert SchedulingCycle.objects.get(trigger="next").binds == 0
    if point == "after-record":
        assert Decision.objects.filter(cycle=doomed, status=DecisionStatus.FAILED).count() == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_redis(port: int, tmp) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    import redis

    client = redis.Redis(port=port)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False

    wait_for(up, 20, "redis-server to answer")
    return proc


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to restart a private Redis")
def test_redis_restarted_during_a_cycle(celery_harness, tmp_path):
    port = _free_port()
    redis_proc = _start_redis(port, tmp_path)
    try:
        celery_harness.broker_url = f"redis://127.0.0.1:{port}/0"
        sc = small_cluster(nodes=1)
        submit(sc, "team-a", "j", pods=2, gpus_per_pod=1)
        worker = celery_harness.start_worker(pause_at="after-decide")
        celery_harness.send("scheduling.run_cycle", sc.shard.pk, "during")
        worker.wait_paused()

        redis_proc.terminate()
        redis_proc.wait(timeout=10)
        redis_proc = _start_redis(port, tmp_path)
        worker.resume()

        # The cycle itself needs only Postgres: it finishes and records everything.
        wait_for(lambda: SchedulingCycle.objects.filter(trigger="during", status=CycleStatus.SUCCEEDED).exists(),
                 60, "the cycle to finish after the restart")
        assert len(running_pods(sc)) == 2
        # Work goes on once the broker is back. kombu 5.7 may end the worker here (restoring the
        # unacked message on the dead channel raises) — then its supervisor (Kubernetes, make
        # run) starts it again, as this test does; otherwise the same worker reconnects.
        wait_for(lambda: worker.proc.poll() is not None or "Connected to redis" in worker.output().split(
            "Connection to broker lost")[-1], 30, "the worker to reconnect or exit")
        if worker.proc.poll() is not None:
            worker = celery_harness.start_worker(name="restarted")
        submit(sc, "team-b", "later", pods=1)
        celery_harness.send("scheduling.run_cycle", sc.shard.pk, "after")
        wait_for(lambda: SchedulingCycle.objects.filter(trigger="after", status=CycleStatus.SUCCEEDED).exists(),
                 60, f"a cycle after the broker came back\n{worker.output()[-2000:]}")
        assert len(running_pods(sc)) == 3
        assert_consistent(sc)
    finally:
        redis_proc.terminate()
        redis_proc.wait(timeout=10)


def _readiness_in_a_fresh_process() -> dict:
    env = dict(os.environ, DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="kaiweb.settings")
    code = ("import django, json; django.setup(); from kaiweb.core import readiness; "
            "print(json.dumps(readiness.check_database()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _maintenance_connection():
    """A connection to the server's `postgres` database (a database cannot lock itself out)."""
    import psycopg

    s = connection.settings_dict
    return psycopg.connect(host=s.get("HOST") or "127.0.0.1", port=s.get("PORT") or 5432,
                           user=s.get("USER") or "postgres", password=s.get("PASSWORD") or None,
                           dbname="postgres", autocommit=True)


def test_postgres_unavailable_during_a_cycle(celery_harness):
    sc = small_cluster(nodes=1)
    submit(sc, "team-a", "j", pods=2, gpus_per_pod=1)
    worker = celery_harness.start_worker(pause_at="after-decide")
    celery_harness.send("scheduling.run_cycle", sc.shard.pk, "cut-off")
    worker.wait_paused()
    name = connection.settings_dict["NAME"]
    admin = _maintenance_connection()
    # No new connections, and the worker's are cut: the database is gone for that worker.
    admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
    with connection.cursor() as cursor:
        cut_other_connections(cursor)
    try:
        assert _readiness_in_a_fresh_process() == {"ok": False, "detail": "database unreachable"}
        worker.resume()
        wait_for(lambda: "OperationalError" in worker.output(), 60, "the worker to fail on the database")
    finally:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        admin.close()

    assert _readiness_in_a_fresh_process()["ok"]
    stuck = SchedulingCycle.objects.get(trigger="cut-off")
    # It could not record its failure while the database was away; a worker slowed down may still
    # do so once the database is back (the test cannot hold the database away for ever).
    assert stuck.status in (CycleStatus.RUNNING, CycleStatus.FAILED)
    recorded_by_itself = stuck.status == CycleStatus.FAILED
    assert not Decision.objects.exists()
    assert not Pod.objects.filter(state=PodState.RUNNING).exists()

    wait_for(lambda: not locks.is_locked("scheduling-cycle", str(sc.shard.pk)), 30, "the cut-off worker's lock to go")
    outcome = cycle.run_and_record_cycle(sc.shard, trigger="recovered", advance=False)

    stuck.refresh_from_db()
    assert stuck.status == CycleStatus.FAILED
    assert recorded_by_itself or "interrupted" in stuck.error
    assert outcome.binds == 2
    assert_consistent(sc)
