"""What the waiting PodGroups' place-in-line annotations cost, at a given number of waiting PodGroups.

    .venv/bin/python benchmarks/line_annotations.py --pending 16000

Invented, in memory (no database, no API server; the mirror's note of what was written is left out): each PodGroup waits at its place with a stored estimate.
Prints one JSON object, CPU seconds:
* ``refresh_wording_s``: the refresh words every estimate as its annotations say it
  (`status_writer.annotation_texts`), once per refresh, on the what-if worker;
* ``cycle_wanted_s``: a cycle's write-back builds what each PodGroup should say (`line_annotations`);
* ``cycle_compare_s``: and compares it with what each says (`write_back._write_annotations`), here in a
  steady line where nothing changed, so ``cycle_api_calls`` is 0;
* ``cycle_after_head_starts_s`` / ``cycle_api_calls_after_head_starts``: the same after the head of the line
  started (every place behind it moves up): the calls are bounded by ``KAI_LINE_WRITES_PER_CYCLE``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class CountingGateway:
    """Takes the annotation patches and counts them."""

    def __init__(self) -> None:
        self.calls = 0

    def annotate_pod_groups(self, changes: list[Any]) -> list[None]:
        self.calls += len(changes)
        return [None] * len(changes)


def measure(pending: int) -> dict[str, Any]:
    from django.conf import settings

    from kaiweb.scheduling import status_writer as sw
    from kaiweb.scheduling import write_back
    from kaiweb.scheduling.write_back import WriteBackReport, _write_annotations

    # What was written is kept on the workloads' rows by the mirror's bookkeeping: no database here.
    write_back._keep_said = lambda cluster, written: None  # type: ignore[assignment]  # a stand-in, no database

    now = 1_800_000_000.0
    at = datetime.fromtimestamp(now, tz=UTC)
    rows = {f"w{i}": {"p50": now + 60.0 * i, "p80": now + 90.0 * i, "code": "waits", "ahead": i % 50,
                      "queue": "team-a", "pods": 2, "gpus": 2, "per_pod": 1, "whole_node": False,
                      "frees_at": now + 600, "node": "gpu-1", "horizon": now + 7 * 86400} for i in range(pending)}
    t = time.process_time()
    texts = {key: sw.annotation_texts(row, now, at, 16) for key, row in rows.items()}
    wording = time.process_time() - t

    def wanted(places: dict[str, list[int]]) -> tuple[dict[str, dict[str, str | None]], float]:
        t = time.process_time()
        got = {key: sw.line_annotations(place, (texts[key][0], texts[key][1], str(texts[key][2])))
               for key, place in places.items()}
        return got, time.process_time() - t

    line, wanted_s = wanted({f"w{i}": [i + 1, i % 50 + 1] for i in range(pending)})
    listed = {("ns", f"pg{i}"): {"metadata": {"namespace": "ns", "name": f"pg{i}", "uid": f"u{i}",
                                              "annotations": {k: v for k, v in line[f"w{i}"].items() if v}},
                                 "line_key": f"w{i}"} for i in range(pending)}
    budget = int(settings.KAI_LINE_WRITES_PER_CYCLE)
    steady = CountingGateway()
    t = time.process_time()
    _write_annotations(steady, None, listed, {}, line, WriteBackReport(), stamps_budget=50, line_budget=budget)
    compare = time.process_time() - t
    # The head of the line starts: it no longer waits, every place behind it moves up by one.
    moved, _ = wanted({f"w{i}": [i, max(1, i % 50)] for i in range(1, pending)})
    after = CountingGateway()
    t = time.process_time()
    _write_annotations(after, None, listed, {}, moved, WriteBackReport(), stamps_budget=50, line_budget=budget // 10)
    return {"pending_podgroups": pending, "refresh_wording_s": round(wording, 3), "cycle_wanted_s": round(wanted_s, 3),
            "cycle_compare_s": round(compare, 3), "cycle_api_calls": steady.calls,
            "cycle_after_head_starts_s": round(time.process_time() - t, 3),
            "cycle_api_calls_after_head_starts": after.calls, "line_writes_per_cycle": budget}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=16000, help="waiting PodGroups (default 16000)")
    args = parser.parse_args()
    if args.pending < 1:
        parser.error("--pending: must be at least 1")
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiweb.settings")
    import django

    django.setup()
    print(json.dumps(measure(args.pending)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
