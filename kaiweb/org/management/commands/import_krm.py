"""``manage.py import_krm [FILE ...]``: KAI Resource Management's NodePools, Departments and Projects into
kaiweb's org, all-or-nothing: from YAML files (``-`` for standard input), or without files from the cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kaiweb.audit.choices import AuditSource
from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.gateway import get_gateway
from kaiweb.org import krm_sync

MAX_BYTES = 8 * 1024 * 1024


class Command(BaseCommand):
    help = "Import KRM's NodePool, Department and Project objects (files, or the cluster's) into kaiweb's org."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", help="YAML files of KRM objects, or - for standard input; "
                                                     "none: read them from the cluster (KAI_CLUSTER_BACKEND=kubernetes)")

    def _read(self, path: str) -> list[Any]:
        try:
            text = sys.stdin.read(MAX_BYTES + 1) if path == "-" else Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text") from exc
        if len(text) > MAX_BYTES:
            raise CommandError(f"{path} is larger than {MAX_BYTES} bytes")
        try:
            return [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise CommandError(f"{path} is not YAML: {exc}") from exc

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["files"]:
                objects = [obj for path in options["files"] for obj in self._read(path)]
                messages = krm_sync.import_objects(objects, source=AuditSource.CLI)
            else:
                if settings.KAI_CLUSTER_BACKEND != "kubernetes":
                    raise CommandError("import_krm without files reads the cluster: it needs "
                                       "KAI_CLUSTER_BACKEND=kubernetes")
                messages = krm_sync.import_from_cluster(get_gateway(), source=AuditSource.CLI)
        except ValidationError as exc:
            for where, problems in exc.message_dict.items():
                for problem in problems:
                    self.stderr.write(f"{where}: {problem}")
            raise CommandError("nothing imported") from exc
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        for line in messages:
            self.stdout.write(line)
        self.stdout.write(self.style.SUCCESS(f"{len(messages)} KRM object(s) imported"))
