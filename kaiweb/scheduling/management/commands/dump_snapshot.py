"""manage.py dump_snapshot FILE: write what the next cycle would decide on, for replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Write the shard's current engine snapshot and config to FILE (replay: run_cycle --snapshot FILE --dry-run)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--shard", default=None, help="shard id, name or cluster/shard (default: the first)")

    def handle(self, *args: Any, **opts: Any) -> None:
        from kaiweb.scheduling.cycle import dump_snapshot

        try:
            data = dump_snapshot(opts["shard"])
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        path: Path = opts["file"]
        if not path.parent.exists():
            raise CommandError(f"FILE: directory {path.parent} does not exist")
        path.write_text(json.dumps(data, indent=1, sort_keys=True))
        snap = data["snapshot"]
        self.stdout.write(f"wrote {path}: {len(snap['jobs'])} jobs, {len(snap['nodes'])} nodes, "
                          f"{len(snap['queues'])} queues (shard {data['shard']})")
