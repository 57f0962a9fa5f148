"""manage.py export_queues [FILE]: write the queue tree as Queue CRD YAML (parents first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kaiweb.queues.yaml_io import export_queues


class Command(BaseCommand):
    help = "Export every queue as scheduling.run.ai/v2 Queue YAML (to FILE, or standard output)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?", default="-", help="Output file; - (default) for standard output")

    def handle(self, *args: Any, **options: Any) -> None:
        text = export_queues()
        if options["file"] == "-":
            self.stdout.write(text, ending="")
            return
        try:
            Path(options["file"]).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {options['file']}: {exc.strerror}") from exc
        self.stderr.write(f"wrote {text.count('kind: Queue')} queue(s) to {options['file']}")
