"""Start-time estimates of a shard's pending workloads, refreshed on a worker, off the cycle.

Reads the shard's snapshot as its next cycle would (a build of its own: the cycle's objects are
left alone), the run times of the workloads that finished lately (``runtime_history``) and what
workloads declare of their own end (labels ``kaiweb.io/expected-runtime``: seconds, or a number
with ``s``, ``m``, ``h`` or ``d``; ``kaiweb.io/deadline``: epoch seconds), runs the engine forward
(``scheduler_core.eta.estimate_starts``) and stores the estimates on the shard's ``WaitingLine``.
Seeded by the snapshot's clock, so the same snapshot gives the same estimates.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, F, FloatField, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from kaiweb.cluster.gateway import Capability, get_gateway
from kaiweb.cluster.models import SchedulingShard
from kaiweb.core import clock
from kaiweb.core.locks import advisory_lock
from kaiweb.scheduling import adapters, status_writer
from kaiweb.scheduling.models import WaitingLine, line_key
from kaiweb.workloads.models import Workload
from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.cycle import collector_paused
from scheduler_core.eta import (
    Budget,
    Declared,
    Estimate,
    Run,
    RuntimeHistory,
    estimate_starts,
    running_runs,
    size_class,
)

log = logging.getLogger(__name__)

RUNTIME_LABEL = "kaiweb.io/expected-runtime"
DEADLINE_LABEL = "kaiweb.io/deadline"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def budget() -> Budget:
    """The estimator's budget from the settings (``KAI_ETA_*``)."""
    return Budget(samples=settings.KAI_ETA_SAMPLES, min_samples=min(4, settings.KAI_ETA_SAMPLES),
                  horizon_s=settings.KAI_ETA_HORIZON_HOURS * 3600.0, max_cycles=settings.KAI_ETA_MAX_CYCLES,
                  max_work=settings.KAI_ETA_MAX_WORK, max_pending=settings.KAI_ETA_MAX_PENDING,
                  period_s=max(1.0, float(settings.KAI_CYCLE_SECONDS)))


def whatif_budget() -> Budget:
    """The budget of each side of a what-if's comparison (`queue_waits_with`): half the samples, half
    the simulated cycles (a coarser time grid, the same for both sides) and half the work of a refresh,
    so the two sides together cost at most what one refresh of the shard costs."""
    full = budget()
    samples = max(full.min_samples, full.samples // 2)
    return dataclasses.replace(full, samples=samples, min_samples=min(full.min_samples, samples),
                               max_cycles=max(1, full.max_cycles // 2), max_work=max(1, full.max_work // 2))


def parse_runtime(value: Any) -> float | None:
    """A declared run time in seconds from a label value (``5400``, ``90m``, ``1.5h``, ``2d``); None when
    it does not read as a positive duration."""
    text = str(value or "").strip().lower()
    if not text:
        return None
    factor = _UNITS.get(text[-1], None)
    number = text[:-1] if factor is not None else text
    try:
        seconds = float(number) * (factor or 1.0)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def declared_end(labels: dict[str, Any] | None) -> Declared | None:
    """What a workload's labels declare of its end (None: nothing readable)."""
    labels = labels or {}
    runtime = parse_runtime(labels.get(RUNTIME_LABEL))
    try:
        deadline = float(labels[DEADLINE_LABEL]) if DEADLINE_LABEL in labels else None
    except (TypeError, ValueError):
        deadline = None
    if deadline is not None and not math.isfinite(deadline):
        deadline = None
    return Declared(runtime, deadline) if runtime is not None or deadline is not None else None


def owner_of(namespace: str, labels: dict[str, Any] | None) -> str:
    """Who submitted a workload: its ``KAI_USER_LABEL`` label, else ``ns/<namespace>`` (as usage counts it)."""
    user = (labels or {}).get(settings.KAI_USER_LABEL)
    return str(user) if user else f"ns/{namespace}"


def runtime_history(shard: SchedulingShard, *, limit: int | None = None, running: list[Run] | None = None
                    ) -> RuntimeHistory:
    """The run times (last start to finish) of the shard's cluster's workloads that finished in the last
    ``KAI_ETA_HISTORY_DAYS``, the latest ``limit`` (``KAI_ETA_HISTORY_ROWS``) of them, by class, with the
    ``running`` ones (how long they have run so far). One query."""
    since = timezone.now() - timedelta(days=settings.KAI_ETA_HISTORY_DAYS)
    rows = (Workload.objects
            .filter(cluster_id=shard.cluster_id, finished_at__isnull=False, last_start_at__isnull=False,
                    finished_at__gte=since)
            .annotate(gpus=Coalesce(Sum(F("pods__gpu") + Coalesce(F("pods__gpu_fraction"), 0.0) * F("pods__gpu_devices"),
                                        output_field=FloatField()), 0.0),
                      n_pods=Count("pods"))
            .order_by("-finished_at")
            .values_list("queue__name", "namespace", "labels", "min_member", "gpus", "n_pods", "last_start_at",
                         "finished_at")[:limit or settings.KAI_ETA_HISTORY_ROWS])
    runs = []
    for queue, namespace, labels, min_member, gpus, n_pods, started, finished in rows:
        need = n_pods if min_member is None else min(min_member, n_pods)
        runs.append(Run(queue, owner_of(namespace, labels), "gang" if need > 1 else "single", size_class(gpus),
                        (finished - started).total_seconds()))
    return RuntimeHistory.from_runs(runs, running=running or ())


def _owners_and_declared(index: adapters.SnapshotIndex) -> tuple[dict[str, str], dict[str, Declared]]:
    ids = {wid: uid for uid, wid in index.workloads.items()}
    owners: dict[str, str] = {}
    declared: dict[str, Declared] = {}
    labelled = Q(labels__has_key=settings.KAI_USER_LABEL) | Q(labels__has_key=RUNTIME_LABEL) | Q(
        labels__has_key=DEADLINE_LABEL)
    for wid, labels in Workload.objects.filter(labelled, pk__in=list(ids)).values_list("pk", "labels").iterator():
        uid = ids[wid]
        user = (labels or {}).get(settings.KAI_USER_LABEL)
        if user:
            owners[uid] = str(user)
        said = declared_end(labels)
        if said is not None:
            declared[uid] = said
    for uid in index.workloads:
        if uid not in owners:
            owners[uid] = f"ns/{uid.split('/', 1)[0]}" if "/" in uid else "ns/"
    return owners, declared


def _row(e: Estimate) -> dict[str, Any]:
    d = e.reason.details
    return {"p50": e.p50, "p80": e.p80, "code": e.reason.code, "ahead": d.get("ahead_in_queue"), "queue": d.get("queue"),
            "pods": d.get("pods"), "gpus": d.get("gpus"), "per_pod": d.get("gpus_per_pod"),
            "whole_node": d.get("whole_node"), "frees_at": d.get("frees_at"), "node": d.get("node"),
            "horizon": d.get("horizon"), "after": d.get("after")}


def refresh(shard: SchedulingShard | int) -> int | None:
    """Estimate the start of every pending workload of the shard and store the estimates on its waiting
    line; the number of workloads estimated (None: no line yet, or another worker is at it)."""
    shard = shard if isinstance(shard, SchedulingShard) else SchedulingShard.objects.select_related("cluster").get(
        pk=shard)
    if not WaitingLine.objects.filter(shard=shard).exists():
        return None
    with advisory_lock("start-estimates", str(shard.pk), wait=False) as got:
        if not got:
            return None
        with collector_paused():
            return _refresh(shard)


@dataclasses.dataclass(frozen=True)
class LiveInputs:
    """What an estimate of a shard's pending workloads runs on: the snapshot its next cycle would decide
    on (a build of its own), its cycle config, the recorded run times, who submitted each job and what
    each declares of its end, and the snapshot's clock (the seed)."""

    snapshot: m.ClusterSnapshot
    index: adapters.SnapshotIndex
    config: m.CycleConfig
    history: RuntimeHistory
    owners: dict[str, str]
    declared: dict[str, Declared]
    now: float

    def estimate(self, snapshot: m.ClusterSnapshot | None = None, within: Budget | None = None
                 ) -> tuple[m.CycleResult, dict[str, Estimate]]:
        """The first cycle and the estimates of ``snapshot`` (default: the live one) with these run
        times, owners, config and seed, ``within`` a budget (default: a refresh's, `budget`): the same
        inputs give the same estimates."""
        snapshot = snapshot or self.snapshot
        first = run_cycle(snapshot, self.config)
        return first, estimate_starts(snapshot, self.config, self.history, declared=self.declared, owners=self.owners,
                                      seed=int(self.now), budget=within or budget(), first=first)


def live_inputs(shard: SchedulingShard, at: float | None = None) -> LiveInputs:
    """The shard's `LiveInputs`, read now (a handful of queries). ``at``: the time to read a cluster on
    the wall clock at (epoch seconds; default: now), so that a what-if stored with its time reads the same
    snapshot the same way; a simulated cluster with a clock of its own is read at that clock."""
    from kaiweb.scheduling.cycle import cycle_config
    from kaiweb.usage.accounting import usage_for_engine

    gateway = get_gateway(shard.cluster)
    own_clock = Capability.OWN_CLOCK in gateway.capabilities
    if at is not None and (not own_clock or getattr(gateway, "on_wall_clock", False)):
        now = float(at)
    else:
        now = gateway.now() if own_clock else clock.timestamp()
    snapshot, index = adapters.build_snapshot(shard, now=now, usage=usage_for_engine(shard), reuse=False)
    owners, declared = _owners_and_declared(index)
    history = runtime_history(shard, running=running_runs(snapshot, owners))
    return LiveInputs(snapshot, index, cycle_config(shard), history, owners, declared, now)


def _refresh(shard: SchedulingShard) -> int:
    t0 = time.process_time()
    live = live_inputs(shard)
    snapshot, index, now = live.snapshot, live.index, live.now
    first, got = live.estimate()
    rows = {line_key(wid): _row(e) for uid, e in got.items() if (wid := index.workloads.get(uid)) is not None}
    per_queue = _queue_estimates(snapshot, first, got, index, now)
    samples = max((e.samples for e in got.values()), default=0)
    at = timezone.now()
    for row in rows.values():
        # as the PodGroup's annotations say it (the cycle's write-back puts it there without wording it)
        row["said"] = status_writer.annotation_texts(row, now, at, samples)
    seconds = time.process_time() - t0
    WaitingLine.objects.filter(shard=shard).update(
        estimates=rows, queue_estimates=per_queue, estimated_at=at, estimated_now=now,
        estimate_samples=samples, estimate_seconds=round(seconds, 3))
    log.info("start estimates of shard %s: %d pending workloads, %d samples, %.2f s", shard, len(rows), samples, seconds)
    return len(rows)


def _queue_estimates(snapshot: m.ClusterSnapshot, first: m.CycleResult, got: dict[str, Estimate],
                     index: adapters.SnapshotIndex, now: float) -> list[dict[str, Any]]:
    """Per leaf queue and priority, the estimated wait of its next job in the engine's order."""
    from scheduler_core.waiting import queue_depth

    out = []
    for d in queue_depth(snapshot, first):
        e = got.get(d.next_job) if d.next_job else None
        out.append({"queue": d.queue, "priority": d.priority,
                    "workload": index.workloads.get(d.next_job) if d.next_job else None,
                    "p50_wait_seconds": None if e is None or e.p50 is None else round(max(0.0, e.p50 - now), 1),
                    "p80_wait_seconds": None if e is None or e.p80 is None else round(max(0.0, e.p80 - now), 1),
                    "estimated": e is not None})
    return out


def _median(values: list[float]) -> float | None:
    """The median of some waits (inf: not within the horizon); None when none or when it is beyond."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    got = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return None if math.isinf(got) else round(got, 1)


def queue_waits_with(shard: SchedulingShard, changed: dict[str, m.QueueSpec], at: float | None = None
                     ) -> dict[str, Any]:
    """How long each leaf queue's waiting jobs would wait now and with some queues changed (``changed``:
    queue name → its changed spec, a new queue too): the estimator (`LiveInputs.estimate`) run on the
    shard's live snapshot and on the same snapshot with those queues, the same run times, owners and seed,
    so the one difference between the two is the change (``at``: as `live_inputs` reads it). Per leaf queue holding a job that waits in
    either: how many, and the median of their p50 and of their p80 waits in seconds from now, each side
    (a job the first cycle starts waits 0; None: beyond the estimator's horizon). Deterministic; both sides
    together within one refresh's ``Budget`` (`whatif_budget`)."""
    with collector_paused():
        live = live_inputs(shard, at)
        queues = tuple(changed.get(q.name, q) for q in live.snapshot.queues)
        queues += tuple(spec for name, spec in sorted(changed.items()) if name not in {q.name for q in queues})
        within = whatif_budget()
        sides = {"current": live.estimate(within=within),
                 "changed": live.estimate(dataclasses.replace(live.snapshot, queues=queues), within)}
    waiting = sorted(set().union(*(first.pending for first, _ in sides.values())))
    queue_of = {j.uid: j.queue for j in live.snapshot.jobs}
    rows: dict[str, dict[str, Any]] = {}
    for side, (_, got) in sides.items():
        waits: dict[str, tuple[list[float], list[float]]] = {}
        for uid in waiting:
            e = got.get(uid)
            p50 = 0.0 if e is None else (math.inf if e.p50 is None else max(0.0, e.p50 - live.now))
            p80 = 0.0 if e is None else (math.inf if e.p80 is None else max(0.0, e.p80 - live.now))
            held = waits.setdefault(queue_of[uid], ([], []))
            held[0].append(p50)
            held[1].append(p80)
        for queue, (p50s, p80s) in waits.items():
            row = rows.setdefault(queue, {"queue": queue, "jobs": len(p50s)})
            row[side] = {"p50_wait_seconds": _median(p50s), "p80_wait_seconds": _median(p80s)}
    samples = max((e.samples for _, got in sides.values() for e in got.values()), default=0)
    return {"now": live.now, "samples": samples, "queues": [rows[q] for q in sorted(rows)]}
