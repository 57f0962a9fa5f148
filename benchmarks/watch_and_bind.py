"""Throughput of the Kubernetes path around the engine, as a binder has it: one JSON object on stdout.

On a real kube-apiserver (`devkube.localkube.LocalKube`: etcd + kube-apiserver on loopback,
from `make kube`) and a scratch database (a `kaiweb_b8` Postgres database when DATABASE_URL points
at Postgres, else a temporary SQLite file):

1. **Pods reaching the mirror.** The watcher runs as `watch_cluster` runs it (every kind, the mirror
   written by `mirror.apply_event` under the watcher's one callback lock) while a separate process
   creates ``--pods`` bare pods (``schedulerName: kai-scheduler``, the queue label) in a namespace,
   ``--create-threads`` at a time. Measured: from the first create until every pod is in the mirror
   (a Pod row), and until every pod sits in its PodGroup's workload there (grouped). Two modes:
   ``before``, the callback as it was (`controller.group_pods` on each new pod inside the callback:
   a namespace read, a full PodGroup list, the PodGroup create and the pod patch, under the lock);
   ``after``, `watch_cluster`'s callback (`make_callback`: the pod is handed to the `LiveGrouper`'s
   workers) with each event written to the mirror at once; ``writer``, as `watch_cluster` runs:
   the grouper, and the mirror written by `mirror.EventWriter` on its own thread, many events per
   transaction. Each mode runs on an emptied cluster; ``--mode-seconds`` caps a mode. Per event
   type, the time `mirror.apply_event` took (for ``writer``, only the events it writes one by one).
2. **Binds per second of `apply_decisions`.** ``--binds`` pending pods, bound by `apply_decisions`
   through the Kubernetes gateway one after another as it did before the bulk path (each pod read,
   then its Binding and its event: ``serial_read_first``), one after another now (the Binding's uid
   is the precondition on Kubernetes 1.27 and later: ``serial``), and through the bulk path
   (`KubernetesGateway.apply`, ``--concurrency`` calls at once: ``concurrent``), each on fresh pods;
   ``speedup`` is the first against the last.

Quick run: `python benchmarks/watch_and_bind.py --pods 300 --binds 200 --modes after`.
Issue sizes: `python benchmarks/watch_and_bind.py --pods 2000 --binds 1000`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CRDS = ROOT / "deploy" / "kubernetes" / "crds.yaml"
QUEUE_LABEL = "kai.scheduler/queue"
SCRATCH = os.environ.get("KAIWEB_BENCH_DB", "kaiweb_b8")  # the scratch database (Postgres)


def prepare_database(tmp: Path) -> str:
    """A fresh, migrated database for the run; returns its URL."""
    base = os.environ.get("DATABASE_URL", "")
    if base.startswith("postgres"):
        import psycopg

        parts = urlparse(base)
        url = urlunparse(parts._replace(path=f"/{SCRATCH}"))
        admin = psycopg.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 5432,
                                user=parts.username or "postgres", password=parts.password, dbname="postgres",
                                autocommit=True)
        admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{SCRATCH}' "
                      "AND backend_type = 'client backend'")
        admin.execute(f"DROP DATABASE IF EXISTS {SCRATCH}")
        admin.execute(f"CREATE DATABASE {SCRATCH}")
        admin.close()
    else:
        url = f"sqlite:///{tmp / 'b8.sqlite3'}"
    env = dict(os.environ, DATABASE_URL=url, KAI_VAR_DIR=str(tmp / "var"))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    return url


def pod_body(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "team-a"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}}


def create_pods(kubeconfig: str, namespace: str, count: int, threads: int, prefix: str = "p") -> None:
    """Create ``count`` pods with ``threads`` concurrent clients (run in its own process)."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = threads + 4
    api = client.CoreV1Api(client.ApiClient(configuration))

    def one(i: int) -> None:
        api.create_namespaced_pod(namespace, pod_body(f"{prefix}{i:05d}", namespace), _preload_content=False)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))


def _ensure_namespace(core: Any, name: str) -> None:
    from kubernetes.client.rest import ApiException

    try:
        core.create_namespace({"metadata": {"name": name, "labels": {QUEUE_LABEL: "team-a"}}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def _reset_cluster(kube: Any) -> Any:
    """Empty the cluster (a fresh etcd), our CRDs and the two queues; returns a CoreV1Api."""
    from kubernetes import client

    kube.reset()
    kube.install_crds(CRDS)
    custom = client.CustomObjectsApi(kube.api_client())
    resources = {"gpu": {"quota": 4000, "limit": -1, "overQuotaWeight": 1},
                 "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                 "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}
    for name, parent in (("dept", None), ("team-a", "dept")):
        spec: dict[str, Any] = {"priority": 100, "resources": resources}
        if parent:
            spec["parentQueue"] = parent
        custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues",
                                            {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                             "metadata": {"name": name}, "spec": spec})
    return client.CoreV1Api(kube.api_client())


def _wait(predicate: Any, seconds: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def run_mirror_mode(kube: Any, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Pods created while the watcher runs: how fast they reach the mirror (see the module docstring)."""
    from django.db import close_old_connections
    from kubernetes import client

    from kaiweb.cluster import mirror
    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
    from kaiweb.cluster.backends.kubernetes.transport import ensure_connection_pool
    from kaiweb.cluster.management.commands.watch_cluster import make_callback
    from kaiweb.cluster.mirror import IMPLICIT_GROUP_LABEL
    from kaiweb.cluster.podgrouper import controller
    from kaiweb.cluster.watch import KINDS, ClusterWatcher, WatchEvent
    from kaiweb.queues.models import Queue
    from kaiweb.workloads.models import Pod

    core = _reset_cluster(kube)
    namespace = f"bench-{mode}"
    _ensure_namespace(core, namespace)
    cluster = mirror.kubernetes_cluster()
    configuration = kube.configuration()
    ensure_connection_pool(configuration, len(KINDS) + args.grouper_workers)
    gateway = KubernetesGateway(client.ApiClient(configuration), scheduler_name="kai-scheduler")
    counts: dict[str, int] = {}
    grouper = None

    def inline(event: WatchEvent) -> None:
        # watch_cluster's callback before the live grouper: the pod-grouper inside the callback.
        counts[event.type] = counts.get(event.type, 0) + 1
        close_old_connections()
        if controller.wants_grouping(event):
            controller.group_pods(gateway, pods=[dict(event.raw)])
        mirror.apply_event(event, cluster, gateway)

    callback: Callable[[WatchEvent], None] = inline
    writer = None
    if mode != "before":
        grouper = controller.LiveGrouper(gateway, workers=args.grouper_workers).start()
        if mode == "writer":
            writer = mirror.EventWriter(cluster, gateway, before=close_old_connections)
            writer.start()
        callback = make_callback(gateway, cluster, grouper, counts, writer=writer)
    # Where the callback's time goes: the mirror's writes, by kind and event type.
    spent: dict[str, list[float]] = {}
    real_apply = mirror.apply_event

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def timed_apply(event: Any, *a: Any, **kw: Any) -> None:
        t, c = time.perf_counter(), time.thread_time()
        connection.queries_log.clear()  # the log keeps 9,000 queries: counted per event
        with CaptureQueriesContext(connection) as queries:
            try:
                real_apply(event, *a, **kw)
            finally:
                entry = spent.setdefault(f"{event.kind} {event.type}", [0, 0.0, 0.0, 0])
                entry[0] += 1
                entry[1] += time.perf_counter() - t
                entry[2] += time.thread_time() - c
                entry[3] += len(queries)

    patched = mock.patch.object(mirror, "apply_event", timed_apply)
    patched.start()
    watcher = ClusterWatcher(gateway, callback, timeout_seconds=300)
    thread = threading.Thread(target=watcher.run, name="bench-watch", daemon=True)
    thread.start()
    if not _wait(lambda: Queue.objects.filter(name="team-a").exists(), 60):
        raise RuntimeError("the Queue CRDs did not reach the database")

    pods = Pod.objects.filter(workload__cluster=cluster, workload__namespace=namespace)
    started = time.monotonic()
    creator = subprocess.Popen([sys.executable, __file__, "--create-pods", str(args.pods), "--namespace", namespace,
                                "--kubeconfig", str(kube.kubeconfig), "--create-threads", str(args.create_threads)],
                               cwd=ROOT)
    created_at = mirrored_at = grouped_at = None
    deadline = started + args.mode_seconds
    samples: list[tuple[float, int, int]] = []
    while time.monotonic() < deadline:
        if created_at is None and creator.poll() is not None:
            created_at = time.monotonic()
        in_mirror = pods.count()
        grouped = pods.exclude(workload__labels__has_key=IMPLICIT_GROUP_LABEL).count()
        now = time.monotonic()
        samples.append((round(now - started, 2), in_mirror, grouped))
        if mirrored_at is None and in_mirror >= args.pods:
            mirrored_at = now
        if grouped >= args.pods:
            grouped_at = now
            break
        time.sleep(0.2)
    if creator.poll() is None:
        creator.wait(60)
    created_at = created_at or time.monotonic()
    in_mirror = pods.count()
    grouped = pods.exclude(workload__labels__has_key=IMPLICIT_GROUP_LABEL).count()
    watcher.stop()
    thread.join(30)
    if grouper is not None:
        grouper.stop()
    if writer is not None:
        writer.stop()
        writer.join(10)
    patched.stop()
    end = time.monotonic()

    def rate(n: int, at: float | None) -> float:
        return round(n / ((at or end) - started), 1)

    return {
        "mode": mode, "pods": args.pods, "create_seconds": round(created_at - started, 2),
        "mirrored": in_mirror, "grouped": grouped,
        "seconds_to_mirror_all": None if mirrored_at is None else round(mirrored_at - started, 2),
        "seconds_to_group_all": None if grouped_at is None else round(grouped_at - started, 2),
        "mirror_pods_per_second": rate(in_mirror, mirrored_at),
        "grouped_pods_per_second": rate(grouped, grouped_at),
        "capped": grouped_at is None,
        "events": counts, "grouper": dict(grouper.counts) if grouper is not None else None,
        # Per event: wall ms, ms of this thread's CPU, database queries.
        "mirror_apply_per_event": {k: {"ms": round(v[1] * 1000 / v[0], 1), "cpu_ms": round(v[2] * 1000 / v[0], 1),
                                       "queries": round(v[3] / v[0], 1)} for k, v in sorted(spent.items()) if v[0]},
        "progress": samples[:: max(1, len(samples) // 20)],
    }


def _one_by_one_gateway() -> type:
    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
    from kaiweb.cluster.errors import Capability

    class OneByOne(KubernetesGateway):
        """The gateway without its bulk path: apply_decisions binds one action after another."""

        capabilities = KubernetesGateway.capabilities - {Capability.BULK_APPLY}

    return OneByOne


def _read_first_gateway() -> type:
    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
    from kaiweb.cluster.errors import Capability

    class ReadFirst(KubernetesGateway):
        """As the gateway bound before: one after another, each pod read before its Binding."""

        capabilities = KubernetesGateway.capabilities - {Capability.BULK_APPLY}

        def _binding_checks_uid(self) -> bool:
            return False

    return ReadFirst


def run_binds(kube: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``--binds`` binds through apply_decisions, serially and on the bulk path (fresh pods for each)."""
    from kubernetes import client

    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
    from kaiweb.cluster.backends.kubernetes.transport import ensure_connection_pool
    from kaiweb.scheduling.choices import DecisionKind
    from kaiweb.scheduling.cycle import apply_decisions
    from kaiweb.scheduling.models import Decision

    core = _reset_cluster(kube)
    kinds = {"serial_read_first": _read_first_gateway(), "serial": _one_by_one_gateway(),
             "concurrent": KubernetesGateway}
    out: dict[str, Any] = {"binds": args.binds, "concurrency": args.concurrency}
    for how, kind in kinds.items():
        namespace = f"binds-{how}".replace("_", "-")
        _ensure_namespace(core, namespace)
        create_pods(str(kube.kubeconfig), namespace, args.binds, args.create_threads)
        listed = core.list_namespaced_pod(namespace, _preload_content=False)
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in json.loads(listed.data)["items"]}
        decisions = [Decision(pk=i + 1, kind=DecisionKind.BIND, namespace=namespace, pod_name=name, pod_uid=uid,
                              node_name=f"node-{i % 100}", numbers={}, reason="allocated",
                              idempotency_key=f"b8/{namespace}/{name}")
                     for i, (name, uid) in enumerate(sorted(uids.items()))]
        configuration = kube.configuration()
        ensure_connection_pool(configuration, args.concurrency)
        gateway = kind(client.ApiClient(configuration), bind_concurrency=args.concurrency)
        t0 = time.perf_counter()
        outcomes = apply_decisions(gateway, decisions)
        seconds = time.perf_counter() - t0
        failed = sum(1 for o in outcomes.values() if isinstance(o, Exception))
        bound = sum(1 for p in json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
                    if (p.get("spec") or {}).get("nodeName"))
        scheduled = sum(1 for e in json.loads(core.list_namespaced_event(namespace, _preload_content=False).data)["items"]
                        if e.get("reason") == "Scheduled")
        out[how] = {"seconds": round(seconds, 2), "binds_per_second": round(args.binds / seconds, 1),
                    "failed": failed, "bound_in_cluster": bound, "scheduled_events": scheduled}
    out["speedup"] = round(out["serial_read_first"]["seconds"] / out["concurrent"]["seconds"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000, help="pods created while the watcher runs (per mode)")
    parser.add_argument("--binds", type=int, default=1000, help="binds through apply_decisions (each way)")
    parser.add_argument("--concurrency", type=int, default=32, help="the bulk path's concurrent calls")
    parser.add_argument("--grouper-workers", type=int, default=8, help="the live grouper's worker threads")
    parser.add_argument("--create-threads", type=int, default=16, help="concurrent pod creates")
    parser.add_argument("--modes", default="before,after,writer", help="which watcher callbacks to measure")
    parser.add_argument("--mode-seconds", type=float, default=300.0, help="at most this long per mode")
    parser.add_argument("--skip-binds", action="store_true")
    # The pod creator's own process (so its client does not share this process's interpreter lock).
    parser.add_argument("--create-pods", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default="", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.create_pods:
        create_pods(args.kubeconfig, args.namespace, args.create_pods, args.create_threads)
        return

    tmp = Path(tempfile.mkdtemp(prefix="kaiweb-b8-"))
    url = prepare_database(tmp)
    os.environ.update(DATABASE_URL=url, KAI_VAR_DIR=str(tmp / "var"), DJANGO_SETTINGS_MODULE="kaiweb.settings",
                      KAI_CLUSTER_BACKEND="kubernetes")
    import logging

    import django

    django.setup()
    logging.disable(logging.WARNING)  # one line per event would measure the log, not the watcher

    from devkube.localkube import LocalKube, find_binaries

    bin_dir = find_binaries()
    if bin_dir is None:
        print(json.dumps({"error": "no kube-apiserver/etcd binaries: run `make kube`"}))
        sys.exit(2)
    result: dict[str, Any] = {"benchmark": "watch_and_bind", "database": url.split("://")[0],
                              "cpus": os.cpu_count()}
    with LocalKube(bin_dir, controllers=None) as kube:
        result["kubernetes"] = kube.version
        result["mirror"] = [run_mirror_mode(kube, mode.strip(), args)
                            for mode in args.modes.split(",") if mode.strip()]
        if not args.skip_binds:
            result["apply"] = run_binds(kube, args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
