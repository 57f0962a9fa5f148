"""Scheduling history pages: preemptions (timeline, table, CSV) and cycles (phases, decisions)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

from django.db.models import Count, Max, Min
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone

from kaiweb.scheduling.choices import CYCLE_STATUS_BADGE, PREEMPTION_ACTION_BADGE
from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, QueueStatus, SchedulingCycle
from kaiweb.scheduling.tables import CycleTable, PreemptionTable
from kaiweb.ui import charts
from kaiweb.ui.pages import (
    active_filters,
    configure_table,
    filter_context,
    filter_queryset,
    paginate,
    render_page,
)
from scheduler_core import model as m

TIMELINE_MAX = 1000
FIGURE_LABEL = {"allocated": "Allocated", "fair_share": "Fair share", "quota": "Quota", "limit": "Limit"}
CHART_CYCLES = 200
# The order phases happen in; a cycle records "engine" and, inside it, "engine.<action>" in the engine's
# action names (a bare action name, from a cycle timed action by action, sorts after the engine's).
PHASES = ("observe", "snapshot", "usage", "engine", "engine.open_session", "engine.fair_share",
          *(f"engine.{a}" for a in m.ACTIONS), "engine.close_session",
          *m.ACTIONS, "reconcile", "apply", "record", "write_back")


def phase_order(names: set[str] | list[str]) -> list[str]:
    """Known phases in cycle order, then the others by name."""
    known = [p for p in PHASES if p in names]
    return known + sorted(n for n in names if n not in PHASES)


def leaf_phases(names: set[str] | list[str]) -> list[str]:
    """Phases to stack: an aggregate ("engine") is left out when its parts ("engine.allocate") are there."""
    names = set(names)
    return [p for p in phase_order(names) if not any(o.startswith(p + ".") for o in names)]


def _preemption_filterset() -> Any:
    from kaiweb.scheduling.filtersets import PreemptionEventFilterSet

    return PreemptionEventFilterSet


def _cycle_filterset() -> Any:
    from kaiweb.scheduling.filtersets import SchedulingCycleFilterSet

    return SchedulingCycleFilterSet


def preemption_queryset() -> Any:
    # The decision carries the evicted pod's name: one event per pod of a gang.
    return PreemptionEvent.objects.select_related("victim_queue", "preemptor_queue", "decision")


def grouped_preemptions(qs: Any) -> Any:
    """Preemption events one row per job and cycle: the pods of a gang evicted together are one row
    with their count, the newest time and the first event (for its detail page)."""
    return (qs.order_by().values("cycle_id", "action", "reason", "victim_ref", "victim_id", "victim_queue__name",
                                 "preemptor_ref", "preemptor_id", "preemptor_queue__name")
            .annotate(last_at=Max("at"), pods=Count("id"), first=Min("id"), message=Max("message")))


def preemption_list(request: HttpRequest) -> HttpResponse:
    """Evictions as a timeline and a table (one row per job and cycle), filtered through the API's FilterSet."""
    filterset, qs = filter_queryset(request, _preemption_filterset(), preemption_queryset())
    table = PreemptionTable(grouped_preemptions(qs))
    timeline = list(qs.order_by("-at", "-id").values("at", "action", "victim_ref", "preemptor_ref")[:TIMELINE_MAX])
    counts = {row["action"]: row["n"] for row in qs.order_by().values("action").annotate(n=Count("id"))}
    from kaiweb.queues.models import Queue

    names = [(n, n) for n in Queue.objects.order_by("name").values_list("name", flat=True)]
    context = {
        "filterset": filterset,
        **filter_context(request, filterset, ["action", "queue", "victim_queue", "preemptor_queue", "reason",
                                              "since", "until"],
                         choices={"queue": names, "victim_queue": names, "preemptor_queue": names},
                         labels={"queue": "Queue (either side)", "victim_queue": "Victim queue",
                                 "preemptor_queue": "Preemptor queue", "reason": "Reason code",
                                 "since": "Since (ISO time)", "until": "Until (ISO time)"}),
        "filtered": active_filters(filterset),
        "timeline_chart": charts.preemption_timeline(
            [{"at": e["at"], "action": e["action"], "victim": e["victim_ref"], "preemptor": e["preemptor_ref"]}
             for e in timeline]),
        "timeline_capped": len(timeline) == TIMELINE_MAX,
        "counts": counts,
        "any": PreemptionEvent.objects.exists(),
        "action_badge": PREEMPTION_ACTION_BADGE,
        **configure_table(request, table),
    }
    return render_page(request, "scheduling/preemptions.html", context, partial="scheduling/partials/preemption_panel.html")


class _Echo:
    """A file-like object whose write returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


CSV_COLUMNS = ("at", "action", "reason", "victim", "victim_pod", "victim_queue", "preemptor", "preemptor_queue", "cycle",
               "message")


def preemption_csv(request: HttpRequest) -> HttpResponse:
    """The filtered preemption log as CSV, streamed (the same filters as the page and the API)."""
    filterset, qs = filter_queryset(request, _preemption_filterset(), preemption_queryset())
    if not filterset.is_valid():
        return HttpResponse("; ".join(f"{k}: {' '.join(v)}" for k, v in filterset.errors.items()),
                            status=400, content_type="text/plain")
    writer = csv.writer(_Echo())

    def rows() -> Iterator[str]:
        yield writer.writerow(CSV_COLUMNS)
        for e in qs.order_by("-at", "-id").iterator(chunk_size=2000):
            yield writer.writerow([
                e.at.isoformat(), e.action, e.reason, e.victim_ref, e.decision.pod_name if e.decision else "",
                e.victim_queue.name if e.victim_queue else "",
                e.preemptor_ref, e.preemptor_queue.name if e.preemptor_queue else "", e.cycle_id, e.message,
            ])

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="preemptions-{stamp}.csv"'
    return response


#: a resource's row in the preemption figures, with the unit its amounts are shown in
RESOURCE_ROW_LABEL = {"gpu": "GPU (devices)", "cpu": "CPU (cores)", "memory": "memory (GB)"}


def preemption_detail(request: HttpRequest, pk: int) -> HttpResponse:
    event = get_object_or_404(PreemptionEvent.objects.select_related("victim_queue", "preemptor_queue", "cycle",
                                                                     "victim", "preemptor"), pk=pk)
    sides = []
    for label, queue, figures in (("Victim", event.victim_queue, event.victim_queue_figures),
                                  ("Preemptor", event.preemptor_queue, event.preemptor_queue_figures)):
        kinds = [k for k in ("allocated", "fair_share", "quota", "limit") if isinstance((figures or {}).get(k), dict)]
        resources = sorted({r for k in kinds for r in figures[k]}, key=lambda r: ("gpu", "cpu", "memory").index(r)
                           if r in ("gpu", "cpu", "memory") else 9)
        sides.append({"label": label, "queue": queue, "kinds": [FIGURE_LABEL[k] for k in kinds],
                      "rows": [(r, RESOURCE_ROW_LABEL.get(r, r), [figures[k].get(r) for k in kinds])
                               for r in resources]})
    return render_page(request, "scheduling/preemption_detail.html",
                       {"event": event, "sides": sides, "action_badge": PREEMPTION_ACTION_BADGE})


def cycle_list(request: HttpRequest) -> HttpResponse:
    """Duration by phase and decisions per cycle over time, and the cycles table."""
    filterset, qs = filter_queryset(request, _cycle_filterset(), SchedulingCycle.objects.select_related("shard"))
    recent = list(qs.order_by("-started_at", "-id")[:CHART_CYCLES])
    recent.reverse()
    seen = {k for c in recent for k, v in (c.phase_durations or {}).items() if v}
    table = CycleTable(qs)
    from kaiweb.cluster.models import SchedulingShard

    shards = sorted(set(SchedulingShard.objects.values_list("name", flat=True)))
    context = {
        "filterset": filterset,
        **filter_context(request, filterset, ["status", "shard", "trigger", "with_evictions", "started_after",
                                              "started_before"],
                         choices={"shard": [(n, n) for n in shards]},
                         labels={"shard": "Shard", "with_evictions": "With evictions",
                                 "started_after": "Since (ISO time)", "started_before": "Until (ISO time)"}),
        "filtered": active_filters(filterset),
        "phase_chart": charts.cycle_phases(recent, leaf_phases(seen)),
        "decision_chart": charts.cycle_decisions(recent),
        "chart_count": len(recent),
        "any": SchedulingCycle.objects.exists(),
        **configure_table(request, table),
    }
    return render_page(request, "scheduling/cycles.html", context, partial="scheduling/partials/cycle_panel.html")


# What the write-back told the cluster after a cycle (`SchedulingCycle.write_back`): label, the count
# written, the count its budget left for the next cycles (None: it has no budget).
_WRITE_BACK_ROWS = (
    ("Queue statuses", "queue_statuses", None),
    ("Why-pending on pods", "pending_reports", "pending_deferred"),
    ("PodGroup statuses", "pod_group_statuses", "pod_group_deferred"),
    ("PodGroup events", "pod_group_events", None),
    ("PodGroup stamps", "pod_group_stamps", None),
    ("Places in line and estimates", "pod_group_lines", None),
)


def _write_back_rows(summary: dict) -> list[dict]:
    if not summary:
        return []
    return [{"label": label, "written": int(summary.get(written) or 0),
             "deferred": None if deferred is None else int(summary.get(deferred) or 0)}
            for label, written, deferred in _WRITE_BACK_ROWS]


def cycle_detail(request: HttpRequest, pk: int) -> HttpResponse:
    cycle = get_object_or_404(SchedulingCycle.objects.select_related("shard"), pk=pk)
    decisions = Decision.objects.filter(cycle=cycle).order_by("id")
    kind = request.GET.get("kind", "")
    if kind in ("bind", "pipeline", "evict"):
        decisions = decisions.filter(kind=kind)
    page = paginate(request, decisions, default=50)
    durations = cycle.phase_durations or {}
    phases = [(name, durations[name]) for name in phase_order(list(durations))]
    total = float(cycle.duration_seconds or 0) or sum(float(durations[p] or 0) for p in leaf_phases(list(durations)))
    context = {
        "cycle": cycle,
        "phases": [{"name": k, "label": k.split(".", 1)[-1], "seconds": v, "sub": "." in k, "pct": min(100.0, 100.0 * float(v or 0) / total) if total else 0}
                   for k, v in phases],
        "page_obj": page,
        "kind": kind,
        "kind_counts": dict(Decision.objects.filter(cycle=cycle).values_list("kind").annotate(n=Count("id"))),
        "preemptions": list(PreemptionEvent.objects.filter(cycle=cycle).select_related("victim_queue", "preemptor_queue")[:100]),
        "write_back": _write_back_rows(cycle.write_back or {}),
        "write_back_errors": int((cycle.write_back or {}).get("errors") or 0),
        "pending_count": PendingReason.objects.filter(cycle=cycle).count(),
        "queue_count": QueueStatus.objects.filter(cycle=cycle).count(),
        "status_badge": CYCLE_STATUS_BADGE,
        "action_badge": PREEMPTION_ACTION_BADGE,
    }
    return render_page(request, "scheduling/cycle_detail.html", context)
