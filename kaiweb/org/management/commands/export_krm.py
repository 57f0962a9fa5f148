"""``manage.py export_krm [--apply]``: kaiweb's org as KAI Resource Management's NodePool, Department and
Project objects: YAML on standard output, or written to the cluster with ``--apply``."""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.gateway import get_gateway
from kaiweb.org import krm_sync


class Command(BaseCommand):
    help = "Export kaiweb's departments, projects and node pools as KRM objects (YAML, or --apply to the cluster)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--apply", action="store_true",
                            help="write them to the cluster (KAI_CLUSTER_BACKEND=kubernetes) instead of printing")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["apply"]:
            self.stdout.write(yaml.safe_dump_all(krm_sync.export_objects(), sort_keys=False), ending="")
            return
        if settings.KAI_CLUSTER_BACKEND != "kubernetes":
            raise CommandError("export_krm --apply writes to the cluster: it needs KAI_CLUSTER_BACKEND=kubernetes")
        try:
            for line in krm_sync.export_to_cluster(get_gateway()):
                self.stdout.write(line)
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
