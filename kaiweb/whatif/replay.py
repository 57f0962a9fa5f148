"""What if? Replay the workloads recorded in the database under the current queue tree and a changed one.

``recorded_jobs`` turns the workloads a shard recorded over a window into the simulator's
``Job``s, each kept in its real leaf queue; ``run_whatif`` validates a change of the queue tree
with the control plane's own rules (nothing is saved), replays the same jobs on the shard's
recorded nodes twice through ``scheduler_core.sim.replay`` (current tree, changed tree) and
returns both runs side by side, per queue, with the differences and the per-cycle allocation.

Invariants:
* Read-only: no row is written, whatever the input (the changed queues are unsaved copies).
* Deterministic: same rows, same ``now``, same inputs → the same result (the engine and the
  replay are deterministic; every query has a total order).
* Bounded: at most ``max_jobs`` jobs (the most recent ones) and, per run, ``max_cycles`` cycles
  and ``max_horizon_s`` simulated seconds; the result says what was cut. Each of these, the
  window and the work (replayed jobs × cycles per run) has a ceiling from the settings
  (``KAI_WHATIF_MAX_*``): a request above one is refused before anything is replayed.
* Bad input raises ``WhatIfInputError`` whose keys name the field (``changes.<queue>.<field>``,
  ``yaml``, ``window_hours`` …) and whose messages state the rule.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Max, Q
from django.utils import timezone

from kaiweb.usage.accounting import user_of
from scheduler_core import model as m
from scheduler_core.sim.replay import ReplayCluster, ReplayConfig, leaf_queues
from scheduler_core.sim.traces import Job
from scheduler_core.sim.whatif import what_if

DEFAULT_WINDOW = timedelta(hours=24)
DEFAULT_MAX_JOBS = 400
DEFAULT_MAX_HORIZON_S = 3 * 24 * 3600.0
#: Cycles per replay run at most: a cycle costs the engine tens of milliseconds, so this keeps a
#: what-if to seconds even when the history keeps the engine busy (evicting, rebinding) every cycle.
DEFAULT_MAX_CYCLES = 200
#: Points per series in the returned timeline (longer runs are thinned evenly).
TIMELINE_POINTS = 400

#: The queue fields a what-if may change: those the scheduler's decisions depend on.
RESOURCE_FIELDS = tuple(f"{r}_{p}" for r in ("gpu", "cpu", "memory") for p in ("quota", "limit", "over_quota_weight"))
WHATIF_FIELDS = frozenset({"priority", "parent", *RESOURCE_FIELDS, "preempt_min_runtime", "reclaim_min_runtime"})

# How a replayed job's run time was obtained (the result counts each).
OBSERVED, SIMULATED, RUNNING_SO_FAR, MEDIAN = "observed", "simulated", "running_so_far", "median_of_others"
DURATION_SOURCES = {
    OBSERVED: "observed run time (start to finish, from the pods' timestamps)",
    SIMULATED: "the simulated cluster's pod duration",
    RUNNING_SO_FAR: "still running: the time it has run so far",
    MEDIAN: "never started and no duration known: the median of the other jobs",
}


class WhatIfInputError(ValidationError):
    """A what-if input breaks a rule; ``message_dict`` maps each field path to its messages."""


@dataclass(frozen=True)
class Limits:
    """The ceilings of one what-if (from the settings; see deploy/.env.example)."""

    window_hours: float
    horizon_hours: float
    cycles: int
    jobs: int
    work: int

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            window_hours=float(settings.KAI_WHATIF_MAX_WINDOW_HOURS),
            horizon_hours=float(settings.KAI_WHATIF_MAX_HORIZON_HOURS),
            cycles=int(settings.KAI_WHATIF_MAX_CYCLES),
            jobs=int(settings.KAI_WHATIF_MAX_JOBS),
            work=int(settings.KAI_WHATIF_MAX_WORK),
        )


@dataclass(frozen=True)
class RecordedCluster(ReplayCluster):
    """The shard's recorded nodes as the replay's cluster (they need not be alike)."""

    specs: tuple[m.NodeSpec, ...] = ()

    def node_specs(self) -> tuple[m.NodeSpec, ...]:
        return self.specs

    @property
    def total_gpus(self) -> int:  # type: ignore[override]  # a property over the recorded nodes where the base has a field
        return int(sum(n.gpus for n in self.specs if n.ready))


@dataclass
class Recorded:
    """The jobs read from the database and how each figure was obtained."""

    jobs: list[Job]
    queue_of: dict[str, str]
    start: datetime
    end: datetime
    recorded: int = 0
    durations: dict[str, int] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    dropped_for_bound: int = 0
    pods_not_replayed: int = 0
    carried_in: int = 0


# ------------------------------------------------------------------------------------------ inputs


def _shard(shard: Any) -> Any:
    from kaiweb.cluster.models import SchedulingShard

    if shard is None or shard == "":
        return SchedulingShard.objects.default()
    if isinstance(shard, SchedulingShard):
        return shard
    try:
        pk = int(shard)
    except (TypeError, ValueError):
        raise WhatIfInputError({"shard": [f"must be a shard id, not {shard!r}"]}) from None
    found = SchedulingShard.objects.select_related("cluster").filter(pk=pk).first()
    if found is None:
        raise WhatIfInputError({"shard": [f"shard {pk} does not exist"]})
    return found


def window_from_hours(value: Any) -> timedelta:
    """A window given in hours (form, API) → timedelta; names the field and the rule when bad."""
    if value is None or value == "":
        return DEFAULT_WINDOW
    try:
        hours = float(value)
    except (TypeError, ValueError):
        raise WhatIfInputError({"window_hours": [f"must be a number of hours, not {value!r}"]}) from None
    top = Limits.from_settings().window_hours
    if not math.isfinite(hours) or hours <= 0 or hours > top:
        raise WhatIfInputError(
            {"window_hours": [f"must be more than 0 and at most {top:g} hours (KAI_WHATIF_MAX_WINDOW_HOURS), "
                              f"got {value}"]}
        )
    return timedelta(hours=hours)


def _window_end(shard: Any, now: datetime | None) -> datetime:
    """The end of the window: ``now`` when given, else the later of the wall clock and the newest
    submission (a simulated cluster's clock runs ahead of the wall clock)."""
    if now is not None:
        return now
    from kaiweb.workloads.models import Workload

    qs = Workload.objects.all()
    if shard is not None:
        qs = qs.filter(cluster_id=shard.cluster_id)
    newest = qs.aggregate(newest=Max("submitted_at"))["newest"]
    wall = timezone.now()
    return max(wall, newest) if newest else wall


# ------------------------------------------------------------------------------------------ recorded jobs


def recorded_jobs(
    window: timedelta = DEFAULT_WINDOW, shard: Any = None, *, now: datetime | None = None,
    max_jobs: int = DEFAULT_MAX_JOBS, max_gpus_per_node: float | None = None,
) -> Recorded:
    """The workloads submitted in ``window`` (ending at ``now``) in ``shard``, as replay jobs.

    Workloads submitted before the window that were still pending or running when it opened
    (or finished inside it) are carried in: they enter at the window's start with the part of
    their run inside the window. Per workload: pods' requests (the largest pod stands for each of them), gang size = its
    minimum members (all pods when unset), run time = observed (first pod start to last pod
    finish of a finished workload), else the simulated duration field, else the time a still
    running workload has run so far, else the median of the others. Jobs asking for more GPUs
    per pod than the largest node has are skipped and listed. When more than ``max_jobs`` were
    recorded, the most recent ``max_jobs`` are kept. Two queries.
    """
    from kaiweb.workloads.choices import ACTIVE_WORKLOAD_STATES, PodState, WorkloadState
    from kaiweb.workloads.models import Pod, Workload

    shard = _shard(shard)
    end = _window_end(shard, now)
    start = end - window
    # Submitted in the window, or submitted before it and still waiting or running when it opened:
    # those load the cluster too, so they enter the replay at the window's start.
    wqs = Workload.objects.filter(
        Q(submitted_at__gte=start, submitted_at__lte=end)
        | Q(submitted_at__lt=start, state__in=ACTIVE_WORKLOAD_STATES)
        | Q(submitted_at__lt=start, finished_at__gt=start)
    )
    if shard is not None:
        wqs = wqs.filter(cluster_id=shard.cluster_id)
    rows = [
        w for w in wqs.order_by("submitted_at", "namespace", "name", "id").values(
            "id", "namespace", "name", "labels", "queue__name", "min_member", "state", "submitted_at",
            "last_start_at", "finished_at",
        )
        if shard is None or shard.matches(w["labels"])
    ]
    out = Recorded(jobs=[], queue_of={}, start=start, end=end, recorded=len(rows))
    if len(rows) > max_jobs:
        out.dropped_for_bound = len(rows) - max_jobs
        rows = rows[-max_jobs:]
    pods: dict[int, list[dict[str, Any]]] = {}
    pod_fields = ("workload_id", "gpu", "gpu_fraction", "gpu_memory_mib", "gpu_devices", "cpu", "memory",
                  "duration_seconds", "started_at", "finished_at", "state")
    for p in Pod.objects.filter(workload_id__in=[w["id"] for w in rows]).order_by("workload_id", "name").values(
        *pod_fields
    ):
        pods.setdefault(p["workload_id"], []).append(p)

    pending_duration: list[tuple[dict[str, Any], dict[str, Any]]] = []
    known: list[float] = []
    for w in rows:
        ref = f"{w['namespace']}/{w['name']}" if w["namespace"] else w["name"]
        wpods = pods.get(w["id"], [])
        if not wpods:
            out.skipped.append({"workload": ref, "reason": "no pods recorded"})
            continue
        gpu = max(_pod_gpus(p) for p in wpods)
        if max_gpus_per_node is not None and gpu > max_gpus_per_node:
            out.skipped.append({"workload": ref, "reason": f"a pod asks for {gpu:g} GPUs, more than any node has "
                                f"({max_gpus_per_node:g})"})
            continue
        gang = len(wpods) if not w["min_member"] else min(int(w["min_member"]), len(wpods))
        out.pods_not_replayed += len(wpods) - gang
        starts = [p["started_at"] for p in wpods if p["started_at"]]
        finishes = [p["finished_at"] for p in wpods if p["finished_at"]]
        finished = w["state"] in (WorkloadState.COMPLETED, WorkloadState.FAILED) or all(
            p["state"] in (PodState.SUCCEEDED, PodState.FAILED) for p in wpods
        )
        first = min(starts) if starts else w["last_start_at"]
        carried = w["submitted_at"] < start
        if carried:
            out.carried_in += 1
            # Only the part of the run inside the window is replayed.
            first = max(first, start) if first is not None else None
        last = max(finishes) if finishes else w["finished_at"]
        sim = [p["duration_seconds"] for p in wpods if p["duration_seconds"] is not None]
        info = {
            "job_id": ref, "submit": max(w["submitted_at"], start).timestamp(), "gang": gang, "gpu": gpu,
            "cpu": max(int(p["cpu"]) for p in wpods), "mem": max(int(p["memory"]) for p in wpods),
        }
        if finished and first is not None and last is not None and last >= first:
            duration, source = (last - first).total_seconds(), OBSERVED
        elif sim:
            duration, source = float(max(sim)), SIMULATED
        elif first is not None and w["state"] in (WorkloadState.RUNNING, WorkloadState.PARTIAL):
            duration, source = max(0.0, (end - first).total_seconds()), RUNNING_SO_FAR
        else:
            pending_duration.append((info, w))
            continue
        known.append(duration)
        _add(out, info, w, duration, source)
    fallback = statistics.median(known) if known else 3600.0
    for info, w in pending_duration:
        _add(out, info, w, fallback, MEDIAN)
    out.jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return out


def _pod_gpus(p: Mapping[str, Any]) -> float:
    """GPUs a pod row asks for; GPU memory counts as a fraction of a 80 GB device (the engine's
    memory-to-fraction conversion needs the node, which the replay's job type does not carry)."""
    if p["gpu_fraction"] is not None:
        return float(p["gpu_fraction"]) * (p["gpu_devices"] or 1)
    if p["gpu_memory_mib"]:
        return min(1.0, p["gpu_memory_mib"] / 81920) * (p["gpu_devices"] or 1)
    return float(p["gpu"])


def _add(out: Recorded, info: dict[str, Any], w: Mapping[str, Any], duration: float, source: str) -> None:
    # A replayed job needs a positive run time, else it would complete before it is seen.
    duration = max(1.0, duration)
    out.durations[source] = out.durations.get(source, 0) + 1
    out.jobs.append(Job(
        job_id=info["job_id"], submit_time=info["submit"], duration=duration,
        num_gpu=int(math.ceil(info["gpu"] * info["gang"])), num_pods=info["gang"], gpu_per_pod=info["gpu"],
        cpu_millis_per_pod=info["cpu"], memory_bytes_per_pod=info["mem"],
        user=user_of(str(w["namespace"]), w["labels"].get(settings.KAI_USER_LABEL)
                     if isinstance(w["labels"], dict) else None),
    ))
    out.queue_of[info["job_id"]] = str(w["queue__name"])  # the queue travels here, not in Job.user


# ------------------------------------------------------------------------------------------ trees


def _queues(shard: Any) -> list[Any]:
    from kaiweb.queues.models import Queue

    return [q for q in Queue.objects.select_related("parent").order_by("name") if shard is None or shard.matches(q.labels)]


def _specs(rows: list[Any]) -> tuple[m.QueueSpec, ...]:

    names = {q.pk: q.name for q in rows if q.pk is not None}
    out = []
    for q in rows:
        parent = q.parent.name if q.parent is not None else names.get(q.parent_id)
        out.append(q.to_spec(parent))
    return tuple(out)


def _messages(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {k: [msg for e in errs for msg in e.messages] for k, errs in exc.error_dict.items()}
    return {"__all__": list(exc.messages)}


def apply_changes(rows: list[Any], changes: Mapping[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Copies of ``rows`` with ``changes`` ({queue: {field: value}}) applied and checked by the
    queue service's rules (field names, the model's validators, the tree rules); nothing saved.

    Returns the changed rows and the list of (queue, field, current, changed) edits.
    """
    from kaiweb.core.services import reject_unknown_fields
    from kaiweb.queues import services

    if not isinstance(changes, Mapping) or not changes:
        raise WhatIfInputError({"changes": ["give at least one queue with the fields to change, "
                                            "e.g. {\"team-a\": {\"gpu_quota\": 16}}"]})
    by_name = {q.name: q for q in rows}
    errors: dict[str, list[str]] = {}
    changed = {q.name: copy.copy(q) for q in rows}
    edits: list[dict[str, Any]] = []
    for name in sorted(changes):
        values = changes[name]
        key = f"changes.{name}"
        if name not in by_name:
            errors.setdefault(key, []).append(f"queue {name!r} does not exist in this shard")
            continue
        if not isinstance(values, Mapping):
            errors.setdefault(key, []).append("must map field names to new values")
            continue
        try:
            reject_unknown_fields(dict(values), WHATIF_FIELDS)
            queue = changed[name]
            data = dict(values)
            if "parent" in data:
                parent = services.resolve_parent(data.pop("parent"))
                queue.parent = parent
                queue.parent_id = parent.pk if parent else None
                services.check_tree(queue, parent)
            for f, v in data.items():
                model_field = queue._meta.get_field(f)
                if model_field.null and v in model_field.empty_values:
                    v = None  # full_clean skips empty values of a nullable field: store them as unset
                elif f in ("preempt_min_runtime", "reclaim_min_runtime"):
                    v = _duration(f, v)
                setattr(queue, f, v)
            queue.full_clean(validate_constraints=False, exclude=["name"], validate_unique=False)
        except ValidationError as exc:
            for f, msgs in _messages(exc).items():
                errors.setdefault(f"{key}.{f}" if f != "__all__" else key, []).extend(msgs)
            continue
        for f in sorted(values):
            before = by_name[name].parent.name if f == "parent" and by_name[name].parent else getattr(by_name[name], f)
            after = queue.parent.name if f == "parent" and queue.parent else getattr(queue, f)
            if f == "parent" and before is None and after is None or f != "parent" and before == after:
                continue
            edits.append({"queue": name, "field": f, "current": _plain(before), "changed": _plain(after)})
    if errors:
        raise WhatIfInputError(errors)
    if not edits:
        raise WhatIfInputError({"changes": ["no value differs from the current tree; change at least one field"]})
    return [changed[q.name] for q in rows], edits


def _duration(name: str, value: Any) -> Any:
    """A minimum runtime as the queue form takes it ("1 00:00:00", "PT1H") or as seconds (the unit
    the result reports it in); anything else is refused by name."""
    if isinstance(value, timedelta | str):
        return value
    seconds = None if isinstance(value, bool) else _finite(value)
    if seconds is None:
        raise ValidationError({name: "must be a duration (e.g. \"01:00:00\" or \"PT1H\") or a number of seconds"})
    from kaiweb.queues.validators import MAX_DURATION

    if not 0 <= seconds <= MAX_DURATION.total_seconds():
        raise ValidationError({name: "must be between 0 and 2562047h (the longest duration KAI's Queue can hold)"})
    return timedelta(seconds=seconds)


def _finite(value: Any) -> float | None:
    from kaiweb.core.inputs import finite_number

    return finite_number(value) if isinstance(value, int | float) else None


def _plain(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def tree_from_yaml(rows: list[Any], text: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The tree with a Queue CRD YAML laid over it, checked as an import's dry run would check it."""
    from kaiweb.queues.models import Queue
    from kaiweb.queues.yaml_io import QueueImportError, plan_import

    if not isinstance(text, str) or not text.strip():
        raise WhatIfInputError({"yaml": ["paste one or more Queue documents (scheduling.run.ai/v2)"]})
    try:
        docs, _warnings = plan_import(text)
    except QueueImportError as exc:
        raise WhatIfInputError({"yaml": [str(p) for p in exc.problems]}) from None
    by_name = {q.name: copy.copy(q) for q in rows}
    edits: list[dict[str, Any]] = []
    for doc in docs:
        current = by_name.get(doc.name)
        queue = current if current is not None else Queue(name=doc.name)
        for f, v in doc.values.items():
            if f in ("name", "display_name", "labels"):
                continue
            before = (queue.parent.name if queue.parent else None) if f == "parent" else getattr(queue, f)
            if before != v and current is not None:
                edits.append({"queue": doc.name, "field": f, "current": _plain(before), "changed": _plain(v)})
            if f != "parent":
                setattr(queue, f, v)
        if current is None:
            edits.append({"queue": doc.name, "field": "queue", "current": None, "changed": "added"})
        by_name[doc.name] = queue
    # Parents by name, after every document is in place (a document may define its parent later).
    parent_names = {d.name: d.values["parent"] for d in docs}
    for name, parent in parent_names.items():
        by_name[name].parent = by_name.get(parent) if parent else None
    if not edits:
        raise WhatIfInputError({"yaml": ["the documents change nothing in the current tree"]})
    return [by_name[n] for n in sorted(by_name)], edits


# ------------------------------------------------------------------------------------------ the run


def _cluster(shard: Any) -> RecordedCluster:
    from kaiweb.cluster.models import Node

    qs = Node.objects.order_by("name")
    if shard is not None:
        qs = qs.filter(cluster_id=shard.cluster_id)
    specs = tuple(n.to_spec() for n in qs if shard is None or shard.matches(n.labels))
    if not any(s.ready and s.gpus > 0 for s in specs):
        raise WhatIfInputError({"shard": ["the shard has no ready node with GPUs to replay on"]})
    return RecordedCluster(nodes=len(specs), gpus_per_node=max(1, max(s.gpus for s in specs)), specs=specs)


def _thin(cycles: list[dict[str, Any]], queues: tuple[str, ...]) -> dict[str, Any]:
    """The per-cycle allocation, at most TIMELINE_POINTS points (evenly thinned, the last kept)."""
    step = max(1, math.ceil(len(cycles) / TIMELINE_POINTS))
    picked = cycles[::step]
    if cycles and picked[-1] is not cycles[-1]:
        picked.append(cycles[-1])
    return {
        "t": [datetime.fromtimestamp(float(c["t"]), tz=UTC).isoformat() for c in picked],
        "allocated_gpus": [round(float(c["allocated_gpus"]), 3) for c in picked],
        "queues": {q: [round(float(c["queues"].get(q, (0.0,))[0]), 3) for c in picked] for q in queues},
    }


GPU_FIELDS = ("gpu_quota", "gpu_limit", "gpu_over_quota_weight")


def binding_constraints(edits: list[dict[str, Any]], proposed: tuple[m.QueueSpec, ...], jobs: list[Any],
                        queue_of: Mapping[str, str]) -> list[str]:
    """For each raised GPU figure, the limits of the changed tree that cap the queue before it: an
    ancestor's GPU limit, or a CPU or memory limit of the queue or an ancestor given what its jobs ask
    per GPU. Names the queue, the resource and the limit, with the numbers."""
    specs = {q.name: q for q in proposed}
    notes: list[str] = []
    for e in edits:
        if e["field"] not in GPU_FIELDS[:2] or e["queue"] not in specs:
            continue
        try:
            new, old = float(e["changed"]), float(e["current"])
        except (TypeError, ValueError):
            continue
        if new != m.UNLIMITED and new <= old:
            continue
        target = e["queue"]
        chain = []
        cur: str | None = target
        while cur is not None and cur in specs and len(chain) < 64:
            chain.append(specs[cur])
            cur = specs[cur].parent
        names = {q.name for q in chain}
        mine = [j for j in jobs if _ancestors_hit(queue_of.get(j.job_id), names, specs)]
        gpus = sum(j.gpu_per_pod * j.num_pods for j in mine)
        per_gpu = {"CPU": sum(j.cpu_millis_per_pod * j.num_pods for j in mine) / gpus if gpus else 0.0,
                   "memory": sum(j.memory_bytes_per_pod * j.num_pods for j in mine) / gpus if gpus else 0.0}
        want = float("inf") if new == m.UNLIMITED else new
        for q in chain:
            if q.name != target and q.gpu.limit != m.UNLIMITED and q.gpu.limit < want:
                notes.append(f"{target}.{e['field']} → {e['changed']:g}: {q.name}'s GPU limit of {q.gpu.limit:g} caps "
                             f"it first")
            for res, limit, unit, scale in (("CPU", q.cpu.limit, "cores", 1000.0), ("memory", q.memory.limit, "GiB",
                                                                                     float(2**30))):
                if limit == m.UNLIMITED or not per_gpu[res]:
                    continue
                cap = limit / per_gpu[res]
                if cap < want:
                    notes.append(f"{target}.{e['field']} → {e['changed']:g}: {q.name}'s {res} limit of "
                                 f"{limit / scale:g} {unit} binds first: the recorded jobs ask "
                                 f"{per_gpu[res] / scale:.1f} {unit} per GPU, so at most {cap:.1f} GPUs of them fit")
    return notes


def _ancestors_hit(leaf: str | None, names: set[str], specs: Mapping[str, m.QueueSpec]) -> bool:
    hops = 0
    while leaf is not None and hops < 64:
        if leaf in names:
            return True
        leaf = specs[leaf].parent if leaf in specs else None
        hops += 1
    return False


START_ESTIMATES_NOTE = (
    "The waiting jobs of each queue, now: the median of their p50 and of their p80 waits from the start-time "
    "estimator run on the live cluster under the current tree and under the changed one (the same run times and "
    "seed). New arrivals are not guessed.")


def start_waits(shard: Any, current: tuple[m.QueueSpec, ...], proposed: tuple[m.QueueSpec, ...],
                edits: list[dict[str, Any]], at: datetime) -> dict[str, Any] | None:
    """The live side of a what-if: per leaf queue with waiting jobs, their p50 and p80 waits at ``at`` (the
    window's end) and with the change (`kaiweb.scheduling.estimates.queue_waits_with`, the start-time
    estimator on the shard's live snapshot); None without a shard."""
    from kaiweb.scheduling.estimates import queue_waits_with

    if shard is None:
        return None
    before = {q.name: q for q in current}
    changed = {q.name: q for q in proposed if before.get(q.name) != q}
    got = queue_waits_with(shard, changed, at.timestamp())
    edited = {e["queue"] for e in edits}
    parents = {q.name: q.parent for q in proposed}
    for row in got["queues"]:
        chain, name = set(), row["queue"]
        while name is not None and name not in chain and len(chain) < 64:
            chain.add(name)
            name = parents.get(name)
        row["edited"] = bool(chain & edited)  # the queue or one above it was changed
        row["differs"] = row.get("current") != row.get("changed")
    return {**got, "at": datetime.fromtimestamp(got["now"], tz=UTC).isoformat(), "note": START_ESTIMATES_NOTE}


def run_whatif(
    changes: Mapping[str, Any] | None = None, window: timedelta = DEFAULT_WINDOW, shard: Any = None, *,
    yaml_text: str | None = None, now: datetime | None = None, max_jobs: int = DEFAULT_MAX_JOBS,
    max_horizon_s: float = DEFAULT_MAX_HORIZON_S, period_s: float | None = None,
    max_cycles: int = DEFAULT_MAX_CYCLES, consolidation: bool = False, check_only: bool = False,
) -> dict[str, Any]:
    """Replay the recorded jobs under the current tree and under the changed one; JSON-ready.

    Give either ``changes`` ({queue: {field: value}}, the queue edit form's field names and
    units) or ``yaml_text`` (Queue CRD documents). See the module docstring for the guarantees.

    The cycles use the shard's placement strategies and k-value. Consolidation (moving running
    jobs to defragment) is off unless ``consolidation``: it rarely changes how GPUs divide between
    queues, and its search costs most of a cycle, which would take a what-if from seconds to minutes.
    """
    if (changes and yaml_text) or (not changes and not yaml_text):
        key = "yaml" if yaml_text else "changes"
        raise WhatIfInputError({key: ["give either field changes or a YAML tree, exactly one of them"]})
    limits = Limits.from_settings()
    if window.total_seconds() > limits.window_hours * 3600:
        raise WhatIfInputError({"window_hours": [
            f"must be at most {limits.window_hours:g} hours (KAI_WHATIF_MAX_WINDOW_HOURS), "
            f"got {window.total_seconds() / 3600:g}"]})
    if not 1 <= int(max_jobs) <= limits.jobs:
        raise WhatIfInputError({"max_jobs": [f"must be between 1 and {limits.jobs} (KAI_WHATIF_MAX_JOBS), got {max_jobs}"]})
    if not 0 < float(max_horizon_s) <= limits.horizon_hours * 3600:
        raise WhatIfInputError({"max_horizon_hours": [
            f"must be more than 0 and at most {limits.horizon_hours:g} hours (KAI_WHATIF_MAX_HORIZON_HOURS), "
            f"got {float(max_horizon_s) / 3600:g}"]})
    if period_s is None:
        # One cycle per 1/288 of the window (5 min for a day), between 1 and 15 minutes.
        period_s = min(900.0, max(60.0, 60.0 * math.ceil(window.total_seconds() / 288 / 60)))
    if not 1 <= int(max_cycles) <= limits.cycles:
        raise WhatIfInputError({"max_cycles": [
            f"must be between 1 and {limits.cycles} (KAI_WHATIF_MAX_CYCLES), got {max_cycles}"]})
    if not 10 <= float(period_s) <= 3600:
        raise WhatIfInputError({"period_s": [f"must be between 10 and 3600 seconds, got {period_s}"]})
    shard = _shard(shard)
    rows = _queues(shard)
    changed_rows, edits = tree_from_yaml(rows, yaml_text) if yaml_text else apply_changes(rows, changes or {})
    current, proposed = _specs(rows), _specs(changed_rows)
    cluster = _cluster(shard)
    rec = recorded_jobs(window, shard, now=now, max_jobs=max_jobs, max_gpus_per_node=cluster.gpus_per_node)
    leaves_now, leaves_after = set(leaf_queues(current)), set(leaf_queues(proposed))
    held = sorted(set(rec.queue_of.values()))
    bad = [q for q in held if q not in leaves_after]
    if bad:
        raise WhatIfInputError({"yaml" if yaml_text else "changes": [
            f"queue {q} holds recorded workloads, so it must stay a leaf queue in the changed tree" for q in bad]})
    base: dict[str, Any] = {
        "shard": None if shard is None else str(shard),
        "window": {"start": rec.start.isoformat(), "end": rec.end.isoformat(),
                   "hours": round((rec.end - rec.start).total_seconds() / 3600, 2)},
        "cluster": {"nodes": len(cluster.specs), "gpus": cluster.total_gpus},
        "changes": edits,
        "jobs": {
            "recorded": rec.recorded, "replayed": len(rec.jobs), "durations": dict(sorted(rec.durations.items())),
            "duration_sources": {k: DURATION_SOURCES[k] for k in sorted(rec.durations)},
            "skipped": rec.skipped[:20], "skipped_count": len(rec.skipped),
            "pods_beyond_gang_minimum": rec.pods_not_replayed,
            "carried_in": rec.carried_in,
        },
    }
    if not rec.jobs:
        waits = None if check_only else start_waits(shard, current, proposed, edits, rec.end)
        return {**base, "empty": True, "queues": [], "summary": {}, "timeline": {}, "truncated": {}, "notes": [],
                "start_estimates": waits}
    actions = tuple(a for a in m.ACTIONS if consolidation or a != m.CONSOLIDATION)
    cycle = m.CycleConfig(
        actions=actions,
        gpu_placement=getattr(shard, "gpu_placement", "binpack"),
        cpu_placement=getattr(shard, "cpu_placement", "binpack"),
        k_value=float(getattr(shard, "k_value", 1.0)),
    )
    budget = min(int(max_cycles), max(1, math.ceil(max_horizon_s / period_s)))
    work = len(rec.jobs) * budget
    if work > limits.work:
        raise WhatIfInputError({"max_cycles": [
            f"{len(rec.jobs)} replayed workloads × {budget} cycles per run = {work} is above the limit of "
            f"{limits.work} (KAI_WHATIF_MAX_WORK); lower max_jobs, max_cycles or max_horizon_hours, "
            "or narrow the window"]})
    if check_only:
        return {**base, "checked": True, "work": work}  # every input is valid and the work within its bound
    config = ReplayConfig(period_s=float(period_s), cycle=cycle, max_cycles=budget)
    compared = what_if(rec.jobs, current, proposed, cluster, config, rec.queue_of)
    ra, rb = compared.current, compared.changed
    edited = {e["queue"] for e in edits}
    queues = [{**row, "edited": row["queue"] in edited} for row in compared.queues]
    summary = compared.summary
    sa, sb = summary["current"], summary["changed"]
    horizon_hit = compared.horizon_reached
    notes = []
    if not consolidation:
        notes.append("consolidation is not simulated (both runs): it moves jobs to defragment, not between queues")
    if rec.dropped_for_bound:
        notes.append(f"{rec.dropped_for_bound} older workload(s) of the window were left out: at most {max_jobs} "
                     "are replayed")
    if horizon_hit:
        notes.append(f"a run stopped at its bound of {budget} cycles of {period_s:g} s with jobs unfinished "
                     f"({sa['unfinished']} now, {sb['unfinished']} changed): jobs never started have no delay "
                     "counted, unfinished ones no JCT or GPU-hours; compare allocated GPUs instead, or narrow the window")
    if rec.carried_in:
        notes.append(f"{rec.carried_in} workload(s) submitted before the window were still waiting or running when "
                     "it opened: they enter the replay at its start, with the part of their run inside it")
    if rec.skipped:
        notes.append(f"{len(rec.skipped)} workload(s) skipped: see jobs.skipped")
    notes.extend(binding_constraints(edits, proposed, rec.jobs, rec.queue_of))
    if leaves_after - leaves_now:
        notes.append("new leaf queue(s) " + ", ".join(sorted(leaves_after - leaves_now)) + " hold no recorded jobs")
    for label, r in (("current", ra), ("changed", rb)):
        if r.engine_errors:
            notes.append(f"{label} run: the engine reported {len(r.engine_errors)} problem(s): {r.engine_errors[0]}")
    return {
        **base,
        "empty": False,
        "start_estimates": start_waits(shard, current, proposed, edits, rec.end),
        "queues": queues,
        "summary": summary,
        "timeline": {"current": _thin(ra.cycles, ra.queues), "changed": _thin(rb.cycles, rb.queues)},
        "truncated": {"jobs_left_out": rec.dropped_for_bound, "horizon_reached": horizon_hit,
                      "max_jobs": max_jobs, "max_horizon_s": max_horizon_s, "max_cycles": budget,
                      "period_s": period_s},
        "notes": notes,
    }
