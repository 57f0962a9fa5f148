"""The numbers of a usage report: inputs read once from the database, lines computed from them alone.

`collect_inputs` reads everything a report needs for one period into a JSON-able snapshot; the
run stores it. `compute_lines(inputs)` is pure (no database, same inputs → same lines), so a past
run's files can always be produced again with the same numbers.

A line is a department (cluster scope), a leaf queue of a department (department scope) or the
queue itself (queue scope); a department is the one `dimensions` charges a queue to (the org's
department, else the top-level queue), as on the usage page, so an org department's queues in every
node pool make one line. Its allocation is the sum of its leaf queues' usage buckets — the usage
page's figures for the same window — also split by node pool. Over-quota time compares, per node
pool, the line's allocation in each bucket with its GPU quota there as it stands when the report runs
(the history of quotas is not recorded): a department over its H100 quota is over quota even while
its A100 quota sits idle.
"""

from __future__ import annotations

import calendar
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from django.db.models import Min

from kaiweb.reports.choices import ReportPeriod, ReportScope

HOUR = 3600.0


def period_window(period: str, at: datetime) -> tuple[datetime, datetime]:
    """The last complete period before `at` (UTC): the previous Monday-to-Monday week or calendar month."""
    at = at.astimezone(UTC)
    midnight = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == ReportPeriod.WEEKLY:
        end = midnight - timedelta(days=midnight.weekday())
        return end - timedelta(days=7), end
    if period == ReportPeriod.MONTHLY:
        end = midnight.replace(day=1)
        last_month = end - timedelta(days=1)
        return last_month.replace(day=1), end
    raise ValueError(f"period: must be 'weekly' or 'monthly', not {period!r}")


def month_length(start: datetime) -> int:
    return calendar.monthrange(start.year, start.month)[1]


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def _subtrees(queues: dict[int, Any]) -> tuple[dict[int, list[int]], list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for q in queues.values():
        if q.parent_id in queues:
            kids[q.parent_id].append(q.pk)
    roots = sorted(pk for pk, q in queues.items() if q.parent_id not in queues)
    return kids, roots


def _leaves_under(pk: int, kids: dict[int, list[int]]) -> list[int]:
    out, stack, seen = [], [pk], set()
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        if kids.get(cur):
            stack.extend(kids[cur])
        else:
            out.append(cur)
    return sorted(out)


def report_lines(scope: str, queue: Any | None) -> tuple[list[dict[str, Any]], dict[int, tuple[str, str, str]]]:
    """The lines a definition's report has, in name order ({name, gpu_quota, gpu_quota_by_pool}), and for each
    leaf queue counted: its line, the node pool whose quota it is compared with (that of the queue making the
    line: the department's top-level queue, the leaf, the queue) and its own node pool."""
    from kaiweb.queues.models import Queue
    from kaiweb.reports import dimensions

    queues = {q.pk: q for q in Queue.objects.only("id", "name", "parent_id", "gpu_quota", "labels")}
    kids, roots = _subtrees(queues)
    places = dimensions.places(queues.values())
    tops: list[tuple[str, int]] = []  # (line, queue making it)
    if scope == ReportScope.CLUSTER:
        tops = [(places[pk].department, pk) for pk in roots]
    elif scope == ReportScope.DEPARTMENT:
        if queue is None:
            raise ValueError("queue: a department report needs its department")
        department = places[queue.pk].department
        tops = [(queues[leaf].name, leaf) for pk in roots if places[pk].department == department
                for leaf in _leaves_under(pk, kids)]
    elif scope == ReportScope.QUEUE:
        if queue is None:
            raise ValueError("queue: a queue report needs its queue")
        tops = [(queue.name, queue.pk)]
    else:
        raise ValueError(f"scope: must be cluster, department or queue, not {scope!r}")
    quotas: dict[str, dict[str, float]] = defaultdict(dict)
    leaf_line: dict[int, tuple[str, str, str]] = {}
    for line, pk in sorted(tops):
        pool = places[pk].pool
        quota, have = float(queues[pk].gpu_quota), quotas[line].get(pool)
        # -1 (unlimited) anywhere in a pool makes the line's quota there unlimited
        quotas[line][pool] = -1.0 if quota < 0 or (have is not None and have < 0) else (have or 0.0) + quota
        for leaf in _leaves_under(pk, kids):
            leaf_line[leaf] = (line, pool, places[leaf].pool)
    lines = [{"name": line, "gpu_quota": -1.0 if any(v < 0 for v in by_pool.values()) else sum(by_pool.values()),
              "gpu_quota_by_pool": dict(sorted(by_pool.items()))} for line, by_pool in sorted(quotas.items())]
    return lines, leaf_line


def collect_inputs(definition: Any, start: datetime, end: datetime, *, now: datetime | None = None) -> dict[str, Any]:
    """Everything the report's lines need for [start, end), read once (a handful of queries)."""
    from kaiweb.scheduling.choices import DecisionKind
    from kaiweb.scheduling.models import Decision, PreemptionEvent
    from kaiweb.usage.idle import idle_findings
    from kaiweb.usage.models import UsageBucket
    from kaiweb.workloads.models import Workload

    lines, leaf_pool_line = report_lines(definition.scope, definition.queue)
    leaf_line = {leaf: line for leaf, (line, _, _) in leaf_pool_line.items()}
    # Each line's allocation per node pool and bucket (its leaves summed per bucket start), then per hour.
    per_bucket: dict[tuple[str, str, datetime, int], dict[str, Any]] = {}
    rows = (UsageBucket.objects.filter(resource="gpu", start__gte=start, start__lt=end, queue_id__in=list(leaf_line))
            .values_list("queue_id", "start", "width_seconds", "value", "by_gpu_model", "measured_value",
                         "used_value").order_by("start", "queue_id"))
    for queue_id, bstart, width, value, models_, measured, used in rows:
        line, quota_pool, pool = leaf_pool_line[queue_id]
        acc = per_bucket.setdefault((line, quota_pool, bstart, width),
                                    {"value": 0.0, "models": defaultdict(float), "pools": defaultdict(float),
                                     "measured": 0.0, "used": None})
        acc["value"] += value
        acc["pools"][pool] += value
        for model, seconds in (models_ or {}).items() if isinstance(models_, dict) else ():
            acc["models"][model] += float(seconds)
        acc["measured"] += measured or 0.0
        if used is not None:
            acc["used"] = (acc["used"] or 0.0) + used
    quotas = {spec["name"]: spec["gpu_quota_by_pool"] for spec in lines}
    hourly: dict[tuple[str, str], dict[str, Any]] = {}
    for (line, quota_pool, bstart, width), acc in sorted(per_bucket.items()):
        quota = quotas[line].get(quota_pool, 0.0)
        over = max(0.0, acc["value"] / width - quota) * width if quota >= 0 else 0.0
        hour = bstart.replace(minute=0, second=0, microsecond=0).isoformat()
        h = hourly.setdefault((line, hour), {"line": line, "hour": hour, "allocated": 0.0, "over_quota": 0.0,
                                             "measured": 0.0, "used": None, "by_model": defaultdict(float),
                                             "by_pool": defaultdict(float)})
        h["allocated"] += acc["value"]
        h["over_quota"] += over
        h["measured"] += acc["measured"]
        if acc["used"] is not None:
            h["used"] = (h["used"] or 0.0) + acc["used"]
        for model, seconds in acc["models"].items():
            h["by_model"][model] += seconds
        for pool, seconds in acc["pools"].items():
            h["by_pool"][pool] += seconds
    hourly_rows = [{**h, "by_model": dict(sorted(h["by_model"].items())), "by_pool": dict(sorted(h["by_pool"].items()))}
                   for _, h in sorted(hourly.items())]

    # Jobs: first start from the applied binds (else the workload's last start), finish, preemptions.
    workloads = list(Workload.objects.filter(queue_id__in=list(leaf_line))
                     .values("pk", "namespace", "name", "queue_id", "submitted_at", "last_start_at", "finished_at"))
    first_bind = dict(Decision.objects.filter(kind=DecisionKind.BIND, workload_id__in=[w["pk"] for w in workloads],
                                              applied_at__isnull=False)
                      .values("workload_id").annotate(t=Min("applied_at")).values_list("workload_id", "t"))
    preempted = set(PreemptionEvent.objects.filter(at__gte=start, at__lt=end, victim_id__in=[w["pk"] for w in workloads])
                    .values_list("victim_id", flat=True).distinct())
    jobs = []
    for w in sorted(workloads, key=lambda w: (w["namespace"], w["name"])):
        started = first_bind.get(w["pk"]) or w["last_start_at"]
        in_window = (lambda t: t is not None and start <= t < end)  # noqa: E731
        if not (in_window(started) or in_window(w["finished_at"]) or w["pk"] in preempted):
            continue
        jobs.append({"line": leaf_line[w["queue_id"]], "workload": f"{w['namespace']}/{w['name']}",
                     "submitted": _iso(w["submitted_at"]), "started": _iso(started), "finished": _iso(w["finished_at"]),
                     "preempted": w["pk"] in preempted})
    idle = [f for f in idle_findings(now=now) if f["queue_id"] in leaf_line]
    return {
        "definition": {"id": definition.pk, "name": definition.name, "period": definition.period,
                       "scope": definition.scope, "queue": definition.queue.name if definition.queue else None},
        "period": {"start": _iso(start), "end": _iso(end)},
        "lines": lines,
        "hourly": hourly_rows,
        "jobs": jobs,
        "prices": {str(k): float(v) for k, v in sorted((definition.prices or {}).items())},
        "currency": definition.currency or "",
        "idle": idle,
        "read_at": _iso(now or datetime.now(tz=UTC)),
    }


def _delays(jobs: list[dict[str, Any]], start: datetime, end: datetime) -> list[float]:
    out = []
    for j in jobs:
        if not j["started"] or not j["submitted"]:
            continue
        started = datetime.fromisoformat(j["started"])
        if start <= started < end:
            out.append(max(0.0, (started - datetime.fromisoformat(j["submitted"])).total_seconds()))
    return out


def _line(name: str, quota: float | None, hours: float, hourly: list[dict[str, Any]], jobs: list[dict[str, Any]],
          prices: dict[str, float], start: datetime, end: datetime) -> dict[str, Any]:
    allocated = sum(h["allocated"] for h in hourly) / HOUR
    by_model: dict[str, float] = defaultdict(float)
    by_pool: dict[str, float] = defaultdict(float)
    for h in hourly:
        for model, seconds in h["by_model"].items():
            by_model[model] += seconds / HOUR
        for pool, seconds in (h.get("by_pool") or {}).items():  # runs stored before pools have none
            by_pool[pool] += seconds / HOUR
    known = [h for h in hourly if h["used"] is not None]
    used = sum(h["used"] for h in known) / HOUR if known else None
    measured = sum(h["measured"] for h in hourly) / HOUR
    delays = _delays(jobs, start, end)
    cost_by_model = {m: v * prices.get(m, prices.get("*", 0.0)) for m, v in sorted(by_model.items())}
    in_window = (lambda t: t is not None and start <= datetime.fromisoformat(t) < end)  # noqa: E731
    return {
        "name": name,
        "gpu_hours_allocated": allocated,
        "gpu_hours_deserved": quota * hours if quota is not None and quota >= 0 else None,
        "gpu_hours_over_quota": sum(h["over_quota"] for h in hourly) / HOUR,
        "gpu_hours_by_model": dict(sorted(by_model.items())),
        "gpu_hours_by_pool": dict(sorted(by_pool.items())),
        "gpu_hours_measured": measured,
        "gpu_hours_used": used,
        "utilization_percent": 100.0 * used / measured if used is not None and measured > 0 else None,
        "queueing_delay_avg_seconds": float(np.mean(delays)) if delays else None,
        "queueing_delay_p90_seconds": float(np.percentile(delays, 90)) if delays else None,
        "jobs_started": sum(1 for j in jobs if in_window(j["started"])),
        "jobs_finished": sum(1 for j in jobs if in_window(j["finished"])),
        "jobs_preempted": sum(1 for j in jobs if j["preempted"]),
        "cost": sum(cost_by_model.values()) if prices else None,
        "cost_by_model": cost_by_model if prices else {},
    }


def compute_lines(inputs: dict[str, Any]) -> dict[str, Any]:
    """The report's lines and their total from a stored inputs snapshot (pure and deterministic)."""
    start = datetime.fromisoformat(inputs["period"]["start"])
    end = datetime.fromisoformat(inputs["period"]["end"])
    hours = (end - start).total_seconds() / HOUR
    prices = inputs.get("prices") or {}
    hourly: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for h in inputs["hourly"]:
        hourly[h["line"]].append(h)
    jobs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for j in inputs["jobs"]:
        jobs[j["line"]].append(j)
    lines = [_line(spec["name"], spec["gpu_quota"], hours, hourly[spec["name"]], jobs[spec["name"]], prices, start, end)
             for spec in inputs["lines"]]
    quotas = [spec["gpu_quota"] for spec in inputs["lines"]]
    total = _line("total", None, hours, list(inputs["hourly"]), list(inputs["jobs"]), prices, start, end)
    total["gpu_hours_deserved"] = (sum(q for q in quotas) * hours) if quotas and all(q >= 0 for q in quotas) else None
    total["gpu_hours_over_quota"] = sum(line["gpu_hours_over_quota"] for line in lines)
    return {"period_hours": hours, "currency": inputs.get("currency", ""), "lines": lines, "total": total}


def hourly_series(inputs: dict[str, Any]) -> tuple[list[str], list[float], list[float | None]]:
    """Mean GPUs allocated and used per hour over the whole report (for the PDF's chart)."""
    alloc: dict[str, float] = defaultdict(float)
    used: dict[str, float | None] = {}
    for h in inputs["hourly"]:
        alloc[h["hour"]] += h["allocated"] / HOUR
        if h["used"] is not None:
            used[h["hour"]] = (used.get(h["hour"]) or 0.0) + h["used"] / HOUR
    hours = sorted(alloc)
    return hours, [alloc[h] for h in hours], [used.get(h) for h in hours]
