"""The what-if page (/what-if/): change a queue (or paste a tree), replay recorded history, compare.

Every role may run a what-if: nothing is saved. The form posts through htmx and gets back the
form and the result as one fragment, so errors sit next to their field; a plain POST (the queue
edit page's "Simulate this change" button) gets the whole page.
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from kaiweb.core.choices import RESOURCES
from kaiweb.org.models import Department, NodePool, OwnerQueue, Project
from kaiweb.queues.models import Queue
from kaiweb.ui import charts
from kaiweb.ui.pages import render_page
from kaiweb.whatif import replay as whatif
from kaiweb.whatif.pools import ENTRY_FIELDS

WINDOW_CHOICES = [(1, "last hour"), (6, "last 6 hours"), (24, "last 24 hours"), (72, "last 3 days"),
                  (168, "last 7 days")]
# (result key, label, unit kind, which way is better for the queue: -1 lower, +1 higher)
COLUMNS = [
    ("queueing_delay_mean_s", "Mean delay", "seconds", -1),
    ("queueing_delay_p95_s", "p95 delay", "seconds", -1),
    ("jct_mean_s", "Mean JCT", "seconds", -1),
    ("gpu_hours", "GPU-h (finished)", "number", 1),
    ("allocated_gpus_avg", "Alloc. GPUs (avg)", "number", 1),
    ("fair_share_gpus_avg", "Fair share (avg)", "number", 1),
    ("preemptions", "Preemptions", "count", -1),
]
SUMMARY = [
    ("queueing_delay_mean_s", "Mean queueing delay", "seconds", -1),
    ("jct_mean_s", "Mean JCT", "seconds", -1),
    ("jain_fairness_vs_quota", "Jain's index (vs quota)", "ratio", 1),
    ("gpu_utilisation", "GPU utilisation", "percent", 1),
    ("preempted_jobs", "Preempted jobs", "count", -1),
]


class WhatIfForm(forms.Form):
    """One queue's new values (blank = unchanged), a department's or project's in one node pool, or a whole tree
    as Queue CRD YAML; the window."""

    mode = forms.ChoiceField(choices=[("fields", "One queue (fields below)"),
                                      ("owner", "A department's or project's queue in one node pool"),
                                      ("yaml", "Paste a YAML tree")],
                             initial="fields", required=False, label="What to change")
    owner = forms.ChoiceField(required=False, label="Department or project",
                              help_text="With a node pool: its queue there, replayed on the pool's shard.")
    pool = forms.ChoiceField(required=False, label="Node pool")
    queue = forms.ChoiceField(required=False, help_text="The leaf or parent queue to change.")
    priority = forms.IntegerField(required=False, help_text="Higher is served first among siblings.")
    window_hours = forms.TypedChoiceField(choices=WINDOW_CHOICES, coerce=float, initial=24, label="Recorded window",
                                          required=False)
    yaml = forms.CharField(required=False, label="Queue CRD YAML", widget=forms.Textarea(
        attrs={"rows": 10, "spellcheck": "false", "placeholder": "apiVersion: scheduling.run.ai/v2\nkind: Queue\n..."}),
        help_text="One or more Queue documents; queues not in the file keep their current values.")

    def __init__(self, *args: Any, queues: list[Queue], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queues = {q.name: q for q in queues}
        self.fields["queue"].choices = [("", "— choose a queue —")] + [(q.name, q.name) for q in queues]
        self.fields["owner"].choices = [("", "— choose an owner —"), *_owner_choices()]
        self.fields["pool"].choices = [("", "— choose a node pool —"),
                                       *((n, n) for n in NodePool.objects.order_by("name").values_list(
                                           "name", flat=True).distinct())]
        # Choosing an owner and a pool reloads the form with the owner's current numbers there (htmx, a GET).
        for name in ("owner", "pool"):
            self.fields[name].widget.attrs.update({
                "hx-get": reverse("whatif:page"), "hx-trigger": "change", "hx-target": "#whatif",
                "hx-swap": "innerHTML", "hx-include": "#id_owner, #id_pool",
            })
        # Choosing a queue reloads the form with that queue's current values (htmx, a GET).
        self.fields["queue"].widget.attrs.update({
            "hx-get": reverse("whatif:page"), "hx-trigger": "change", "hx-target": "#whatif",
            "hx-swap": "innerHTML", "hx-include": "this",
        })
        for r in RESOURCES:
            for part, label in (("quota", "quota"), ("limit", "limit"), ("over_quota_weight", "weight")):
                self.fields[f"{r}_{part}"] = forms.FloatField(
                    required=False, label=f"{r} {label}", widget=forms.NumberInput(attrs={"step": "any"}))

    def resource_rows(self) -> list[tuple[str, list[Any]]]:
        units = {"cpu": "cpu (millicores)", "memory": "memory (MB)", "gpu": "gpu (devices)"}
        return [(units.get(r, r), [self[f"{r}_{p}"] for p in ("quota", "limit", "over_quota_weight")])
                for r in RESOURCES]

    def clean_queue(self) -> str:
        name = self.cleaned_data.get("queue") or ""
        return name

    def changes(self) -> dict[str, dict[str, Any]]:
        """The fields whose value differs from the chosen queue's, as {queue: {field: value}}."""
        queue = self.queues[self.cleaned_data["queue"]]
        out: dict[str, Any] = {}
        for name in ["priority", *whatif.RESOURCE_FIELDS]:
            value = self.cleaned_data.get(name)
            if value is None:
                continue
            if value != getattr(queue, name):
                out[name] = value
        return {queue.name: out}

    def org(self) -> dict[str, Any]:
        """The owner's entry for the chosen pool, as `kaiweb.whatif.pools` takes it (blank numbers kept)."""
        kind, _, name = self.cleaned_data["owner"].partition(":")
        entry: dict[str, Any] = {"pool": self.cleaned_data.get("pool") or ""}
        if self.cleaned_data.get("priority") is not None:
            entry["priority"] = self.cleaned_data["priority"]
        for r in RESOURCES:
            numbers = {part: self.cleaned_data.get(f"{r}_{field}") for part, field in ENTRY_FIELDS.items()}
            numbers = {k: v for k, v in numbers.items() if v is not None}
            if numbers:
                entry[r] = numbers
        return {kind: name, "entries": [entry]}


def _owner_choices() -> list[tuple[str, str]]:
    departments = [(f"department:{n}", f"department {n}") for n in Department.objects.values_list("name", flat=True)]
    projects = [(f"project:{n}", f"project {n}") for n in Project.objects.values_list("name", flat=True)]
    return departments + projects


#: The org what-if's input paths → the form's fields (`org.entries[0].gpu.deserved` → gpu_quota).
ORG_FIELDS = {"org.department": "owner", "org.project": "owner", "org": "owner", "org.entries[0].pool": "pool",
              "org.entries[0].priority": "priority",
              **{f"org.entries[0].{r}.{part}": f"{r}_{field}" for r in RESOURCES for part, field in ENTRY_FIELDS.items()}}


def _owner_queue(owner: str, pool: str) -> Queue | None:
    """The queue the owner ("department:<name>" or "project:<name>") has in the node pool, if any."""
    kind, _, name = owner.partition(":")
    if kind not in ("department", "project") or not name or not pool:
        return None
    found = OwnerQueue.objects.select_related("queue").filter(**{f"{kind}__name": name}, node_pool__name=pool).first()
    return found.queue if found else None


def _initial(queue: Queue | None) -> dict[str, Any]:
    if queue is None:
        return {"mode": "fields", "window_hours": 24}
    values: dict[str, Any] = {"mode": "fields", "window_hours": 24, "queue": queue.name, "priority": queue.priority}
    for f in whatif.RESOURCE_FIELDS:
        v = getattr(queue, f)
        values[f] = int(v) if float(v).is_integer() else v
    return values


def _put_errors(form: WhatIfForm, errors: dict[str, list[str]]) -> None:
    """The service's error paths (``changes.<queue>.<field>``, ``yaml`` …) onto the form's fields."""
    for key, messages in errors.items():
        parts = key.split(".")
        target: str | None
        if key in ORG_FIELDS:
            target = ORG_FIELDS[key]
        elif parts[0] == "changes" and len(parts) >= 3 and parts[2] in form.fields:
            target = parts[2]
        elif parts[0] == "changes" and len(parts) == 2:
            target = "queue"
        elif parts[0] in form.fields and len(parts) == 1:
            target = parts[0]
        else:
            target = None
        for msg in messages:
            form.add_error(target, msg if target else f"{key}: {msg}")


def _fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "seconds":
        a = abs(value)
        if a < 120:
            return f"{value:.0f} s"
        if a < 2 * 3600:
            return f"{value / 60:.1f} min"
        return f"{value / 3600:.1f} h"
    if kind == "percent":
        return f"{value * 100:.1f}%"
    if kind == "count":
        return f"{value:.0f}"
    if kind == "ratio":
        return f"{value:.3f}"
    return f"{value:.2f}"


def _cell(now: float | None, changed: float | None, delta: float | None, kind: str, better: int) -> dict[str, Any]:
    tone = ""
    if delta is not None and not math.isclose(delta, 0.0, abs_tol=1e-6):
        tone = "better" if delta * better > 0 else "worse"
    sign = "+" if delta is not None and delta > 0 else ""
    if delta is None:
        # One run has no figure (no job of the queue started or finished there): no difference to show.
        shown = "0" if now is None and changed is None else "n/a"
    else:
        shown = sign + _fmt(delta, kind) if tone else "0"
    return {"now": _fmt(now, kind), "changed": _fmt(changed, kind), "tone": tone, "delta": shown}


def present(result: dict[str, Any]) -> dict[str, Any]:
    """Display rows of a what-if result: formatted values and coloured differences."""
    rows = []
    for q in result["queues"]:
        a, b, d = q["current"] or {}, q["changed"] or {}, q["difference"]
        rows.append({
            "queue": q["queue"], "edited": q["edited"], "jobs": _fmt(a.get("jobs") or b.get("jobs"), "count"),
            "cells": [_cell(a.get(k), b.get(k), d.get(k), kind, better) for k, _, kind, better in COLUMNS],
        })
    s = result.get("summary") or {}
    summary = [
        {"label": label, **_cell(s["current"].get(k), s["changed"].get(k), s["difference"].get(k), kind, better)}
        for k, label, kind, better in SUMMARY
    ] if s else []
    order = [q["queue"] for q in result["queues"]]
    durations = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in result["jobs"]["durations"].items())
    return {"rows": rows, "summary": summary, "columns": [c[1] for c in COLUMNS], "durations_text": durations,
            "chart": charts.whatif_allocation(result.get("timeline") or {}, order),
            "waits": _waits(result.get("start_estimates"))}


def _waits(estimated: dict[str, Any] | None) -> dict[str, Any] | None:
    """Display rows of the live side of a what-if: each queue's waiting jobs' p50 and p80 waits, now → changed
    (shorter is better; "–": beyond the estimator's horizon)."""
    if not estimated:
        return None
    rows = []
    for q in estimated.get("queues") or []:
        a, b = q.get("current") or {}, q.get("changed") or {}
        cells = []
        for key in ("p50_wait_seconds", "p80_wait_seconds"):
            now, new = a.get(key), b.get(key)
            cell = _cell(now, new, None if now is None or new is None else new - now, "seconds", -1)
            if (now is None) != (new is None):  # one side starts within the horizon, the other not
                cell.update(tone="worse" if new is None else "better",
                            delta="beyond the horizon" if new is None else "within the horizon")
            cells.append(cell)
        rows.append({"queue": q["queue"], "edited": q.get("edited"), "jobs": q.get("jobs"), "cells": cells})
    return {"rows": rows, "note": estimated.get("note", ""), "samples": estimated.get("samples", 0),
            "at": estimated.get("at")}


def page(request: HttpRequest) -> HttpResponse:
    """GET: the form (prefilled from ?queue=, or from ?owner=&pool=: that owner's queue in the pool); POST: run
    the what-if and show it, nothing saved."""
    queues = list(Queue.objects.select_related("parent").order_by("name"))
    by_name = {q.name: q for q in queues}
    chosen = by_name.get(request.GET.get("queue", ""))
    context: dict[str, Any] = {"result": None}
    if request.method == "POST":
        data = request.POST.copy()
        if not data.get("queue") and chosen is not None:
            data["queue"] = chosen.name  # the queue edit page posts its fields, not the queue's name
        if not data.get("mode"):
            data["mode"] = "fields"
        if not data.get("window_hours"):
            data["window_hours"] = "24"  # what the run uses without one: the form shows the same
        form = WhatIfForm(data, queues=queues)
        if form.is_valid():
            _run(request, form, context)
    elif request.GET.get("owner"):
        owner, pool = request.GET.get("owner", ""), request.GET.get("pool", "")
        initial = _initial(_owner_queue(owner, pool))
        initial.update(mode="owner", owner=owner, pool=pool)
        initial.pop("queue", None)
        form = WhatIfForm(initial=initial, queues=queues)
    else:
        form = WhatIfForm(initial=_initial(chosen), queues=queues)
    context["form"] = form
    return render_page(request, "whatif/page.html", context, partial="whatif/partials/body.html")


def _run(request: HttpRequest, form: WhatIfForm, context: dict[str, Any]) -> None:
    """Check the inputs and send the what-if to a worker; the page then polls `run_status`."""
    from kaiweb.whatif import runs as whatif_runs
    from kaiweb.whatif import tasks as whatif_tasks

    data = form.cleaned_data
    window_hours = data.get("window_hours") or 24.0
    try:
        if data.get("mode") == "yaml":
            run = whatif_tasks.submit(request.user, yaml=data.get("yaml") or "", window_hours=window_hours)
        elif data.get("mode") == "owner":
            missing = [(f, what) for f, what in (("owner", "department or project"), ("pool", "node pool"))
                       if not data.get(f)]
            for f, what in missing:
                form.add_error(f, f"choose the {what}")
            if missing:
                return
            run = whatif_tasks.submit(request.user, org=form.org(), window_hours=window_hours)
        else:
            if not data.get("queue"):
                form.add_error("queue", "choose the queue to change")
                return
            run = whatif_tasks.submit(request.user, changes=form.changes(), window_hours=window_hours)
    except whatif.WhatIfInputError as exc:
        _put_errors(form, exc.message_dict)
        return
    except whatif_runs.TooManyRuns as exc:
        form.add_error(None, str(exc))
        return
    run.refresh_from_db()
    context.update(_run_context(run))


def _run_context(run: Any) -> dict[str, Any]:
    from django.conf import settings

    context: dict[str, Any] = {"run": run, "time_limit": settings.KAI_WHATIF_TIME_LIMIT_S, "result": None}
    result = run.result
    if result is not None and "pools" in result:
        # A department's or project's change: one comparison per node pool; the page draws the first
        # (it asks for one pool), the API gives them all.
        context["pool_names"] = [p["pool"] for p in result["pools"]]
        result = result["pools"][0]["result"] if result["pools"] else None
    if result is not None:
        context["result"] = result
        context.update(present(result))
    return context


def run_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The result area of one of the user's what-if runs (polled by the page until it is finished)."""
    from django.shortcuts import get_object_or_404
    from django.template.loader import render_to_string

    from kaiweb.accounts import roles
    from kaiweb.whatif.models import WhatIfRun

    runs = WhatIfRun.objects.all() if roles.is_platform_admin(request.user) else WhatIfRun.objects.filter(
        user=request.user)
    run = get_object_or_404(runs, pk=pk)
    context = _run_context(run)
    summary = render_to_string("whatif/partials/summary.html", context, request=request)
    below = render_to_string("whatif/partials/below.html", context, request=request)
    return HttpResponse(f'<div id="whatif-summary-body" hx-swap-oob="innerHTML">{summary}</div>'
                        f'<div id="whatif-below" hx-swap-oob="innerHTML">{below}</div>')
