"""B7 — KAI's scale suite on KWOK nodes, through the product as its chart runs it: one JSON object.

The scenarios are those of ``../shared/corpus/kai-scale/README.md`` (KAI's ``test/e2e/scale``,
restated), played at any ``--nodes N``. For each scenario:

* the cluster: a fresh `LocalKube` (real etcd + kube-apiserver + controller-manager) with KWOK and N
  fake GPU nodes (8 ``nvidia.com/gpu``, 32 CPU, 256Gi, 110 pods; ``deploy/kube/kwok-stages.yaml``
  makes bound pods Running);
* the product, as separate processes on a scratch Postgres database (``kaiweb_b7_<pid>``, copied from a
  migrated template, dropped at the end) and Redis: ``manage.py watch_cluster`` all along, and the
  scheduler, i.e. a Celery worker for the cycles (``-Q celery --concurrency 1``), one for the estimates
  (``-Q whatif``) and beat, with
  ``KAI_CLUSTER_BACKEND=kubernetes`` and ``KUBECONFIG`` pointing at the LocalKube;
* the queues (Queue CRDs), namespaces and pods as the scenario says. "D" scenarios create them with
  the scheduler stopped and start the timer just before starting it; the timer ends at the latest
  ``PodScheduled`` transition among the counted pods.

The invariants are checked every ``--sample-seconds`` while waiting and once at the end with
``kaiweb.cluster.invariants.check_cluster`` (node over allocatable, a shared GPU over 1.0, a pod
bound twice, a gang below minMember), and every ``SchedulingCycle`` row must have ended
``succeeded``. A scenario passes when its own assertions hold and nothing was violated.

``--peer`` also plays B1 with ``schedulerName: default-scheduler`` on kube-scheduler (same Kubernetes
version, same machine, a fresh LocalKube) and adds it to the results as ``B1/kube-scheduler``.

The scenarios live in ``benchmarks/kai_scale/`` (one module per family, on ``harness.py``); this
file registers them and plays them. So far: B1, B2, B3 (``fills``), B4–B10, B12 (``reclaims``),
T1, T2, T3, T4 (``topology``), B11, B13, B14 (``mixed``; B11's pods end by
``deploy/kube/kwok-stages-complete.yaml``, which KWOK loads besides its stages).

    python benchmarks/b7_scale.py --nodes 20 --scenarios B1,B2,B3,B4,B5 --json
    python benchmarks/b7_scale.py --nodes 500 --scenarios B1 --peer

Needs ``make kube`` (kube-apiserver, etcd, controller-manager, kwok; kube-scheduler for ``--peer``),
DATABASE_URL on Postgres and Redis (REDIS_URL; database 13 of that server is used and flushed, so
run one at a time per Redis server).
Exits 0 when every scenario passed, 1 when one failed, 2 when it could not run at all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from b5_control_plane import drop_database, prepare_database, recreate_database, redis_reachable  # noqa: E402

from devkube.localkube import (  # noqa: E402
    NO_KWOK,
    NO_SCHEDULER,
    LocalKube,
    LocalKubeError,
    find_binaries,
    find_tool,
)

CRDS = ROOT / "deploy" / "kubernetes" / "crds.yaml"
# One pair per run, so two runs on one Postgres server do not drop each other's (both are dropped at the end).
SCRATCH_DB, TEMPLATE_DB = f"kaiweb_b7_{os.getpid()}", f"kaiweb_b7_{os.getpid()}_template"
# The Redis database the product's broker uses here (flushed): one run at a time per database.
BROKER_DB = int(os.environ.get("KAI_B7_BROKER_DB", "13"))
MAX_VIOLATIONS_LISTED = 20

from kai_scale import fills, mixed, reclaims, topology  # noqa: E402
from kai_scale.harness import (  # noqa: E402
    GPUS_PER_NODE,
    KAI_SCHEDULER,
    Api,
    Product,
    Run,
    mirror_counts,
    no_cycle_running,
)

# Every scenario, by key: (title, body). Each family's module registers its own.
SCENARIOS: dict[str, tuple[str, Callable[[Run, str], dict[str, Any]]]] = {**fills.SCENARIOS, **reclaims.SCENARIOS,
                                                                     **topology.SCENARIOS, **mixed.SCENARIOS}


# ------------------------------------------------------------------------------ the whole run

@dataclass
class Settings:
    nodes: int
    sample_seconds: float
    timeout: float
    cycle_seconds: float | None
    work: Path
    broker: str
    keep_logs: bool


def _product_env(settings: Settings, kube: LocalKube, database_url: str, logs: Path) -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=database_url, REDIS_URL=settings.broker, CELERY_BROKER_URL=settings.broker,
               KAI_CLUSTER_BACKEND="kubernetes", KUBECONFIG=str(kube.kubeconfig), KAI_KUBERNETES_HOST="",
               KAI_VAR_DIR=str(logs / "var"), DJANGO_SETTINGS_MODULE="kaiweb.settings", DJANGO_DEBUG="false",
               DJANGO_SECRET_KEY="b7-benchmark-only", DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
               PYTHONUNBUFFERED="1",
               # KAI's binder waits 40 s for a reservation pod's device; KWOK's stage reports it (B14)
               KAI_RESERVATION_ALLOCATION_TIMEOUT="40")
    if settings.cycle_seconds:
        env["KAI_CYCLE_SECONDS"] = str(settings.cycle_seconds)
    return env


CYCLE_END_SECONDS = 120.0


def _cycles_report() -> tuple[dict[str, Any], list[str]]:
    """The scratch database's cycles: counts, binds, and every one that did not end `succeeded`."""
    from django.db import connections

    from kaiweb.scheduling.choices import CycleStatus
    from kaiweb.scheduling.models import SchedulingCycle

    # A cycle still running when the pods are all scheduled (it writes status back after its binds)
    # is given time to end before it is judged.
    deadline = time.monotonic() + CYCLE_END_SECONDS
    try:
        while True:
            rows = list(SchedulingCycle.objects.order_by("pk").values(
                "pk", "status", "binds", "evictions", "error", "duration_seconds", "jobs_considered", "pipelined",
                "pending", "phase_durations", "write_back"))
            if all(r["status"] != CycleStatus.RUNNING for r in rows) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        connections.close_all()
    bad = [f"cycle {r['pk']} ended {r['status']}: {(r['error'] or '').strip()[:200]}"
           for r in rows if r["status"] != CycleStatus.SUCCEEDED]
    durations = sorted(r["duration_seconds"] or 0.0 for r in rows)
    slowest = max(rows, key=lambda r: r["duration_seconds"] or 0.0, default=None)
    return {"cycles": len(rows), "binds": sum(r["binds"] for r in rows),
            "evictions": sum(r["evictions"] for r in rows),
            "cycle_seconds_max": round(durations[-1], 2) if durations else None,
            # where the slowest cycle spent its time, and what its write-back did and left for later
            "slowest_cycle": None if slowest is None else {
                "cycle": slowest["pk"], "binds": slowest["binds"],
                "phases": {k: round(float(v or 0), 2) for k, v in (slowest["phase_durations"] or {}).items()
                           if float(v or 0) >= 0.05},
                "write_back": slowest["write_back"] or {}},
            "binds_per_cycle_max": max((r["binds"] for r in rows), default=0),
            "last_cycles": _last_cycles(rows)}, bad


def _unscheduled_sample(kube: LocalKube, limit: int = 3) -> list[str]:
    """A few pods left unbound at the end, with what the scheduler said on them (PodScheduled's message)."""
    api = Api(kube, pool=2)
    try:
        out = []
        for pod in api.pods():
            if (pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"].startswith("background-"):
                continue
            said = [f"{c.get('reason')}: {c.get('message')}" for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"]
            out.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: {'; '.join(said) or 'no condition'}"[:400])
            if len(out) >= limit:
                break
        return out
    finally:
        api.close()


def _last_cycles(rows: list[dict[str, Any]], limit: int = 4) -> list[str]:
    return [f"cycle {r['pk']} {r['status']}: considered {r['jobs_considered']}, binds {r['binds']}, "
            f"pipelined {r['pipelined']}, evictions {r['evictions']}, pending {r['pending']}" for r in rows[-limit:]]


def play(settings: Settings, key: str, *, peer: bool, kube: LocalKube) -> dict[str, Any]:
    """One scenario on `kube` (reset to empty first); returns its result object."""
    title, body = SCENARIOS[key]
    test_name = f"{key}/kube-scheduler" if peer else key
    logs = settings.work / test_name.replace("/", "-")
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    kube.reset()
    kube.install_crds(CRDS)
    kube.create_kwok_nodes(settings.nodes, timeout=max(180.0, settings.nodes * 0.5))
    nodes_seconds = time.monotonic() - started
    api = Api(kube)
    product = None
    if not peer:
        database_url = recreate_database(SCRATCH_DB, TEMPLATE_DB)
        _flush_broker(settings.broker)
        product = Product(_product_env(settings, kube, database_url, logs), logs)
        product.start_watcher()
    run = Run(test_name, settings.nodes, kube, api, product, settings.sample_seconds, settings.timeout,
              evidence=logs if settings.keep_logs else None,
              cycle_seconds=settings.cycle_seconds or float(os.environ.get("KAI_CYCLE_SECONDS") or 5.0))
    error = None
    details: dict[str, Any] = {}
    try:
        details = body(run, "default-scheduler" if peer else KAI_SCHEDULER)
    except Exception as exc:  # noqa: BLE001 - one scenario failing does not end the run
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if product is not None:
            # A cycle writes status back after its binds: no new one is dispatched, and the one
            # running is let end before the worker stops, so no cycle is cut short.
            product.stop_beat()
            _flush_broker(settings.broker)
            no_cycle_running(timeout=CYCLE_END_SECONDS)
            product.stop()
        api.close()
    with contextlib.suppress(Exception):  # diagnostics only
        details["unscheduled_sample"] = _unscheduled_sample(kube)
    bad_cycles: list[str] = []
    if not peer:
        cycles, bad_cycles = _cycles_report()
        details.update(cycles)
        details.update(mirror_counts())
    # Each with how many samples saw it and when first (seconds into the scenario, set-up included).
    violations = [f"{v} (in {n} of {run.samples} samples, first at {run.first_seen[v]}s)"
                  for v, n in sorted(run.violations.items())] + bad_cycles
    details.update({
        "nodes": settings.nodes, "gpus": settings.nodes * GPUS_PER_NODE,
        "scheduler": "kube-scheduler" if peer else "kaiweb (watch_cluster + celery worker + beat)",
        "invariant_violations": len(violations),
        "violations": violations[:MAX_VIOLATIONS_LISTED],
        "invariant_samples": run.samples,
        "nodes_ready_seconds": round(nodes_seconds, 1), **run.notes,
    })
    details.setdefault("seconds", None)
    details.setdefault("pods", 0)
    if run.checker_errors:
        details["checker_errors"] = run.checker_errors[:5]
    if error:
        details["error"] = error
    if not settings.keep_logs:
        details["logs"] = None
    else:
        details["logs"] = str(logs)
    checks = details.get("checks") or {}
    passed = error is None and not violations and bool(checks) and all(checks.values())
    details["description"] = title
    return {"test_name": test_name, "status": "passed" if passed else "failed", "details": details}


def _progress(result: dict[str, Any]) -> dict[str, Any]:
    """Each scenario's result object on stderr as it ends (a run of hours keeps what it measured if cut)."""
    print(f"b7: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def _flush_broker(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def _broker_url() -> str:
    base = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    return urlunparse(urlparse(base)._replace(path=f"/{BROKER_DB}"))


@contextlib.contextmanager
def _scratch_databases(work: Path, keep: bool) -> Iterator[None]:
    """The migrated template every scenario's database is copied from; both dropped at the end,
    but with ``keep`` (``--keep-logs``) the last scenario's database stays for a post-mortem."""
    prepare_database(None, work, name=TEMPLATE_DB)
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        for name in (TEMPLATE_DB,) if keep else (SCRATCH_DB, TEMPLATE_DB):
            with contextlib.suppress(Exception):
                drop_database(name)
        if keep:
            print(f"b7: the last scenario's database is kept as {SCRATCH_DB}", file=sys.stderr)


def _print_table(out: dict[str, Any]) -> None:
    print(f"B7 on {out['nodes']} KWOK nodes ({out['nodes'] * GPUS_PER_NODE} GPUs)")
    for result in out["results"]:
        d = result["details"]
        seconds = "-" if d.get("seconds") is None else f"{d['seconds']:.1f}s"
        print(f"  {result['test_name']:<18} {result['status']:<7} {seconds:>8}  pods {d.get('scheduled', '?')}/"
              f"{d.get('pods')}  violations {d['invariant_violations']}"
              + (f"  cycles {d['cycles']} (max {d.get('binds_per_cycle_max')} binds)" if "cycles" in d else "")
              + (f"  error: {d['error']}" if d.get("error") else ""))
        for violation in d.get("violations") or []:
            print(f"      ! {violation}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500, help="KWOK nodes, 8 GPUs each (KAI's default: 500)")
    parser.add_argument("--scenarios", default="B1", help=f"comma-separated, of {','.join(SCENARIOS)}")
    parser.add_argument("--json", action="store_true", help="print one JSON object (else a table)")
    parser.add_argument("--peer", action="store_true",
                        help="also B1 on kube-scheduler (schedulerName: default-scheduler), on a fresh cluster")
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="invariant check period while waiting")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a scenario may wait for its pods")
    parser.add_argument("--cycle-seconds", type=float, default=None,
                        help="KAI_CYCLE_SECONDS for the product (default: the product's own default)")
    parser.add_argument("--keep-logs", metavar="DIR", default=None,
                        help="keep every process's log under DIR (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    keys = [k.strip().upper() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown or not keys:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")

    problem = _preflight(args.peer)
    if problem:
        print(json.dumps({"benchmark": "B7", "error": problem}) if args.json else f"b7: {problem}",
              file=sys.stdout if args.json else sys.stderr)
        return 2
    bin_dir = find_binaries()
    assert bin_dir is not None

    with contextlib.ExitStack() as stack:
        if args.keep_logs:
            work = Path(args.keep_logs).resolve()
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kaiweb-b7-")))
        settings = Settings(args.nodes, args.sample_seconds, args.timeout, args.cycle_seconds, work,
                            _broker_url(), bool(args.keep_logs))
        stack.enter_context(_scratch_databases(work, bool(args.keep_logs)))
        # This process reads the scratch database (the cycles) with the product's own models.
        os.environ.update(DATABASE_URL=urlunparse(urlparse(os.environ["DATABASE_URL"])._replace(path=f"/{SCRATCH_DB}")),
                          DJANGO_SETTINGS_MODULE="kaiweb.settings", KAI_VAR_DIR=str(work / "var"))
        import django

        django.setup()
        results = []
        kube = stack.enter_context(LocalKube(bin_dir, kwok=True, workdir=work / "kube",
                                             extra_kwok_stages=[mixed.COMPLETION_STAGES]))
        for key in keys:
            results.append(_progress(play(settings, key, peer=False, kube=kube)))
        kube.stop()
        if args.peer:
            with LocalKube(bin_dir, kwok=True, workdir=work / "kube-peer") as peer_kube:
                results.append(_progress(play(settings, "B1", peer=True, kube=peer_kube)))
        out = {"benchmark": "B7", "nodes": args.nodes, "gpus": args.nodes * GPUS_PER_NODE,
               "kubernetes": kube.version, "results": results}
        if args.json:
            print(json.dumps(out))
        else:
            _print_table(out)
    return 0 if all(r["status"] == "passed" for r in results) else 1


def _preflight(peer: bool) -> str | None:
    bin_dir = find_binaries()
    if bin_dir is None:
        return "no kube-apiserver/etcd binaries: run `make kube`"
    if find_tool("kwok", bin_dir) is None:
        return NO_KWOK
    if peer and find_tool("kube-scheduler", bin_dir) is None:
        return NO_SCHEDULER
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return "DATABASE_URL must point at Postgres (the product's processes share the scratch database)"
    if not redis_reachable(_broker_url()):
        return f"Redis is not reachable at {_broker_url()} (REDIS_URL's server, database {BROKER_DB})"
    return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LocalKubeError as exc:
        print(f"b7: the local cluster failed: {exc}", file=sys.stderr)
        sys.exit(2)
