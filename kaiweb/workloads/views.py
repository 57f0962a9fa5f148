"""Workload pages: the filterable list and one workload with its pods, placement, why-pending and history."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, FloatField, Prefetch, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404

from kaiweb.dashboard.pages import (
    active_filters,
    configure_table,
    filter_context,
    filter_queryset,
    render_page,
)
from kaiweb.scheduling.choices import PREEMPTION_ACTION_BADGE
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, WORKLOAD_STATE_BADGE
from kaiweb.workloads.models import Workload
from kaiweb.workloads.tables import WorkloadTable


def _filterset_class() -> Any:
    """The API's WorkloadFilterSet: `?gpu_kind=` and the rest mean the same in the page and the API."""
    from kaiweb.workloads.filtersets import WorkloadFilterSet

    return WorkloadFilterSet


def workload_queryset() -> Any:
    """Workloads with their queue, class and current why-pending (pod figures come per page)."""
    from kaiweb.scheduling.models import PendingReason

    return (
        Workload.objects.select_related("queue", "priority_class")
        .prefetch_related(Prefetch("pending_reasons", queryset=PendingReason.objects.filter(is_current=True),
                                   to_attr="current_reasons"))
    )


def pod_figures(workload_ids: list[int]) -> dict[int, dict[str, float]]:
    """Pod count and GPUs asked for, per workload of one page: one aggregate query.

    Aggregating only the shown page keeps the list's count and sort queries free of the pods join,
    which is what makes a 4000-workload list cheap.
    """
    rows = (Workload.objects.filter(pk__in=workload_ids).values("pk").annotate(
        pods_n=Count("pods"),
        gpus=Coalesce(Sum("pods__gpu"), Value(0.0), output_field=FloatField())
        + Coalesce(Sum(F("pods__gpu_fraction") * F("pods__gpu_devices")), Value(0.0), output_field=FloatField()),
    ))
    return {row["pk"]: {"pods": row["pods_n"], "gpus": row["gpus"]} for row in rows}


def workload_list(request: HttpRequest) -> HttpResponse:
    """All workloads, filtered through the API's WorkloadFilterSet, sortable and paginated."""
    filterset, qs = filter_queryset(request, _filterset_class(), workload_queryset())
    table = WorkloadTable(qs)
    table_context = configure_table(request, table)
    table.figures = pod_figures([row.record.pk for row in table.page.object_list])
    counts = {row["state"]: row["n"] for row in Workload.objects.values("state").annotate(n=Count("id"))}
    from kaiweb.queues.models import PriorityClass, Queue

    leaf_names = list(Queue.objects.filter(children__isnull=True).order_by("name").values_list("name", flat=True))
    context = {
        "filterset": filterset,
        **filter_context(request, filterset, ["q", "queue", "state", "priority_class", "gpu_kind", "pending_reason"],
                         choices={"queue": [(n, n) for n in leaf_names],
                                  "priority_class": [(n, n) for n in PriorityClass.objects.order_by("-value")
                                                     .values_list("name", flat=True)]},
                         labels={"q": "Search", "queue": "Queue", "priority_class": "Priority",
                                 "pending_reason": "Why-pending code"}),
        "filtered": active_filters(filterset),
        "counts": counts,
        "total": sum(counts.values()),
        **table_context,
    }
    return render_page(request, "workloads/list.html", context, partial="workloads/partials/list_panel.html")


def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One workload: pods and where they run, why it is pending (in words, with the numbers), history."""
    from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent

    workload = get_object_or_404(Workload.objects.select_related("queue", "priority_class", "cluster"), pk=pk)
    pods = list(workload.pods.select_related("node").order_by("name"))
    reasons = list(PendingReason.objects.filter(workload=workload).select_related("cycle")
                   .order_by("-recorded_at", "-id")[:50])
    current = next((r for r in reasons if r.is_current), None)
    decisions = list(Decision.objects.filter(workload=workload).select_related("cycle").order_by("-cycle__started_at", "-id")[:50])
    preemptions = list(
        PreemptionEvent.objects.filter(Q(victim=workload) | Q(preemptor=workload))
        .select_related("victim_queue", "preemptor_queue").order_by("-at", "-id")[:50]
    )
    placement: dict[str, dict[str, Any]] = {}
    for p in pods:
        if p.node_id and p.state in ALLOCATED_POD_STATES:
            slot = placement.setdefault(p.node.name, {"node": p.node, "pods": 0, "gpus": 0.0})
            slot["pods"] += 1
            slot["gpus"] += p.gpu_request
    history = _history(workload, reasons, decisions, preemptions)
    context = {
        "workload": workload,
        "pods": pods,
        "current_reason": current if workload.state in ("pending", "partial") else None,
        "stale_reason": current if workload.state not in ("pending", "partial") else None,
        "explanation": explain(current, workload) if current else None,
        "placement": sorted(placement.values(), key=lambda s: s["node"].name),
        "history": history,
        "gpu_total": sum(p.gpu_request for p in pods),
        "cpu_total": sum(p.cpu for p in pods),
        "memory_total": sum(p.memory for p in pods),
        "state_badge": WORKLOAD_STATE_BADGE,
        "action_badge": PREEMPTION_ACTION_BADGE,
    }
    return render_page(request, "workloads/detail.html", context)


def _number(value: Any) -> Any:
    """Floats as short as they can be (16.0 → 16, 0.3333333 → 0.333)."""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if not value.is_integer() else f"{int(value):,}"
    return value


def _history(workload: Workload, reasons: list[Any], decisions: list[Any], preemptions: list[Any]) -> list[dict[str, Any]]:
    """Submission, starts, evictions, why-pending changes and decisions as one timeline, newest first."""
    events: list[dict[str, Any]] = [{"at": workload.submitted_at, "colour": "blue", "what": "Submitted",
                                     "text": f"to queue {workload.queue.name}"}]
    if workload.last_start_at:
        events.append({"at": workload.last_start_at, "colour": "green", "what": "Started", "text": "last start"})
    if workload.finished_at:
        events.append({"at": workload.finished_at, "colour": "", "what": "Finished",
                       "text": workload.get_state_display()})
    for r in reasons:
        events.append({"at": r.recorded_at, "colour": "orange", "what": f"Pending: {r.reason}", "text": r.message,
                       "cycle": r.cycle_id})
    for d in decisions:
        events.append({"at": d.applied_at or d.cycle.started_at, "colour": "red" if d.kind == "evict" else "green",
                       "what": f"{d.get_kind_display()} {d.pod_name}".strip(),
                       "text": (f"on {d.node_name}. " if d.node_name else "") + (d.message or d.reason),
                       "cycle": d.cycle_id})
    for e in preemptions:
        if e.victim_id == workload.pk:
            text = f"evicted ({e.get_action_display()}) for {e.preemptor_ref or 'no preemptor'}: {e.message or e.reason}"
        else:
            text = f"evicted {e.victim_ref} ({e.get_action_display()}): {e.message or e.reason}"
        events.append({"at": e.at, "colour": "red", "what": "Preempted" if e.victim_id == workload.pk else "Preemptor",
                       "text": text, "preemption": e.pk})
    events.sort(key=lambda e: e["at"], reverse=True)
    return events


# Plain-words headlines for the engine's reason codes (and KAI's, as a Kubernetes mirror reports
# them); the engine's own message, shown under the headline, carries the numbers.
REASON_HEADLINES = {
    "queue-over-limit": "Its queue (or a parent) is at its limit",
    "non-preemptible-over-quota": "A non-preemptible workload may only use its queue's quota",
    "no-node-fits": "No node has room for its pods",
    "topology-unsatisfied": "No topology domain has room for the whole gang",
    "not-ready": "Not all of its pods exist yet",
    "not-attempted": "The scheduler did not get to it in this cycle",
    "invalid": "The scheduler could not read this workload",
    "InvalidObject": "The scheduler could not read this workload",
    "preemption-delay": "It waits for its preemption delay before it may evict others",
    "session-cap": "The cycle reached its limit of binds or evictions",
    "OverLimit": "Its queue is at its limit",
    "NonPreemptibleOverQuota": "A non-preemptible workload may only use its queue's quota",
    "NotReady": "Not all of its pods exist yet",
    "QueueDoesNotExist": "Its queue does not exist",
    "PodSchedulingErrors": "Some pods cannot be placed",
}
PREFIX_HEADLINES = (
    ("reclaim-", "It could not take resources back from queues above their fair share"),
    ("preempt-", "No lower-priority workload in its queue could make room"),
    ("consolidation-", "Moving other workloads would not make room either"),
)


def headline(code: str) -> str:
    """The plain-words headline of a reason code."""
    if code in REASON_HEADLINES:
        return REASON_HEADLINES[code]
    for prefix, text in PREFIX_HEADLINES:
        if code.startswith(prefix):
            return text
    return code.replace("-", " ").replace("_", " ").capitalize()


def explain(reason: Any, workload: Workload) -> dict[str, Any]:
    """The current why-pending as a headline, the engine's sentence and the numbers behind it."""
    details = reason.details if isinstance(reason.details, dict) else {}
    numbers = []
    for key, value in sorted(details.items()):
        if isinstance(value, (dict, list)):
            continue
        numbers.append((key.replace("_", " "), _number(value)))
    nested = {k.replace("_", " "): {kk.replace("_", " "): _number(vv) for kk, vv in v.items()
                                    if not isinstance(vv, (dict, list))}
              for k, v in details.items() if isinstance(v, dict)}
    # Further attempts (e.g. reclaim after allocate failed) come as a list of {code, message, ...}.
    also = [{"headline": headline(str(item.get("code", ""))), "message": item.get("message", "")}
            for value in details.values() if isinstance(value, list)
            for item in value if isinstance(item, dict) and item.get("message")]
    return {
        "headline": headline(reason.reason),
        "also": also,
        "code": reason.reason,
        "message": reason.message,
        "numbers": numbers,
        "nested": nested,
        "since": reason.recorded_at,
    }
