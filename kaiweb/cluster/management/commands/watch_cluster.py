"""``manage.py watch_cluster``: keep the database mirror of the cluster current with list + watch
(its own process; Celery never holds a watch open)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections, connection

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.transport import load_configuration
from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.podgrouper import controller
from kaiweb.cluster.watch import KINDS, ClusterWatcher, WatchEvent, log_event

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Watch nodes, pods, PodGroups and Queues of the Kubernetes cluster (list + watch, 410 → re-list) "
            "and apply every change to the database mirror the scheduling cycle reads.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="list each kind, watch one short pass, exit")
        parser.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
        parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
        parser.add_argument("--timeout-seconds", type=int, default=300,
                            help="server-side length of one watch connection (default 300)")
        parser.add_argument("--host", default=None,
                            help="API server URL (default: KAI_KUBERNETES_HOST, else in-cluster service account, else KUBECONFIG)")
        parser.add_argument("--cluster", default=None,
                            help="name of the kaiweb cluster to mirror into (default: the only Kubernetes one, "
                                 "created as 'kubernetes' if there is none)")
        parser.add_argument("--log-only", action="store_true",
                            help="only log the changes; leave the database alone")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["host"] is None and settings.KAI_CLUSTER_BACKEND != "kubernetes":
            raise CommandError("watch_cluster needs KAI_CLUSTER_BACKEND=kubernetes (or --host URL); "
                               f"the configured backend is {settings.KAI_CLUSTER_BACKEND!r}, which has no watch")
        if options["max_seconds"] is not None and options["max_seconds"] <= 0:
            raise CommandError("--max-seconds must be greater than 0")
        kinds = [k.strip() for k in options["kinds"].split(",") if k.strip()]
        log_only = options["log_only"]
        try:
            cluster = None if log_only else mirror.kubernetes_cluster(options["cluster"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            from kubernetes import client

            # A connection per watch stream and per pod-grouper worker (plus spare).
            configuration = load_configuration(options["host"] or getattr(settings, "KAI_KUBERNETES_HOST", "") or None,
                                               concurrency=len(kinds) + settings.KAI_GROUPER_WORKERS)
            gateway = KubernetesGateway(client.ApiClient(configuration), scheduler_name=settings.KAI_SCHEDULER_NAME)
            target = "" if cluster is None else f" into cluster {cluster.name}"
            self.stdout.write(f"watching {', '.join(kinds)} on {gateway.ping()} at {configuration.host}{target}")
            counts: dict[str, int] = {}
            grouper = None if cluster is None else controller.LiveGrouper.from_settings(gateway)
            # Watching for good, the mirror is written on a thread of its own, as many events at a time
            # as wait (`mirror.EventWriter`); --once writes each event as it comes, in this thread.
            writer = None if cluster is None or options["once"] else mirror.EventWriter(
                cluster, gateway, before=_fresh_connection)

            def echo(event: WatchEvent) -> None:
                if options["verbosity"] >= 2:
                    where = f"{event.namespace}/{event.name}" if event.namespace else event.name
                    self.stdout.write(f"{event.type} {event.kind} {where} rv={event.resource_version}")

            callback = make_callback(gateway, cluster, grouper, counts, echo, writer)
            watcher = ClusterWatcher(gateway, callback, kinds=kinds, timeout_seconds=options["timeout_seconds"])
        except (ValueError, ClusterError) as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:  # the client's config loaders raise several unrelated types
            raise CommandError(f"cannot configure the Kubernetes client: {exc}") from exc
        heartbeat = _Heartbeat(cluster, watcher.stop_event)
        if grouper is not None:
            grouper.start()
        if writer is not None:
            writer.start()
        if options["once"]:
            watcher.run_once(settle=grouper.drain if grouper is not None else None)
            heartbeat.beat()
        else:
            heartbeat.start()
            # SIGTERM (a pod being stopped) ends the watch cleanly; handlers only work in the main thread.
            in_main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGTERM, lambda *_: watcher.stop()) if in_main else None
            try:
                watcher.run(options["max_seconds"])
            except KeyboardInterrupt:
                watcher.stop()
            finally:
                if in_main:
                    signal.signal(signal.SIGTERM, previous)
                heartbeat.join()
        if grouper is not None:
            grouper.stop()
            log.info("pod-grouper: %s", grouper.counts)
        if writer is not None:
            writer.flush(timeout=30)
            writer.stop()
            writer.join(timeout=5)
        log.info("watch_cluster done: %s", counts)
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no events"
        self.stdout.write(self.style.SUCCESS(f"watch ended: {summary}"))


def make_callback(gateway: KubernetesGateway, cluster: Any, grouper: controller.LiveGrouper | None,
                  counts: dict[str, int], echo: Callable[[WatchEvent], None] | None = None,
                  writer: mirror.EventWriter | None = None) -> Callable[[WatchEvent], None]:
    """The watcher's callback: each change counted, logged and applied to the mirror of ``cluster``
    (None: only logged), by ``writer`` on its own thread when there is one, else at once. The
    pod-grouper works beside the watch: the callback only hands it the pods (no API call under the
    watcher's lock); the PodGroups and marks it writes come back as events."""

    def callback(event: WatchEvent) -> None:
        counts[event.type] = counts.get(event.type, 0) + 1
        log_event(event)
        if cluster is not None:
            if grouper is not None:
                grouper.observe(event)
                if controller.wants_grouping(event):
                    grouper.submit(event.raw)
            if writer is not None:
                writer.put(event)
            else:
                _fresh_connection()
                mirror.apply_event(event, cluster, gateway)
        if echo is not None:
            echo(event)

    return callback


def _fresh_connection() -> None:
    """Each watch thread keeps its own database connection for days: one that broke (a database
    restart) is replaced before the next change is written. Never inside a transaction (tests)."""
    if not connection.in_atomic_block:
        close_old_connections()


class _Heartbeat(threading.Thread):
    """Tells the scheduling cycle the mirror is kept current (so it does not list everything
    itself), a few times per heartbeat window, while the watch runs."""

    def __init__(self, cluster: Any, stop: threading.Event) -> None:
        super().__init__(name="watch-heartbeat", daemon=True)
        self.cluster = cluster
        self.stop = stop

    def beat(self) -> None:
        if self.cluster is None:
            return
        try:
            _fresh_connection()
            mirror.record_heartbeat(self.cluster)
        except Exception:  # noqa: BLE001 - the database may be away for a moment; the next beat retries
            log.warning("watch heartbeat not recorded", exc_info=True)

    def run(self) -> None:
        interval = max(1.0, mirror.heartbeat_seconds() / 3)
        while not self.stop.is_set():
            self.beat()
            self.stop.wait(interval)
