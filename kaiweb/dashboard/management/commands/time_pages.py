"""Time every dashboard page on the current database; optionally fill it with a large sample first.

    manage.py time_pages --build --nodes 500 --workloads 4000 --repeat 5

prints one JSON object: per page the median and worst render time (ms), the response size and
the number of queries. Use a scratch database (KAI_VAR_DIR / DATABASE_URL): --build adds rows.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext


class Command(BaseCommand):
    help = "Render every dashboard page and report render times and query counts as JSON."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--build", action="store_true", help="add the sample dataset first")
        parser.add_argument("--nodes", type=int, default=500)
        parser.add_argument("--workloads", type=int, default=4000)
        parser.add_argument("--cycles", type=int, default=200)
        parser.add_argument("--repeat", type=int, default=5)

    def handle(self, *args: Any, **options: Any) -> None:
        from kaiweb.dashboard.sample_data import build_dataset
        from kaiweb.queues.models import Queue
        from kaiweb.workloads.models import Workload

        if options["repeat"] < 1:
            raise CommandError("--repeat: must be at least 1")
        if options["build"]:
            started = time.perf_counter()
            built = build_dataset(nodes=options["nodes"], workloads=options["workloads"], cycles=options["cycles"],
                                  extra_departments=4, tag=f"t{int(time.time())}-")
            self.stderr.write(f"built {built.nodes} nodes, {built.workloads} workloads in "
                              f"{time.perf_counter() - started:.1f} s")
        user, _ = get_user_model().objects.get_or_create(username="time-pages", defaults={"is_superuser": True})
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
            for _ in range(options["repeat"]):
                with CaptureQueriesContext(connection) as ctx:
                    t0 = time.perf_counter()
                    response = client.get(path)
                    times.append((time.perf_counter() - t0) * 1000)
                queries, size, status = len(ctx), len(response.content), response.status_code
            results[path] = {"status": status, "median_ms": round(statistics.median(times), 1),
                             "max_ms": round(max(times), 1), "queries": queries, "bytes": size}
        counts = {"nodes": __import__("kaiweb.cluster.models", fromlist=["Node"]).Node.objects.count(),
                  "workloads": Workload.objects.count()}
        self.stdout.write(json.dumps({"dataset": counts, "pages": results}, indent=2))
