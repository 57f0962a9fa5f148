"""manage.py run_cycle: N scheduling cycles synchronously, or replay a dumped snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Run scheduling cycles now (the same service the Celery task runs), or replay a snapshot."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cycles", type=int, default=1, help="how many cycles to run (default 1)")
        parser.add_argument("--shard", default=None, help="shard id, name or cluster/shard (default: the first)")
        parser.add_argument("--json", action="store_true", help="one JSON object per cycle")
        parser.add_argument("--snapshot", type=Path, help="replay this dump_snapshot file instead")
        parser.add_argument("--dry-run", action="store_true", help="with --snapshot: decide only, record nothing")

    def handle(self, *args: Any, **opts: Any) -> None:
        from kaiweb.scheduling import cycle

        if opts["snapshot"]:
            return self._replay(opts)
        if opts["dry_run"]:
            raise CommandError("--dry-run replays a recorded snapshot: give --snapshot FILE")
        if opts["cycles"] < 1:
            raise CommandError("--cycles must be at least 1")
        for _ in range(opts["cycles"]):
            try:
                outcome = cycle.run_and_record_cycle(opts["shard"], trigger="manual")
            except LookupError as exc:
                raise CommandError(str(exc)) from exc
            if opts["json"]:
                self.stdout.write(json.dumps(outcome.as_json()))
            else:
                self._table(outcome)

    def _replay(self, opts: dict[str, Any]) -> None:
        from kaiweb.scheduling import cycle

        path: Path = opts["snapshot"]
        if not opts["dry_run"]:
            raise CommandError("--snapshot replays without touching the cluster: add --dry-run")
        try:
            data = json.loads(path.read_text())
            snapshot, _, result = cycle.replay_snapshot(data)
        except FileNotFoundError as exc:
            raise CommandError(f"--snapshot: {path} does not exist") from exc
        except (json.JSONDecodeError, ValueError) as exc:
            raise CommandError(f"--snapshot: {path}: {exc}") from exc
        summary = {"binds": len(result.binds), "evictions": len(result.evictions),
                   "pipelined": len(result.pipelined), "pending": len(result.pending), "dry_run": True}
        if opts["json"]:
            self.stdout.write(json.dumps({**summary, "result": result.to_dict()}))
            return
        self.stdout.write(f"replayed {path} ({len(snapshot.jobs)} jobs, {len(snapshot.nodes)} nodes): "
                          + ", ".join(f"{k} {v}" for k, v in summary.items() if k != "dry_run"))
        self._decisions(result)

    def _table(self, outcome: Any) -> None:
        self.stdout.write(
            f"cycle {outcome.cycle_id}: {outcome.status}, {outcome.binds} bind(s), {outcome.evictions} eviction(s), "
            f"{outcome.pipelined} pipelined, {outcome.pending} pending, {outcome.duration_ms:.0f} ms"
        )
        if outcome.result is not None:
            self._decisions(outcome.result)

    def _decisions(self, result: Any) -> None:
        for b in result.binds[:20]:
            self.stdout.write(f"  bind     {b.job}/{b.task} -> {b.node}")
        for e in result.evictions[:20]:
            self.stdout.write(f"  evict    {e.job}/{e.task} on {e.node} ({e.action}, {e.reason.code}"
                              f"{', for ' + e.preemptor if e.preemptor else ''})")
        for p in result.pipelined[:10]:
            self.stdout.write(f"  pipeline {p.job}/{p.task} -> {p.node}")
        hidden = max(0, len(result.binds) - 20) + max(0, len(result.evictions) - 20) + max(0, len(result.pipelined) - 10)
        if hidden:
            self.stdout.write(f"  … and {hidden} more")
        if result.queues:
            self.stdout.write(f"  {'queue':<20} {'gpu alloc':>10} {'gpu fair':>10} {'gpu req':>10}")
            for name, st in sorted(result.queues.items()):
                self.stdout.write(f"  {name:<20} {st.allocated[2]:>10.2f} {st.fair_share[2]:>10.2f} {st.request[2]:>10.2f}")
