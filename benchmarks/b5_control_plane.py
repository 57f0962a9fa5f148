"""B5 — the control plane around the engine (BENCHMARKS.md): one JSON object on stdout.

A fresh database (a `kaiweb_b5` Postgres database when DATABASE_URL points at Postgres, else a
temporary SQLite file) gets the demo queue tree, a simulated cluster of `--nodes` × 8 GPUs and
`--workloads` pending workloads. Then `--cycles` scheduling cycles run end to end (observe →
snapshot → engine → record → apply), through a real Celery worker against Redis when `--worker`
is given (the default when Postgres and Redis are both reachable), otherwise in this process
(the same service the task calls). One extra cycle runs in-process to count its queries.
Finally `--clients` concurrent clients call the queue-tree and workloads endpoints for
`--api-seconds` against a web server started on the same database (after 3 s of unmeasured calls
that open each server thread's database connection): gunicorn with the web Deployment's settings
(`deploy/gunicorn.conf.py`), 2 workers of 8 threads, without an access log.

With `--saturated`, the workloads run for days (none finishes while it is measured) and ask for
more than twice the cluster's GPUs; warm-up cycles run in this process until a cycle binds nothing
(every GPU busy, every queue at its share, a deep backlog), and only the cycles after that are
measured: the steady state of a busy cluster, where a cycle should cost what changed.

Quick run: `python benchmarks/b5_control_plane.py --nodes 50 --workloads 400 --cycles 3 --api-seconds 5`.
Issue sizes: `--nodes 2000 --workloads 20000 --saturated`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("observe", "snapshot", "engine", "record", "apply")
WARM_UP_SECONDS = 3.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return round(ordered[k], 2)


def postgres_admin() -> Any:
    """An autocommit connection to the `postgres` database of DATABASE_URL's server."""
    import psycopg

    parts = urlparse(os.environ.get("DATABASE_URL", ""))
    return psycopg.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 5432,
                           user=parts.username or "postgres", password=parts.password, dbname="postgres",
                           autocommit=True)


def recreate_database(name: str, template: str | None = None) -> str:
    """Drop the Postgres database `name` (ending its sessions) and create it empty, or as a copy of
    `template`; returns its URL on DATABASE_URL's server."""
    admin = postgres_admin()
    try:
        for db in (name, template):
            if db:  # a template being copied must have no sessions either
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                              "AND backend_type = 'client backend'", (db,))
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    finally:
        admin.close()
    return urlunparse(urlparse(os.environ["DATABASE_URL"])._replace(path=f"/{name}"))


def drop_database(name: str) -> None:
    """Drop the Postgres database `name`, ending its sessions first."""
    admin = postgres_admin()
    try:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                      "AND backend_type = 'client backend'", (name,))
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        admin.close()


def prepare_database(args: argparse.Namespace | None, tmp: Path, name: str = "kaiweb_b5") -> str:
    """A fresh, migrated database for the run (Postgres `name`, else SQLite under `tmp`); returns its URL."""
    base = os.environ.get("DATABASE_URL", "")
    if base.startswith("postgres"):
        url = recreate_database(name)
    else:
        url = f"sqlite:///{tmp / (name + '.sqlite3')}"
    env = dict(os.environ, DATABASE_URL=url, KAI_VAR_DIR=str(tmp / "var"))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    return url


def seed(nodes: int, workloads: int, seed_value: int, saturated: bool = False) -> int:
    """The demo tree, `nodes` simulated nodes and `workloads` pending workloads (bulk)."""
    from kaiweb.cluster.backends.simulated import SimulatedGateway
    from kaiweb.cluster.demo import seed_demo
    from kaiweb.cluster.models import Cluster
    from kaiweb.cluster.workload_generator import DEMO_ROLES, GB
    from scheduler_core.sim.traces import Job

    seed_demo(nodes=nodes, generate=False, seconds_per_cycle=30)
    gateway = SimulatedGateway(Cluster.objects.get(name="default"))
    rng = random.Random(seed_value)
    queues = [r.queue for r in DEMO_ROLES]
    jobs = []
    for i in range(workloads):
        queue = queues[i % len(queues)]
        pods = rng.choice((1, 1, 1, 2, 4))
        per_pod = rng.choice((0.5, 1.0, 1.0, 2.0)) if pods == 1 else float(rng.choice((1, 2)))
        inference = queue == "team-inference" and rng.random() < 0.5
        jobs.append(Job(
            job_id=f"b5-{i}", queue=queue, priority_class="inference" if inference else "train", num_pods=pods,
            min_member=pods, gpu_per_pod=per_pod, cpu_millis_per_pod=4000, memory_bytes_per_pod=16 * GB,
            duration=10 * 86400 if saturated else rng.randrange(600, 7200, 60),
            kind="inference" if inference else "training",
        ))
    return len(gateway.submit(jobs, namespace="b5"))


def redis_reachable(url: str) -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except Exception:  # noqa: BLE001
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def warm_up_until_full(limit: int = 40) -> int:
    """Run cycles in this process until one binds and pipelines nothing; returns how many ran."""
    from kaiweb.scheduling.cycle import run_and_record_cycle
    from kaiweb.scheduling.models import SchedulingCycle

    for n in range(1, limit + 1):
        outcome = run_and_record_cycle(trigger="b5-warm-up")
        row = SchedulingCycle.objects.get(pk=outcome.cycle_id)
        if not row.binds and not row.pipelined:
            return n
    return limit


def run_cycles_in_process(count: int) -> list[int]:
    from kaiweb.scheduling.cycle import run_and_record_cycle

    return [run_and_record_cycle(trigger="b5").cycle_id for _ in range(count)]


def run_cycles_on_worker(count: int, env: dict[str, str], tmp: Path, broker: str) -> list[int]:
    """Send `count` cycle tasks one after the other to a real worker; returns the cycle ids."""
    import redis
    from kombu import Connection

    from kaiweb.celery import app
    from kaiweb.cluster.models import SchedulingShard
    from kaiweb.scheduling.models import SchedulingCycle

    redis.Redis.from_url(broker).flushdb()
    log = (tmp / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "kaiweb", "worker", "-l", "info", "-c", "1", "-Q", "celery",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while " ready." not in (tmp / "worker.log").read_text(errors="replace"):
            if time.time() > deadline or worker.poll() is not None:
                raise RuntimeError("the Celery worker did not start; see " + str(tmp / "worker.log"))
            time.sleep(0.2)
        shard = SchedulingShard.objects.order_by("pk").first()
        ids = []
        for _ in range(count):
            before = SchedulingCycle.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
            with Connection(broker) as conn:
                app.send_task("scheduling.run_cycle", args=[shard.pk, "b5-worker"], connection=conn)
            deadline = time.time() + 600
            while True:
                row = SchedulingCycle.objects.filter(pk__gt=before).exclude(status="running").first()
                if row is not None:
                    ids.append(row.pk)
                    break
                if time.time() > deadline:
                    raise RuntimeError("a cycle on the worker took more than 10 minutes")
                time.sleep(0.05)
        return ids
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        log.close()


def count_queries_of_one_cycle() -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from kaiweb.scheduling.cycle import run_and_record_cycle

    with CaptureQueriesContext(connection) as ctx:
        run_and_record_cycle(trigger="b5-queries")
    return len(ctx.captured_queries)


def api_latency(env: dict[str, str], seconds: float, clients: int, tmp: Path) -> dict[str, object]:
    """p50/p99 of the queue tree and workloads endpoints under `clients` concurrent clients."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user, _ = get_user_model().objects.get_or_create(username="b5-admin", defaults={"is_superuser": True,
                                                                                    "is_staff": True})
    token, _ = Token.objects.get_or_create(user=user)
    port = free_port()
    log = (tmp / "web.log").open("wb")
    # the web Deployment's own settings (deploy/gunicorn.conf.py), 2 workers of 8 threads, no access log
    web_env = dict(env, KAI_BIND=f"127.0.0.1:{port}", KAI_WEB_WORKERS="2", KAI_WEB_THREADS="8", KAI_WEB_ACCESS_LOG="")
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "kaiweb.wsgi:application"],
        cwd=ROOT, env=web_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoints = {"queue_tree": "/api/v1/queues/tree/", "workloads": "/api/v1/workloads/?limit=50"}
    samples: dict[str, list[float]] = {k: [] for k in endpoints}
    statuses: dict[str, dict[int, int]] = {k: {} for k in endpoints}
    lock = threading.Lock()
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).read()
                break
            except OSError:  # refused, reset or timed out while the server starts
                if time.time() > deadline or web.poll() is not None:
                    raise RuntimeError("the web server did not start; see " + str(tmp / "web.log")) from None
                time.sleep(0.2)

        def client(n: int) -> None:
            names = list(endpoints)
            # Every client first calls for WARM_UP_SECONDS unmeasured: each server thread's first
            # request opens its database connection and each process's first one loads the views.
            start = time.time() + WARM_UP_SECONDS
            end = start + seconds
            i = n
            while time.time() < end:
                measured = time.time() >= start
                name = names[i % len(names)]
                i += 1
                req = urllib.request.Request(base + endpoints[name], headers={"Authorization": f"Token {token.key}"})
                t = time.perf_counter()
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        resp.read()
                        code = resp.status
                except urllib.error.HTTPError as exc:
                    code = exc.code
                except OSError:
                    code = 0
                elapsed = (time.perf_counter() - t) * 1000
                if not measured:
                    continue
                with lock:
                    samples[name].append(elapsed)
                    statuses[name][code] = statuses[name].get(code, 0) + 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        try:
            web.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)
        log.close()
    return {
        name: {"p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99), "requests": len(v),
               "status_codes": {str(k): c for k, c in sorted(statuses[name].items())}}
        for name, v in samples.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--workloads", type=int, default=4000)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--api-seconds", type=float, default=30)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--saturated", action="store_true",
                        help="long workloads asking ~2x the GPUs; measure only after warm-up cycles fill the cluster")
    parser.add_argument("--worker", choices=("auto", "yes", "no"), default="auto",
                        help="run the cycles on a real Celery worker (auto: when Postgres and Redis are there)")
    args = parser.parse_args()
    if args.nodes < 1 or args.workloads < 0 or args.cycles < 1:
        parser.error("--nodes and --cycles must be at least 1, --workloads not negative")

    broker = os.environ.get("KAI_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
    with tempfile.TemporaryDirectory(prefix="kaiweb-b5-") as tmpdir:
        tmp = Path(tmpdir)
        url = prepare_database(args, tmp)
        env = dict(os.environ, DATABASE_URL=url, KAI_VAR_DIR=str(tmp / "var"), CELERY_BROKER_URL=broker,
                   REDIS_URL=broker, DJANGO_SETTINGS_MODULE="kaiweb.settings", DJANGO_DEBUG="false",
                   DJANGO_SECRET_KEY="b5-benchmark-only", DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost")
        os.environ.update(DATABASE_URL=url, KAI_VAR_DIR=str(tmp / "var"), DJANGO_SETTINGS_MODULE="kaiweb.settings",
                          CELERY_BROKER_URL=broker)
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from kaiweb.scheduling.models import SchedulingCycle

        t = time.perf_counter()
        submitted = seed(args.nodes, args.workloads, args.seed, saturated=args.saturated)
        seed_seconds = time.perf_counter() - t
        warm_up = warm_up_until_full() if args.saturated else 0
        use_worker = args.worker == "yes" or (args.worker == "auto" and url.startswith("postgres")
                                              and redis_reachable(broker))
        if use_worker:
            ids = run_cycles_on_worker(args.cycles, env, tmp, broker)
        else:
            ids = run_cycles_in_process(args.cycles)
        queries = count_queries_of_one_cycle()
        rows = list(SchedulingCycle.objects.filter(pk__in=ids).order_by("pk"))
        failed = [r.pk for r in rows if r.status != "succeeded"]
        totals = [(r.duration_seconds or 0) * 1000 for r in rows]
        phases = {p: [float((r.phase_durations or {}).get(p, 0)) * 1000 for r in rows] for p in PHASES}
        api = api_latency(env, args.api_seconds, args.clients, tmp) if args.api_seconds > 0 else {}
        p50 = {p: percentile(v, 50) for p, v in phases.items()}
        out = {
            "benchmark": "B5",
            "database": "postgres" if url.startswith("postgres") else "sqlite",
            "cycles_on": "celery-worker+redis" if use_worker else "in-process",
            "nodes": args.nodes, "gpus": args.nodes * 8, "workloads": submitted, "seed_seconds": round(seed_seconds, 2),
            "saturated": args.saturated, "warm_up_cycles": warm_up,
            "cycles": len(rows), "failed_cycles": failed,
            "binds_per_cycle": [r.binds for r in rows], "evictions_per_cycle": [r.evictions for r in rows],
            "cycle_total_ms_p50": percentile(totals, 50),
            "cycle_total_ms_first": round(totals[0], 2) if totals else None,
            "phase_ms_p50": p50,
            "record_le_engine": (p50["record"] or 0) <= (p50["engine"] or 0),
            "queries_per_cycle": queries,
            "api": api,
            "api_p99_le_200ms": all((v.get("p99_ms") or 1e9) <= 200 for v in api.values()) if api else None,
        }
        print(json.dumps(out))
        if url.startswith("postgres"):
            from django.db import connections

            connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
