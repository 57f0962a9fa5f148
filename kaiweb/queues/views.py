"""Queue pages: the tree (and the `kubectl get queues` table), one queue, and editing it with a preview."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from kaiweb.core.choices import RESOURCES
from kaiweb.queues.forms import QueueCreateForm, QueueForm
from kaiweb.queues.models import Queue
from kaiweb.scheduling import fairshare
from kaiweb.scheduling.choices import PREEMPTION_ACTION_BADGE
from kaiweb.ui import access, charts, queries
from kaiweb.ui.formatting import UNIT_LABEL
from kaiweb.ui.pages import render_page
from kaiweb.workloads.choices import WORKLOAD_STATE_BADGE
from scheduler_core.units import to_queue_units

VIEWS = ("tree", "table")
# The form takes the Queue CRD's units, so its rows say which.
EDIT_LABEL = {"cpu": "CPU (millicores)", "memory": "Memory (MB)", "gpu": "GPU (devices)"}


def _resource(request: HttpRequest) -> str:
    r = request.GET.get("resource", "gpu")
    return r if r in RESOURCES else "gpu"


def tree(request: HttpRequest) -> HttpResponse:
    """The whole hierarchy with per-resource bars, or the flat `kubectl get queues` table."""
    view = request.GET.get("view", "tree")
    if view not in VIEWS:
        view = "tree"
    rows = queries.queue_tree(request.user)
    totals = queries.cluster_totals(rows)
    context = {
        "rows": rows,
        "view": view,
        "totals": totals,
        "over_count": sum(1 for r in rows if r.over_fair_share),
        "leaf_count": sum(1 for r in rows if r.is_leaf),
        "resources": RESOURCES,
        "unit_label": UNIT_LABEL,
        "can_edit_any": access.editable_queue_ids(request.user) is None or bool(access.editable_queue_ids(request.user)),
    }
    return render_page(request, "queues/tree.html", context, partial="queues/partials/tree_body.html")


def _ancestors(queue: Queue) -> list[Queue]:
    """Root first; one query for the whole parent map."""
    parent_of = dict(Queue.objects.values_list("pk", "parent_id"))
    names = dict(Queue.objects.values_list("pk", "name"))
    out, cur, seen = [], parent_of.get(queue.pk), set()
    while cur is not None and cur not in seen:
        seen.add(cur)
        out.append((cur, names[cur]))
        cur = parent_of.get(cur)
    return [Queue(pk=pk, name=name) for pk, name in reversed(out)]


def _subtree_ids(queue: Queue) -> list[int]:
    kids: dict[int | None, list[int]] = {}
    for pk, parent_id in Queue.objects.values_list("pk", "parent_id"):
        kids.setdefault(parent_id, []).append(pk)
    out, stack = [], [queue.pk]
    while stack:
        pk = stack.pop()
        if pk in out:
            continue
        out.append(pk)
        stack.extend(kids.get(pk, []))
    return out


def detail(request: HttpRequest, name: str) -> HttpResponse:
    """One queue: settings, figures now, allocated vs fair share over time, the fair-share
    arithmetic with its numbers, its workloads and its preemptions both ways."""
    from kaiweb.scheduling.models import PreemptionEvent
    from kaiweb.scheduling.selectors import queue_depth
    from kaiweb.workloads.models import Workload

    queue = get_object_or_404(Queue.objects.select_related("parent"), name=name)
    resource = _resource(request)
    status = queries.latest_statuses([queue.pk]).get(queue.pk)
    figures = queries.queue_resources(queue, status)
    children = list(queue.children.order_by("name"))
    subtree = _subtree_ids(queue)
    history = queries.status_history(queue)
    scale = 1000.0 if resource in ("cpu", "memory") else 1.0
    chart = charts.queue_share_history(history, resource, scale, UNIT_LABEL[resource])
    workloads = list(
        Workload.objects.filter(queue_id__in=subtree).select_related("queue", "priority_class")
        .order_by("-submitted_at", "-id")[:15]
    )
    workload_count = Workload.objects.filter(queue_id__in=subtree).count()
    as_preemptor = list(PreemptionEvent.objects.filter(preemptor_queue=queue).select_related("victim_queue")
                        .order_by("-at", "-id")[:10])
    as_victim = list(PreemptionEvent.objects.filter(victim_queue=queue).select_related("preemptor_queue")
                     .order_by("-at", "-id")[:10])
    arithmetic = _arithmetic(queue, resource)
    subtree_names = set(Queue.objects.filter(pk__in=subtree).values_list("name", flat=True))
    depth = [d for d in queue_depth() if d.queue in subtree_names]
    memberships = list(queue.memberships.select_related("user").order_by("user__username"))
    context = {
        "queue": queue,
        "ancestors": _ancestors(queue),
        "children": children,
        "status": status,
        "figures": figures,
        "resource": resource,
        "resources": RESOURCES,
        "unit_label": UNIT_LABEL,
        "chart": chart,
        "history_len": len(history),
        "workloads": workloads,
        "workload_count": workload_count,
        "as_preemptor": as_preemptor,
        "as_victim": as_victim,
        "arithmetic": arithmetic,
        "queue_depth": depth,
        "memberships": memberships,
        "can_edit": access.can_edit_queue(request.user, queue),
        "state_badge": WORKLOAD_STATE_BADGE,
        "action_badge": PREEMPTION_ACTION_BADGE,
    }
    return render_page(request, "queues/detail.html", context, partial="queues/partials/detail_live.html")


def _arithmetic(queue: Queue, resource: str) -> dict[str, Any]:
    """The division steps of this queue's fair share and the time-based inputs of its siblings."""
    from scheduler_core.proportion import RESOURCES as ENGINE_RESOURCES
    from scheduler_core.proportion import usage_adjusted_weights

    r_index = ENGINE_RESOURCES.index(resource)
    try:
        division = fairshare.divide()
    except Exception as exc:  # noqa: BLE001 - the page must render even if the engine refuses the snapshot
        return {"error": f"The engine could not divide the current snapshot: {exc}"}
    attrs = division.queues.get(queue.name)
    if attrs is None:
        return {"error": "This queue is not in the current snapshot (is its parent missing, or is it outside the shard?)."}
    steps = [s for s in division.steps if s.queue == queue.name and s.resource == resource]
    siblings = [q for q in division.queues.values() if q.parent == attrs.parent]
    siblings.sort(key=lambda q: (-q.priority, q.name))

    def units(x: float) -> float:
        return to_queue_units(resource, x)

    bucket = [q for q in siblings if q.priority == attrs.priority]
    # the engine's weights of the bucket's first over-quota round (every queue wanting more)
    adjusted = usage_adjusted_weights(bucket, r_index, division.k)
    usage = division.usage
    weights = []
    for q in bucket:
        w_norm, p = adjusted.get(q.name, (0.0, 0.0))
        row_usage = usage.rows.get(q.name) if usage is not None else None
        weights.append({"name": q.name, "weight": q.weight[r_index], "w_norm": w_norm, "usage": q.usage[r_index],
                        "adjusted": p, "decayed": row_usage.decayed[r_index] if row_usage else 0.0,  # queue units
                        "is_self": q.name == queue.name})
    p_total = sum(x["adjusted"] for x in weights) or 0.0
    for x in weights:
        x["share"] = x["adjusted"] / p_total if p_total else 0.0
    level_total = units(division.total[r_index] if attrs.parent is None
                        else division.queues[attrs.parent].fair[r_index])
    return {
        "children_division": _children_division(division, attrs, r_index, resource),
        "steps": steps,
        "fair": units(attrs.fair[r_index]),
        "deserved": units(attrs.deserved[r_index]),
        "request": units(attrs.request[r_index]),
        "level_total": level_total,
        "parent": attrs.parent,
        "priority": attrs.priority,
        "siblings": [{"name": q.name, "priority": q.priority, "deserved": units(q.deserved[r_index]),
                      "request": units(q.request[r_index]), "fair": units(q.fair[r_index]),
                      "weight": q.weight[r_index], "is_self": q.name == queue.name} for q in siblings],
        "weights": weights,
        "k": division.k,
        "usage": usage,
        "capacity_decayed": usage.capacity_decayed[r_index] if usage else 0.0,
        "capacity": usage.capacity.get(resource, 0.0) if usage else 0.0,
        "errors": division.errors,
    }


def _children_division(division: Any, attrs: Any, r_index: int, resource: str) -> dict[str, Any] | None:
    """For a parent: what its children receive of its fair share, what is left over, and why each child
    takes no more (at its limit, or it asks for no more). None for a leaf."""
    children = sorted((q for q in division.queues.values() if q.parent == attrs.name), key=lambda q: q.name)
    if not children:
        return None
    eps = 1e-6
    rows = []
    for q in children:
        fair, request, limit = q.fair[r_index], q.request[r_index], q.limit[r_index]
        if limit >= 0 and fair >= limit - eps:
            why = "at its limit"
        elif fair >= request - eps:
            why = "gets all it requests"
        else:
            why = "its part of the division"
        rows.append({"name": q.name, "fair": to_queue_units(resource, fair), "request": to_queue_units(resource, request),
                     "limit": to_queue_units(resource, limit), "why": why})
    given = sum(r["fair"] for r in rows)
    own = to_queue_units(resource, attrs.fair[r_index])
    return {"fair": own, "given": given, "leftover": max(0.0, own - given), "children": rows}


def _edit_context(request: HttpRequest, queue: Queue, form: QueueForm, **extra: Any) -> dict[str, Any]:
    return {"queue": queue, "form": form, "ancestors": _ancestors(queue), "unit_label": UNIT_LABEL,
            "edit_label": EDIT_LABEL, **extra}


def _form_for(request: HttpRequest, queue: Queue, data: Any = None) -> QueueForm:
    return QueueForm(data, instance=queue, editable_ids=access.editable_queue_ids(request.user))


def _refuse(request: HttpRequest, queue: Queue) -> HttpResponse:
    return render(request, "errors/403.html", {
        "reason": f"Your role ({access.role_of(request.user).label}) cannot edit queue {queue.name}: "
                  "queue admins edit only the subtrees they administer.",
    }, status=403)


def edit(request: HttpRequest, name: str) -> HttpResponse:
    """Edit a queue: errors next to the field; the change goes through the control plane's service."""
    from kaiweb.audit.choices import AuditSource
    from kaiweb.queues import services

    queue = get_object_or_404(Queue.objects.select_related("parent"), name=name)
    if not access.can_edit_queue(request.user, queue):
        return _refuse(request, queue)
    if request.method == "POST":
        form = _form_for(request, queue, request.POST)
        if form.is_valid():
            new_parent = form.cleaned_data.get("parent")
            if new_parent is not None and not access.can_edit_queue(request.user, new_parent):
                form.add_error("parent", f"you cannot move a queue under {new_parent.name}: you do not administer it")
            else:
                values = form.changed_values()
                try:
                    change = services.update_queue(queue, values, actor=request.user, source=AuditSource.UI)
                except ValidationError as exc:
                    _errors_to_form(form, exc)
                else:
                    if values:
                        messages.success(request, f"Queue {change.obj.name} saved: {', '.join(sorted(values))} changed.")
                    else:
                        messages.info(request, f"Queue {change.obj.name}: nothing changed.")
                    for warning in change.warnings:
                        messages.warning(request, warning)
                    return redirect("queues:detail", name=change.obj.name)
    else:
        form = _form_for(request, queue)
    return render(request, "queues/edit.html", _edit_context(request, queue, form))


def _errors_to_form(form: QueueForm, exc: ValidationError) -> None:
    """Put the service's errors on the field they name (unknown keys go on top of the form)."""
    if hasattr(exc, "error_dict"):
        for key, errs in exc.error_dict.items():
            target = key if key in form.fields else None
            for e in errs:
                for msg in e.messages:
                    form.add_error(target, msg if target else f"{key}: {msg}")
    else:
        for msg in exc.messages:
            form.add_error(None, msg)


@require_POST
def preview(request: HttpRequest, name: str) -> HttpResponse:
    """The edit form again, with every queue's fair share now and after the change (not saved)."""
    queue = get_object_or_404(Queue.objects.select_related("parent"), name=name)
    if not access.can_edit_queue(request.user, queue):
        return _refuse(request, queue)
    form = _form_for(request, queue, request.POST)
    context: dict[str, Any] = {}
    if form.is_valid():
        # form.instance carries the proposed values but is not saved.
        from kaiweb.queues.services import quota_warnings

        try:
            rows, problems = fairshare.preview(form.instance)
        except Exception as exc:  # noqa: BLE001 - a preview failure is shown, never a 500
            rows, problems = [], [f"the engine could not compute the preview: {exc}"]
        problems = [*quota_warnings(form.instance), *problems]  # the same warnings the save gives
        context.update({"preview_rows": rows, "preview_problems": problems, "previewed": True,
                        "changed_fields": sorted(form.changed_data)})
    else:
        context["previewed"] = False
    ctx = _edit_context(request, queue, form, **context)
    template = "queues/partials/edit_form.html" if getattr(request, "htmx", None) else "queues/edit.html"
    return render(request, template, ctx)


def by_id(request: HttpRequest, pk: int) -> HttpResponse:
    queue = Queue.objects.filter(pk=pk).only("name").first()
    if queue is None:
        raise Http404("no such queue")
    return redirect("queues:detail", name=queue.name)


def create(request: HttpRequest) -> HttpResponse:
    """Add a queue: platform admins anywhere, queue admins under a queue they administer."""
    from kaiweb.audit.choices import AuditSource
    from kaiweb.queues import services

    editable = access.editable_queue_ids(request.user)
    if editable is not None and not editable:
        return render(request, "errors/403.html", {
            "reason": f"Your role ({access.role_of(request.user).label}) cannot add queues: platform admins add "
                      "queues anywhere, queue admins under the queues they administer.",
        }, status=403)
    parent = Queue.objects.filter(name=request.GET.get("parent", "")).first()
    if request.method == "POST":
        form = QueueCreateForm(request.POST, editable_ids=editable)
        if form.is_valid():
            new_parent = form.cleaned_data.get("parent")
            if not access.can_edit_queue(request.user, new_parent):
                form.add_error("parent", "you may add queues only under a queue you administer")
            else:
                try:
                    change = services.create_queue(form.values(), actor=request.user, source=AuditSource.UI)
                except ValidationError as exc:
                    _errors_to_form(form, exc)
                else:
                    messages.success(request, f"Queue {change.obj.name} created.")
                    for warning in change.warnings:
                        messages.warning(request, warning)
                    return redirect("queues:detail", name=change.obj.name)
    else:
        initial = {"parent": parent.pk} if parent else {}
        form = QueueCreateForm(initial=initial, editable_ids=editable)
    return render(request, "queues/create.html", {"form": form, "parent": parent, "edit_label": EDIT_LABEL})
