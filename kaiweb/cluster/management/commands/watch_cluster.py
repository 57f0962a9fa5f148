"""``manage.py watch_cluster``: keep the cluster mirror current with list + watch (its own process)."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kaiweb.cluster.backends.kubernetes import KubernetesGateway, load_configuration
from kaiweb.cluster.gateway import ClusterError
from kaiweb.cluster.watch import KINDS, ClusterWatcher, WatchEvent, log_event


class Command(BaseCommand):
    help = "Watch nodes, pods, PodGroups and Queues of the Kubernetes cluster (list + watch, 410 → re-list)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="list each kind, watch one short pass, exit")
        parser.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
        parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
        parser.add_argument("--timeout-seconds", type=int, default=300,
                            help="server-side length of one watch connection (default 300)")
        parser.add_argument("--host", default=None,
                            help="API server URL (default: in-cluster service account, else KUBECONFIG)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["host"] is None and settings.KAI_CLUSTER_BACKEND != "kubernetes":
            raise CommandError("watch_cluster needs KAI_CLUSTER_BACKEND=kubernetes (or --host URL); "
                               f"the configured backend is {settings.KAI_CLUSTER_BACKEND!r}, which has no watch")
        if options["max_seconds"] is not None and options["max_seconds"] <= 0:
            raise CommandError("--max-seconds must be greater than 0")
        kinds = [k.strip() for k in options["kinds"].split(",") if k.strip()]
        try:
            from kubernetes import client

            configuration = load_configuration(options["host"])
            gateway = KubernetesGateway(client.ApiClient(configuration), scheduler_name=settings.KAI_SCHEDULER_NAME)
            self.stdout.write(f"watching {', '.join(kinds)} on {gateway.ping()} at {configuration.host}")
            counts: dict[str, int] = {}

            def callback(event: WatchEvent) -> None:
                counts[event.type] = counts.get(event.type, 0) + 1
                log_event(event)
                if options["verbosity"] >= 2:
                    where = f"{event.namespace}/{event.name}" if event.namespace else event.name
                    self.stdout.write(f"{event.type} {event.kind} {where} rv={event.resource_version}")

            watcher = ClusterWatcher(gateway, callback, kinds=kinds, timeout_seconds=options["timeout_seconds"])
        except (ValueError, ClusterError) as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:  # the client's config loaders raise several unrelated types
            raise CommandError(f"cannot configure the Kubernetes client: {exc}") from exc
        if options["once"]:
            watcher.run_once()
        else:
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
        logging.getLogger(__name__).info("watch_cluster done: %s", counts)
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no events"
        self.stdout.write(self.style.SUCCESS(f"watch ended: {summary}"))
