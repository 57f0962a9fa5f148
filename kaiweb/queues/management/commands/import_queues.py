"""manage.py import_queues FILE: apply a Queue CRD YAML file (scheduling.run.ai/v2), all-or-nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kaiweb.queues.yaml_io import QueueImportError, import_queues


class Command(BaseCommand):
    help = "Import Queue CRD YAML (one or many documents); one bad document rejects the whole file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="YAML file, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="Check and report; change nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text") from exc
        try:
            result = import_queues(text, source="cli", dry_run=options["dry_run"])
        except QueueImportError as exc:
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise CommandError(f"nothing imported: {len(exc.problems)} problem(s) in {path}") from exc
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(f"warning: {warning}"))
        verb = "would be" if result.dry_run else "were"
        self.stdout.write(
            f"{len(result.created)} queue(s) {verb} created, {len(result.updated)} updated, "
            f"{len(result.unchanged)} unchanged"
        )
