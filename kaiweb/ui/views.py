"""The overview page: cluster allocation now and over the last day, pending by queue, cycles, preemptions."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from kaiweb.scheduling.choices import CYCLE_STATUS_BADGE, PREEMPTION_ACTION_BADGE
from kaiweb.scheduling.selectors import queue_depth
from kaiweb.ui import charts, queries
from kaiweb.ui.pages import render_page

OVERVIEW_QUEUES = 14
OVERVIEW_DEPTH_ROWS = 20  # the queue-depth rows the overview shows (all on the queue pages)


def group_preemptions(events: list) -> list:
    """One line per (cycle, action, victim, preemptor): a gang's pods are evicted together and
    recorded one event per pod; `count` says how many."""
    out: list = []
    seen: dict[tuple, object] = {}
    for e in events:
        key = (e.cycle_id, e.action, e.victim_ref, e.preemptor_ref)
        if key in seen:
            seen[key].count += 1
            continue
        e.count = 1
        seen[key] = e
        out.append(e)
    return out


def overview(request: HttpRequest) -> HttpResponse:
    """Everything a platform team checks first; the panels refresh themselves while visible."""
    from kaiweb.cluster.models import UnreadableObject
    from kaiweb.scheduling.models import PreemptionEvent, SchedulingCycle

    now = timezone.now()
    day_ago = now - timedelta(hours=24)
    tree = queries.queue_tree(request.user)
    totals = queries.cluster_totals(tree)
    leaves = [row for row in tree if row.is_leaf]
    cycles = list(SchedulingCycle.objects.select_related("shard").order_by("-started_at", "-id")[:10])
    preemptions = group_preemptions(list(PreemptionEvent.objects.select_related("preemptor_queue", "victim_queue")
                                         .order_by("-at", "-id")[:40]))[:8]
    preemptions_24h = PreemptionEvent.objects.filter(at__gte=day_ago).count()
    pending_total = sum(row.pending_workloads for row in tree if row.depth == 0)
    running_total = sum(row.running_workloads for row in tree if row.depth == 0)
    leaf_ids = [row.queue.pk for row in leaves]
    gpu_series = queries.usage_series("gpu", day_ago, queue_ids=leaf_ids)
    cpu_series = [(t, v / 1000.0) for t, v in queries.usage_series("cpu", day_ago, queue_ids=leaf_ids)]
    unreadable = list(UnreadableObject.objects.filter(deferred=False).order_by("-last_seen", "id")[:6])
    context = {
        "unreadable": unreadable[:5],
        "more_unreadable": len(unreadable) > 5,
        "totals": totals,
        "tree": tree,
        "queue_rows": tree[:OVERVIEW_QUEUES],
        "more_queues": max(0, len(tree) - OVERVIEW_QUEUES),
        "cycles": cycles,
        "last_cycle": cycles[0] if cycles else None,
        "preemptions": preemptions,
        "preemptions_24h": preemptions_24h,
        "pending_total": pending_total,
        "running_total": running_total,
        "allocation_chart": charts.allocation_over_time(gpu_series, cpu_series, totals.gpu_total,
                                                        totals.cpu_total / 1000.0),
        "pending_chart": charts.pending_by_queue([(row.queue.name, row.pending_workloads) for row in leaves]),
        "fragmentation_chart": charts.fragmentation_over_time(queries.fragmentation_series(day_ago),
                                                              totals.gpu_total),
        "queue_depth": queue_depth()[:OVERVIEW_DEPTH_ROWS],
        "cycle_badge": CYCLE_STATUS_BADGE,
        "action_badge": PREEMPTION_ACTION_BADGE,
        "now": now,
    }
    return render_page(request, "ui/overview.html", context, partial="ui/partials/overview_panels.html")
