"""``manage.py publish_org``: write what the org gives to the Kubernetes cluster (the pools' SchedulingShards,
the derived queues and their labels, the projects' namespaces, the nodes' pool labels, KRM objects' status)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.gateway import get_gateway
from kaiweb.org import krm_sync


class Command(BaseCommand):
    help = "Write the org's shards, queues, namespaces, node labels and KRM status to the Kubernetes cluster."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.KAI_CLUSTER_BACKEND != "kubernetes":
            raise CommandError("publish_org writes to a Kubernetes cluster: it needs KAI_CLUSTER_BACKEND=kubernetes "
                               "(on the simulated backend the org services already wrote it)")
        try:
            report = krm_sync.publish(get_gateway())
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        for line in report.messages:
            self.stdout.write(line)
        for line in report.problems:
            self.stdout.write(self.style.WARNING(line))
        self.stdout.write(self.style.SUCCESS(f"published; {len(report.held)} node(s) held for draining, "
                                             f"{len(report.problems)} problem(s)"))
