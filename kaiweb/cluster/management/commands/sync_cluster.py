"""``manage.py sync_cluster``: list the Kubernetes cluster once and make the database mirror equal
to it (nodes, GPU devices, workloads and pods, Queue CRDs both ways), without the watcher."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.transport import load_configuration
from kaiweb.cluster.errors import ClusterError


class Command(BaseCommand):
    help = "Mirror the Kubernetes cluster into the database once (what the cycle does when no watcher runs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=None,
                            help="API server URL (default: KAI_KUBERNETES_HOST, else in-cluster service account, else KUBECONFIG)")
        parser.add_argument("--cluster", default=None,
                            help="name of the kaiweb cluster to mirror into (default: the only Kubernetes one, "
                                 "created as 'kubernetes' if there is none)")
        parser.add_argument("--json", action="store_true", help="print what was done as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["host"] is None and settings.KAI_CLUSTER_BACKEND != "kubernetes":
            raise CommandError("sync_cluster needs KAI_CLUSTER_BACKEND=kubernetes (or --host URL); "
                               f"the configured backend is {settings.KAI_CLUSTER_BACKEND!r}")
        try:
            cluster = mirror.kubernetes_cluster(options["cluster"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            from kubernetes import client

            configuration = load_configuration(options["host"] or getattr(settings, "KAI_KUBERNETES_HOST", "") or None)
            gateway = KubernetesGateway(client.ApiClient(configuration), scheduler_name=settings.KAI_SCHEDULER_NAME,
                                        request_timeout=float(getattr(settings, "KAI_KUBERNETES_TIMEOUT", 10.0)))
        except Exception as exc:  # the client's config loaders raise several unrelated types
            raise CommandError(f"cannot configure the Kubernetes client: {exc}") from exc
        try:
            report = mirror.sync_full(gateway, cluster)
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps({"cluster": cluster.name, **report.as_json()}, sort_keys=True))
            return
        for line in report.queues:
            self.stdout.write(line)
        for line in report.problems:
            self.stdout.write(self.style.WARNING(line))
        counts = "; ".join(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in figures.items())
                           for kind, figures in (("nodes", report.nodes), ("workloads", report.workloads),
                                                 ("pods", report.pods)))
        self.stdout.write(self.style.SUCCESS(f"cluster {cluster.name} mirrored: {counts}; "
                                             f"{len(report.problems)} problem(s)"))
