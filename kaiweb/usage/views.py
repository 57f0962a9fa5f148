"""The usage report: resource-hours per queue, department, project, node pool, GPU type, namespace or user
over a window, stacked chart, CSV export."""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, FloatField, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDay, TruncHour, TruncWeek
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from kaiweb.queues.models import Queue
from kaiweb.reports import dimensions
from kaiweb.ui import charts
from kaiweb.ui.pages import render_page
from kaiweb.usage.forms import UsageReportForm
from kaiweb.usage.models import UsageBucket

# Stored values are queue units × seconds; the report speaks in hours of the display unit.
DIVISOR = {"gpu": 3600.0, "cpu": 3600.0 * 1000, "memory": 3600.0 * 1000}
UNIT = {"gpu": "GPU-hours", "cpu": "core-hours", "memory": "GB-hours"}
#: the chart draws hours per hour of each slot: the average amount held
RATE_UNIT = {"gpu": "GPUs (average)", "cpu": "cores (average)", "memory": "GB (average)"}
STEP_SECONDS = {"hour": 3600, "day": 86400, "week": 7 * 86400}
#: groups read from the leaf buckets' split by namespace, by submitting user or by GPU type
SPLIT_FIELD = {"namespace": "by_namespace", "user": "by_user", "gpu_type": "by_gpu_model"}
#: the filters that keep the queues charged to one pool, department or project
PLACE_FILTERS = dimensions.PLACE_GROUPS
#: the part of a bucket its split does not cover (buckets written before the split was recorded)
UNATTRIBUTED = "(unattributed)"


def _split_rows(qs: Any, group: str, only: str | None = None) -> Iterator[tuple[str, datetime, float]]:
    """(name, slot, value) of each bucket's split by namespace, user or GPU type, the rest as UNATTRIBUTED;
    `only`: that part alone."""
    for slot, value, split in qs.values_list("slot", "value", SPLIT_FIELD[group]).iterator():
        parts = split if isinstance(split, dict) else {}
        if only is not None:
            if parts.get(only):
                yield only, slot, float(parts[only])
            continue
        covered = 0.0
        for name, part in parts.items():
            yield str(name), slot, float(part)
            covered += float(part)
        if value - covered > 1e-6 * max(1.0, value):
            yield UNATTRIBUTED, slot, value - covered


def _tree(rows: list[Queue] | None = None) -> tuple[dict[int, Queue], dict[int, list[int]]]:
    if rows is None:
        rows = list(Queue.objects.only("id", "name", "parent_id", "labels"))
    queues = {q.pk: q for q in rows}
    kids: dict[int, list[int]] = defaultdict(list)
    for q in queues.values():
        if q.parent_id:
            kids[q.parent_id].append(q.pk)
    return queues, kids


def compute_report(data: dict[str, Any]) -> dict[str, Any]:
    """Leaf queues' buckets in the window, bucketed by hour (or day for long windows), grouped.

    Leaves only: accounting also writes parents' buckets (their subtree's sum), which would
    count everything twice. The pool, department and project filters keep the leaves charged there
    (`kaiweb.reports.dimensions`); the GPU-type filter keeps the part of each bucket held on that type.
    A few queries.
    """
    since: datetime = data["since"]
    until: datetime = data["until"]
    resource, group = data["resource"], data["group"]
    queues, kids = _tree(data.get("queue_rows"))
    leaves = [pk for pk in queues if not kids.get(pk)]
    if data.get("queue") is not None:
        stack, keep = [data["queue"].pk], set()
        while stack:
            pk = stack.pop()
            keep.add(pk)
            stack.extend(kids.get(pk, []))
        leaves = [pk for pk in leaves if pk in keep]
    places = data.get("places") or {}
    if not places.keys() >= set(leaves):  # not read by the form, or a queue was made since
        places = dimensions.places(queues.values())
    for name in PLACE_FILTERS:
        if data.get(name):
            leaves = [pk for pk in leaves if pk in places and dimensions.place_of(places[pk], name) == data[name]]
    gpu_type = data.get("gpu_type") or None
    if gpu_type and group in ("namespace", "user"):
        raise ValueError(f"gpu_type: cannot be combined with the grouping per {group}")
    step = data.get("step") or "auto"
    if step == "auto":
        step = "day" if until - since > timedelta(days=8) else "hour"
    trunc = {"hour": TruncHour("start"), "day": TruncDay("start"), "week": TruncWeek("start")}[step]
    in_window = (UsageBucket.objects.filter(resource=resource, start__gte=since, start__lt=until, queue_id__in=leaves)
                 .annotate(slot=trunc))
    divisor = DIVISOR[resource]
    series: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    totals: dict[str, float] = defaultdict(float)
    departments: dict[str, str] = {}
    # The amount of a bucket the report counts: all of it, or the part held on one GPU type.
    counted = Coalesce(Cast(KeyTextTransform(gpu_type, "by_gpu_model"), FloatField()), 0.0) if gpu_type \
        else F("value")

    def queue_points() -> Iterator[tuple[str, datetime, float]]:
        for row in in_window.values("queue_id", "slot").annotate(total=Sum(counted)).order_by("slot"):
            q = queues[row["queue_id"]]
            place = places[q.pk]
            departments[q.name] = place.department
            name = q.name if group == "queue" else dimensions.place_of(place, group)
            if row["total"] or not gpu_type:  # a queue that held nothing of that type is not listed
                yield name, row["slot"], row["total"]

    points = _split_rows(in_window, group, gpu_type if group == "gpu_type" else None) \
        if group in SPLIT_FIELD else queue_points()
    for name, slot, value in points:
        amount = value / divisor
        series[name][slot] += amount
        totals[name] += amount
    hours = max((until - since).total_seconds() / 3600.0, 1e-9)
    grand = sum(totals.values())
    ranked = [n for n, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))]
    # Queues keep the colour they have on every page; the other groups take distinct ones by rank.
    order = None if group == "queue" else ranked
    table = [{"name": n, "department": departments.get(n, n) if group == "queue" else n, "hours": totals[n],
              "colour": charts.queue_colour(n, order),
              "share": (100.0 * totals[n] / grand) if grand else 0.0, "average": totals[n] / hours}
             for n in ranked]
    width = STEP_SECONDS[step]
    now = timezone.now()
    slots = sorted({slot for pts in series.values() for slot in pts})
    # The hours of each slot the window has lived through: the first and the current slot are partial.
    covered = {slot: max(1.0, (min(slot + timedelta(seconds=width), until, now) - max(slot, since)).total_seconds())
               / 3600.0 for slot in slots}
    return {
        "series": {n: sorted(pts.items()) for n, pts in series.items()},
        "order": order,
        "table": table,
        "grand": grand,
        "step": step,
        "unit": UNIT[resource],
        "hours": hours,
        "covered_hours": covered,
        "partial": [s for s in slots if covered[s] < width / 3600.0 - 1e-6],
        "since": since,
        "until": min(until, now),
    }


def usage_report(request: HttpRequest) -> HttpResponse:
    form = UsageReportForm(request.GET or {"window": "7d", "resource": "gpu", "group": "queue"})
    data = None
    if form.is_valid():
        data = form.cleaned_data
    report = compute_report(data) if data else None
    chart = charts.usage_stacked(report["series"], report["covered_hours"], report["partial"],
                                 RATE_UNIT[data["resource"]], (report["since"], report["until"]),
                                 report["order"]) \
        if report else charts.EMPTY
    context = {
        "form": form,
        "report": report,
        "chart": chart,
        "params": data,
        "any_usage": UsageBucket.objects.exists(),
        "user_label": settings.KAI_USER_LABEL,
    }
    return render_page(request, "usage/report.html", context)


def usage_json(request: HttpRequest) -> HttpResponse:
    """The report as JSON, the same numbers as the page and the CSV: per group, each slot's resource-hours,
    the hours of the slot covered and whether it is partial, and the totals."""
    from django.http import JsonResponse

    form = UsageReportForm(request.GET or {"window": "7d", "resource": "gpu", "group": "queue"})
    if not form.is_valid():
        return JsonResponse({k: [str(e) for e in v] for k, v in form.errors.items()}, status=400)
    data = form.cleaned_data
    report = compute_report(data)
    partial = set(report["partial"])
    return JsonResponse({
        "since": data["since"].isoformat(), "until": data["until"].isoformat(), "resource": data["resource"],
        "group": data["group"], "step": report["step"], "unit": report["unit"], "total": round(report["grand"], 4),
        "filters": {k: data[k] for k in (*PLACE_FILTERS, "gpu_type") if data.get(k)},
        "series": {name: [{"slot_start": t.isoformat(), "value": round(v, 4),
                           "covered_hours": round(report["covered_hours"][t], 4), "partial": t in partial}
                          for t, v in pts] for name, pts in sorted(report["series"].items())},
        "totals": [{"name": r["name"], "value": round(r["hours"], 4), "share_pct": round(r["share"], 2)}
                   for r in report["table"]],
    })


def usage_csv(request: HttpRequest) -> HttpResponse:
    """The report's rows as CSV: one line per group and time slot, then a total per group."""
    form = UsageReportForm(request.GET or {"window": "7d", "resource": "gpu", "group": "queue"})
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return HttpResponse(errors, status=400, content_type="text/plain")
    data = form.cleaned_data
    report = compute_report(data)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="usage-{data["resource"]}-{data["since"]:%Y%m%d}-{data["until"]:%Y%m%d}.csv"')
    writer = csv.writer(response)
    writer.writerow([data["group"], "slot_start", report["step"], report["unit"].replace("-", "_")])
    for name in sorted(report["series"]):
        for slot, value in report["series"][name]:
            writer.writerow([name, slot.isoformat(), report["step"], f"{value:.4f}"])
    for row in report["table"]:
        writer.writerow([row["name"], "total", "window", f"{row['hours']:.4f}"])
    return response


def idle_gpus_panel(request: HttpRequest) -> HttpResponse:
    """The idle-GPU finding as a panel (the overview loads it after the page)."""
    from kaiweb.usage.templatetags.gpu_utilization import idle_gpu_panel

    return render(request, "usage/partials/idle_panel.html", idle_gpu_panel())


def node_utilization_panel(request: HttpRequest) -> HttpResponse:
    """GPU utilization per node as a panel (the nodes page loads it after the page)."""
    from kaiweb.usage.templatetags.gpu_utilization import nodes_gpu_utilization

    return render(request, "usage/partials/utilization_nodes.html", nodes_gpu_utilization())
