"""Workload pages: the filterable list and one workload with its pods, placement, why-pending and history."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, FloatField, Prefetch, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404

from kaiweb.scheduling.choices import PREEMPTION_ACTION_BADGE, CycleStatus, DecisionKind
from kaiweb.scheduling.selectors import places_and_estimates
from kaiweb.ui.pages import (
    active_filters,
    configure_table,
    filter_context,
    filter_queryset,
    render_page,
)
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, WORKLOAD_STATE_BADGE
from kaiweb.workloads.models import Workload
from kaiweb.workloads.tables import WorkloadTable
from scheduler_core import reasons as reason_codes


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
    shown = [row.record.pk for row in table.page.object_list]
    table.figures = pod_figures(shown)
    table.places, table.estimates = places_and_estimates(shown)
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
    from kaiweb.scheduling.models import Decision, PendingReason, PreemptionEvent, SchedulingCycle

    workload = get_object_or_404(Workload.objects.select_related("queue", "priority_class", "cluster"), pk=pk)
    pods = list(workload.pods.select_related("node").order_by("name"))
    reasons = list(PendingReason.objects.filter(workload=workload).select_related("cycle")
                   .order_by("-recorded_at", "-id")[:50])
    current = next((r for r in reasons if r.is_current), None)
    # A current reason is written when it changes; the latest cycle is when it was last found so.
    latest_cycle = (SchedulingCycle.objects.filter(shard__cluster_id=workload.cluster_id,
                                                   status=CycleStatus.SUCCEEDED).order_by("-pk").first()
                    if current is not None else None)
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
    waiting = workload.state in ("pending", "partial")
    line = places_and_estimates([workload.pk]) if waiting else ({}, {})
    context = {
        "workload": workload,
        "place": line[0].get(workload.pk),
        "estimate": line[1].get(workload.pk),
        "pods": pods,
        "current_reason": current if workload.state in ("pending", "partial") else None,
        "latest_cycle": latest_cycle,
        # pipelined by the newest cycle that decided on it: waiting for what is being released
        "pipelined": decisions[0] if decisions and decisions[0].kind == DecisionKind.PIPELINE else None,
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
    """Submission, starts, evictions, why-pending changes and decisions as one timeline per job, newest first.

    A cycle's decisions of one kind are one row naming its pods and nodes; an eviction that has a
    preemption record is shown once, as the preemption (all its pods in one row); and the same row
    repeated over consecutive cycles ("Pipeline … waits") is folded into one with a count and a span."""
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
    shown_as_preemption = {e.decision_id for e in preemptions if e.decision_id}
    per_cycle: dict[tuple[int, str], list[Any]] = {}
    for d in decisions:
        if d.pk in shown_as_preemption:
            continue
        per_cycle.setdefault((d.cycle_id, d.kind), []).append(d)
    for (cycle_id, _kind), group in per_cycle.items():
        first = group[0]
        pods = sorted({d.pod_name for d in group if d.pod_name})
        nodes = sorted({d.node_name for d in group if d.node_name})
        texts = sorted({d.message or d.reason for d in group} - {""})
        events.append({"at": max(d.applied_at or d.cycle.started_at for d in group),
                       "colour": "red" if first.kind == "evict" else "green",
                       "what": f"{first.get_kind_display()} {_pods_phrase(pods)}".strip(),
                       "text": (f"on {', '.join(nodes)}. " if nodes else "") + "; ".join(texts),
                       "cycle": cycle_id})
    per_preemption: dict[tuple[Any, ...], list[Any]] = {}
    for e in preemptions:
        victim = e.victim_id == workload.pk
        key = (e.cycle_id, victim, e.action, e.victim_ref if not victim else e.preemptor_ref, e.reason)
        per_preemption.setdefault(key, []).append(e)
    for (_cycle, victim, _action, _other, _reason), group in per_preemption.items():
        e = group[0]
        pods = f" ({len(group)} pods)" if len(group) > 1 else ""
        if victim:
            text = f"evicted{pods} ({e.get_action_display()}) for {e.preemptor_ref or 'no preemptor'}: {e.message or e.reason}"
        else:
            text = f"evicted {e.victim_ref}{pods} ({e.get_action_display()}): {e.message or e.reason}"
        events.append({"at": max(x.at for x in group), "colour": "red", "what": "Preempted" if victim else "Preemptor",
                       "text": text, "preemption": e.pk, "cycle": e.cycle_id})
    events.sort(key=lambda e: e["at"], reverse=True)
    return _fold_repeats(events)


def _pods_phrase(pods: list[str]) -> str:
    if len(pods) <= 1:
        return pods[0] if pods else ""
    if len(pods) <= 3:
        return f"{len(pods)} pods ({', '.join(pods)})"
    return f"{len(pods)} pods ({pods[0]} … {pods[-1]})"


def _fold_repeats(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive rows that say the same thing become one row with a count and the time span."""
    out: list[dict[str, Any]] = []
    for e in events:
        last = out[-1] if out else None
        if last is not None and last["what"] == e["what"] and last["text"] == e["text"] and "preemption" not in e:
            last["count"] = last.get("count", 1) + 1
            last["since"] = e["at"]  # newest first: this one is older
            continue
        out.append(dict(e))
    return out


# Plain-words headlines for the engine's pending-reason codes (scheduler_core.reasons, the one
# vocabulary); the engine's own message, shown under the headline, carries the numbers.
REASON_HEADLINES = {
    reason_codes.QUEUE_OVER_LIMIT: "Its queue (or a parent) is at its limit",
    reason_codes.NON_PREEMPTIBLE_OVER_QUOTA: "A non-preemptible workload may only use its queue's quota",
    reason_codes.NO_NODE_FITS: "No node has room for its pods",
    reason_codes.NO_NODE_MATCHES: "No node accepts its pods (taints, selectors, affinity or cordons)",
    reason_codes.TOPOLOGY_UNSATISFIED: "No topology domain has room for the whole gang",
    reason_codes.TOPOLOGY_UNKNOWN: "Its topology constraint names a topology or level that does not exist",
    reason_codes.NOT_READY: "Not all of its pods exist yet",
    reason_codes.NOT_ATTEMPTED: "The scheduler did not get to it in this cycle",
    reason_codes.INVALID: "The scheduler could not read this workload",
    reason_codes.PREEMPTION_DELAY: "It waits for its preemption delay before it may evict others",
    reason_codes.SESSION_CAP: "The cycle reached its limit of binds or evictions",
    reason_codes.PREEMPT_NON_PREEMPTIBLE_OVER_QUOTA: "A non-preemptible workload may only use its queue's quota",
}
PREFIX_HEADLINES = (
    (reason_codes.RECLAIM_PREFIX, "It could not take resources back from queues above their fair share"),
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
