"""Render time of every dashboard page on a large invented dataset, in a scratch database.

    .venv/bin/python benchmarks/pages.py --nodes 500 --workloads 4000 --repeat 5

Builds the dataset of the view tests (tests/sample_data.py) in a new SQLite database under a
temporary directory (never the configured one), then prints one JSON object: per page the median
and worst render time (ms), the response size and the number of queries.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def time_pages(repeat: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from kaiweb.cluster.models import Node
    from kaiweb.queues.models import Queue
    from kaiweb.workloads.models import Workload

    user, _ = get_user_model().objects.get_or_create(username="pages-benchmark", defaults={"is_superuser": True})
    client = Client()
    client.force_login(user)
    queue = Queue.objects.filter(children__isnull=True).order_by("name").first()
    workload = Workload.objects.filter(state="pending").first()
    pages = ["/", "/queues/", "/queues/?view=table", "/workloads/", "/workloads/?state=pending", "/nodes/",
             "/preemptions/", "/cycles/", "/usage/", "/audit/"]
    if queue is not None:
        pages += [f"/queues/{queue.name}/", f"/queues/{queue.name}/edit/"]
    if workload is not None:
        pages.append(f"/workloads/{workload.pk}/")
    results: dict[str, Any] = {}
    for path in pages:
        client.get(path)  # warm imports and caches once
        times, queries, size, status = [], 0, 0, 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as ctx:
                t0 = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - t0) * 1000)
            queries, size, status = len(ctx), len(response.content), response.status_code
        results[path] = {"status": status, "median_ms": round(statistics.median(times), 1),
                         "max_ms": round(max(times), 1), "queries": queries, "bytes": size}
    return {"dataset": {"nodes": Node.objects.count(), "workloads": Workload.objects.count()}, "pages": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--workloads", type=int, default=4000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.repeat < 1 or args.nodes < 1 or args.workloads < 0:
        parser.error("--repeat and --nodes must be at least 1, --workloads not negative")
    with tempfile.TemporaryDirectory(prefix="kaiweb-pages-") as tmp:
        os.environ.pop("DATABASE_URL", None)  # a scratch SQLite database under KAI_VAR_DIR
        os.environ.update(KAI_VAR_DIR=tmp, DJANGO_SETTINGS_MODULE="kaiweb.settings", DJANGO_DEBUG="false",
                          DJANGO_SECRET_KEY="pages-benchmark-only", DJANGO_ALLOWED_HOSTS="testserver")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.core.management import call_command

        from tests.sample_data import build_dataset

        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        built = build_dataset(nodes=args.nodes, workloads=args.workloads, cycles=args.cycles, extra_departments=4)
        out = {"benchmark": "pages", "build_seconds": round(time.perf_counter() - started, 1),
               "built": {"nodes": built.nodes, "workloads": built.workloads}, **time_pages(args.repeat)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
