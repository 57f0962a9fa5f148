"""The write-back: what a cycle decided, told to the cluster and to the mirror.

* `record_actions(applied)` reflects the applied binds and evictions in the mirror at once;
* `write_back(gateway, cycle, recorded)` writes each queue's status to its CRD and the why-pending
  explanation to each pending pod, only when it changed since it was last written, and KAI's stamps
  (last start, last eviction, stale since) to each PodGroup whose workload holds a later one, each
  waiting PodGroup's place in line and start estimate (annotations, `status_writer.line_annotations`),
  and the PodGroups' status and events (`kaiweb.scheduling.status_writer`).

Both are fed from memory by the cycle: the decisions it applied, and what its record step wrote
(`adapters.Recorded`: the queue status rows, the why-pending, the waiting line's places); neither reads
back what the cycle has just written.

It belongs to scheduling, which owns the cycle and its rows; the mirror (`kaiweb.cluster.mirror`)
only fills the database from the cluster.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kaiweb.cluster import stamps
from kaiweb.cluster.backends.types import (
    SHARD_POSITION_ANNOTATION,
    PodRef,
    QueueStatusUpdate,
    ResourceAmounts,
)
from kaiweb.cluster.errors import ClusterError
from kaiweb.cluster.mirror import BATCH, IMPLICIT_GROUP_LABEL, lock_pods, mirror_state
from kaiweb.cluster.models import Cluster, PendingReport, UnreadableObject
from kaiweb.core import clock
from kaiweb.core.queries import update_rows
from kaiweb.queues.models import Queue
from kaiweb.scheduling import status_writer
from kaiweb.scheduling.adapters import Recorded
from kaiweb.scheduling.choices import DecisionKind
from kaiweb.scheduling.models import Decision, line_key
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, PodState
from kaiweb.workloads.models import Pod, Workload
from scheduler_core.units import mb_to_bytes

log = logging.getLogger(__name__)


@dataclass
class WriteBackReport:
    queue_statuses: int = 0
    pending_reports: int = 0
    pending_deferred: int = 0  # why-pending changes left for the next cycles (`pending_budget`)
    pod_group_statuses: int = 0
    pod_group_events: int = 0
    pod_group_deferred: int = 0  # PodGroups whose status or event waits for the next cycles (`pending_budget`)
    pod_group_stamps: int = 0
    pod_group_lines: int = 0  # PodGroups whose place in line or start estimate was written
    errors: list[str] = field(default_factory=list)


    def summary(self) -> dict[str, int]:
        """What the cycle keeps of it (`SchedulingCycle.write_back`): each count, and the errors' number."""
        counts = {k: v for k, v in dataclasses.asdict(self).items() if isinstance(v, int)}
        return {**counts, "errors": len(self.errors)}


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _amounts(figures: Mapping[str, Any]) -> ResourceAmounts:
    """Queue units (millicores, MB, devices) → a `ResourceAmounts`."""
    return ResourceAmounts(cpu_millis=int(round(float(figures.get("cpu", 0) or 0))),
                           memory_bytes=int(round(mb_to_bytes(figures.get("memory", 0) or 0))),
                           gpus=float(figures.get("gpu", 0) or 0))


def record_actions(applied: list[Decision]) -> None:
    """Reflect the applied binds and evictions (the cycle's decisions the cluster took) in the mirror
    at once, as KAI's cache does: a bound pod is Binding on its node, an evicted one Releasing, until
    the cluster says more. So the next cycle is right even if the watcher has not caught up yet."""
    binds = [(d.pod_id, d.node_id, d.gpu_groups) for d in applied
             if d.kind == DecisionKind.BIND and d.pod_id is not None]
    evicts = [d.pod_id for d in applied if d.kind == DecisionKind.EVICT and d.pod_id is not None]
    with transaction.atomic():
        # The watcher writes the same rows: each is read and written under its row lock.
        pods = {p.pk: p for p in lock_pods(Pod.objects.filter(pk__in=[b[0] for b in binds] + evicts))}
        _record(pods, binds, evicts)
        # As KAI stamps a PodGroup when it evicts any of its pods: the preemption delay starts again
        # from it (the write-back puts it on the PodGroup). Never moved back (`stamps.later`).
        evicted = sorted({pods[p].workload_id for p in evicts if p in pods})
        if evicted:
            at = clock.now()
            Workload.objects.filter(Q(last_eviction_at__isnull=True) | Q(last_eviction_at__lt=at),
                                    pk__in=evicted).update(last_eviction_at=at)


def _record(pods: dict[int, Pod], binds: list[tuple[int, int, list[str]]], evicts: list[int]) -> None:
    changed = []
    for pod_id, node_id, group in binds:
        p = pods.get(pod_id)
        if p is not None and p.state in (PodState.PENDING, PodState.GATED):
            p.state, p.node_id, p.gpu_groups = PodState.BINDING, node_id, list(group or ())
            changed.append(p)
    for pod_id in evicts:
        p = pods.get(pod_id)
        if p is not None and p.state in ALLOCATED_POD_STATES:
            p.state = PodState.RELEASING
            changed.append(p)
    update_rows(Pod, changed, ["state", "node_id", "gpu_groups"])


USAGE_DB_CONDITION, FIELDS_CONDITION = "UsageDatabaseRead", "FieldsApplied"
_CONDITION_MESSAGE_MAX = 4000


def shard_conditions(shard: Any) -> list[dict[str, str]]:
    """kaiweb's conditions for the shard's SchedulingShard object: whether every field it sets is
    applied (else which are not, and why) and, when it names a usage database, whether the cycle
    reads it (else why not: no answer yet, stale, the last fetch's error)."""
    rows = [r for r in (shard.unsupported_fields or []) if isinstance(r, dict)]
    out = [{"type": FIELDS_CONDITION, "status": "False" if rows else "True",
            "reason": "NotApplied" if rows else "AllApplied",
            "message": ("; ".join(f"{r.get('field')}: {r.get('reason')}" for r in rows)
                        or "every field the object sets is applied")[:_CONDITION_MESSAGE_MAX]}]
    if shard.usage_db:
        usage, why = shard.usage_db_answer()
        out.append({"type": USAGE_DB_CONDITION, "status": "True" if usage is not None else "False",
                    "reason": "Answered" if usage is not None else "OwnAccounting",
                    "message": why[:_CONDITION_MESSAGE_MAX]})
    return out


def _write_shard_conditions(gateway: Any, shard: Any, digests: dict[str, str], report: WriteBackReport) -> None:
    """The shard's conditions to its SchedulingShard object, when they changed since last written
    (the digest kept beside the queues', under a key no queue name can take)."""
    conditions = shard_conditions(shard)
    key, digest = f"SchedulingShard/{shard.name}", _digest(conditions)
    if digests.get(key) == digest:
        return
    try:
        gateway.write_shard_conditions(shard.name, conditions)
    except ClusterError as exc:
        report.errors.append(str(exc))
        log.warning("shard status not written: %s", exc)
        return
    digests[key] = digest


def write_back(gateway: Any, cycle: Any, recorded: Recorded) -> WriteBackReport:
    """After a cycle: queue status to each Queue CRD, the shard's conditions to its SchedulingShard
    object (`shard_conditions`), the why-pending explanation to each
    pending pod (and to each unreadable one), each only when it changed since last written, and
    each PodGroup's stamps where its workload holds later ones and its place in line (`_write_annotations`). The queue status and
    the why-pending are what the cycle recorded (``recorded``), not read back."""
    report = WriteBackReport()
    cluster = cycle.shard.cluster
    state = mirror_state(cluster)

    # Queue status.
    children: dict[str, list[str]] = {}
    for name, parent in Queue.objects.filter(parent__isnull=False).values_list("name", "parent__name"):
        children.setdefault(parent, []).append(name)
    digests = dict(state.queue_status_digests or {})
    for name, st in sorted(recorded.queue_statuses.items()):
        update = QueueStatusUpdate(name=name, allocated=_amounts(st.allocated),
                                   allocated_non_preemptible=_amounts(st.allocated_non_preemptible),
                                   requested=_amounts(st.requested),
                                   child_queues=tuple(sorted(children.get(name, []))))
        digest = _digest(update.allocated, update.allocated_non_preemptible, update.requested, update.child_queues)
        if digests.get(update.name) == digest:
            continue
        try:
            gateway.write_queue_status(update)
        except ClusterError as exc:
            report.errors.append(str(exc))
            log.warning("queue status not written: %s", exc)
            continue
        digests[update.name] = digest
        report.queue_statuses += 1
    _write_shard_conditions(gateway, cycle.shard, digests, report)
    state.queue_status_digests = digests
    state.save(update_fields=["queue_status_digests"])

    # Why pending: each pending pod of a workload the cycle left pending, and each unreadable pod.
    wanted: dict[tuple[str, str], tuple[str, str, str]] = {}  # (ns, pod) → (uid, reason, message)
    reasons = recorded.why_pending
    for p in Pod.objects.filter(workload_id__in=list(reasons), state=PodState.PENDING).select_related("workload"):
        code, message = reasons[p.workload_id]
        # KAI's event reason for a pod left pending is Kubernetes' own "Unschedulable".
        wanted[(p.workload.namespace, p.name)] = (p.uid, "Unschedulable", message or code)
    for u in UnreadableObject.objects.filter(cluster=cluster, kind="Pod"):
        wanted[(u.namespace, u.name)] = (u.uid, "Deferred" if u.deferred else "Unreadable", u.message)
    known = {(r.namespace, r.name): r for r in PendingReport.objects.filter(cluster=cluster)}
    now = timezone.now()
    create, update = [], []
    # What changed since last written, the pods never explained first (then by name), at most
    # `pending_budget` of them, written concurrently; the rest in the next cycles.
    todo = []
    for (ns, name), (uid, reason, message) in wanted.items():
        digest = _digest(uid, reason, message)
        row = known.get((ns, name))
        if row is None or row.digest != digest:
            todo.append((row is not None, ns, name, uid, reason, message, digest, row))
    todo.sort(key=lambda item: item[:3])
    report.pending_deferred = max(0, len(todo) - pending_budget(cycle))
    todo = todo[:pending_budget(cycle)]
    errors = gateway.report_pending_many([(PodRef(ns, name, uid), reason, message)
                                          for _, ns, name, uid, reason, message, _, _ in todo])
    for (_, ns, name, uid, reason, _message, digest, row), error in zip(todo, errors, strict=True):
        if error is not None:
            report.errors.append(str(error))
            log.warning("why-pending not written: %s", error)
            continue
        report.pending_reports += 1
        if row is None:
            create.append(PendingReport(cluster=cluster, namespace=ns, name=name, uid=uid, reason=reason[:64],
                                        digest=digest, reported_at=now))
        else:
            row.uid, row.reason, row.digest, row.reported_at = uid, reason[:64], digest, now
            update.append(row)
    # PodGroup status, events, stamps and place in line, judged against what each PodGroup says
    # (`_pod_groups_said`).
    listed, times = _pod_groups_said(cluster)
    line = status_writer.waiting_line_annotations(cluster, cycle.shard_id, recorded.positions)
    _write_annotations(gateway, cluster, listed, times, line, report, stamps_budget=stamp_budget(cycle),
                       line_budget=line_budget(cycle))
    # Only a PodGroup with a pod waiting, or with a condition to take away, can need a status or an event.
    waiting = set(Pod.objects.filter(workload__cluster=cluster, state__in=(PodState.PENDING, PodState.GATED))
                  .values_list("workload__namespace", "workload__name").distinct())
    written = status_writer.write_pod_group_status(gateway, cycle, {
        key: raw for key, raw in listed.items() if key in waiting or raw["status"]["schedulingConditions"]},
        recorded.why_pending, budget=pending_budget(cycle))
    report.pod_group_statuses = written.statuses_written
    report.pod_group_events, report.pod_group_deferred = written.events, written.deferred
    report.errors.extend(written.errors)
    _keep_said(cluster, {key: {"conditions": conditions} for key, conditions in written.conditions.items()})
    _keep_events(cluster, written.events_said)
    still_pending = wanted.keys() | set(Pod.objects.filter(workload__cluster=cluster, state=PodState.PENDING)
                                        .values_list("workload__namespace", "name"))
    with transaction.atomic():
        PendingReport.objects.bulk_create(create, batch_size=BATCH)
        PendingReport.objects.bulk_update(update, ["uid", "reason", "digest", "reported_at"], batch_size=BATCH)
        stale = [r.pk for k, r in known.items() if k not in still_pending]
        if stale:
            PendingReport.objects.filter(pk__in=stale).delete()
    return report


def _pod_groups_said(cluster: Cluster) -> tuple[dict[tuple[str, str], dict[str, Any]],
                                                  dict[tuple[str, str], dict[str, datetime | None]]]:
    """Each PodGroup of the cluster as far as the write-back reads it (its uid, its workload's key in the
    waiting lines, KAI's stamp annotations and kaiweb's line annotations, its scheduling conditions), from the mirror: what the watcher saw when it first saw it (or when it
    last changed), then what the write-back wrote (`_keep_said`); and its workload's times (stamp field
    → time), from the same query. No listing of every PodGroup per cycle: at 16,000 PodGroups that took
    most of an idle cycle. A change someone else makes to these fields alone is seen at the next full sync."""
    listed: dict[tuple[str, str], dict[str, Any]] = {}
    times: dict[tuple[str, str], dict[str, datetime | None]] = {}
    rows = Workload.objects.filter(cluster=cluster).exclude(uid="").exclude(
        labels__has_key=IMPLICIT_GROUP_LABEL).values_list("pk", "namespace", "name", "uid", "pod_group_said",
                                                       "pod_group_event", *stamps.FIELDS)
    for pk, namespace, name, uid, said, event, *at in rows:
        said = said if isinstance(said, Mapping) else {}
        listed[(namespace, name)] = {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"namespace": namespace, "name": name, "uid": uid,
                         "annotations": dict(said.get("annotations") or {})},
            "line_key": line_key(pk),
            "status": {"schedulingConditions": list(said.get("conditions") or [])},
            "said_event": event}
        times[(namespace, name)] = dict(zip(stamps.FIELDS, at, strict=True))
    return listed, times


def _keep_said(cluster: Cluster, written: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Record on the workloads' rows what the write-back wrote on their PodGroups: ``conditions`` (the
    whole list) and ``annotations`` (merged; None takes a key away)."""
    if not written:
        return
    rows = [w for w in Workload.objects.filter(cluster=cluster, name__in={n for _, n in written}).only(
        "pk", "namespace", "name", "pod_group_said") if (w.namespace, w.name) in written]
    for w in rows:
        change = written[(w.namespace, w.name)]
        said = dict(w.pod_group_said or {})
        if "conditions" in change:
            said["conditions"] = list(change["conditions"])
        if "annotations" in change:
            annotations = {**(said.get("annotations") or {}), **change["annotations"]}
            said["annotations"] = {k: v for k, v in annotations.items() if v is not None}
        w.pod_group_said = said
    update_rows(Workload, rows, ["pod_group_said"])


def _keep_events(cluster: Cluster, said: Mapping[tuple[str, str], list[Any]]) -> None:
    """Record on the workloads' rows the event the write-back said on each PodGroup (`status_writer._event_due`)."""
    if not said:
        return
    rows = [w for w in Workload.objects.filter(cluster=cluster, name__in={n for _, n in said}).only(
        "pk", "namespace", "name", "pod_group_event") if (w.namespace, w.name) in said]
    for w in rows:
        w.pod_group_event = list(said[(w.namespace, w.name)])
    update_rows(Workload, rows, ["pod_group_event"])


def _per_cycle(cycle: Any, budget: int) -> int:
    """``budget`` after a cycle that neither bound nor evicted, a tenth of it (at least 1) after one that
    did, so a fill or a reclaim is not followed by thousands of patches before the next cycle can start."""
    acted = (getattr(cycle, "binds", 0) or 0) + (getattr(cycle, "evictions", 0) or 0)
    return max(1, budget // 10) if acted else max(1, budget)


def stamp_budget(cycle: Any) -> int:
    """How many PodGroups' stamps a cycle's write-back writes at most: ``KAI_STAMP_WRITES_PER_CYCLE``
    (`_per_cycle`). The stamps are for a move between schedulers: the database holds the times the
    engine reads."""
    return _per_cycle(cycle, int(getattr(settings, "KAI_STAMP_WRITES_PER_CYCLE", 50)))


def pending_budget(cycle: Any) -> int:
    """How many pending pods' why-pending (condition and event) a cycle's write-back writes at most, and
    how many PodGroup statuses and events: ``KAI_PENDING_WRITES_PER_CYCLE`` each (`_per_cycle`). A
    reclaim that leaves thousands of pods waiting would otherwise hold the next cycle's binds back
    while each is explained."""
    return _per_cycle(cycle, int(getattr(settings, "KAI_PENDING_WRITES_PER_CYCLE", 1000)))


def line_budget(cycle: Any) -> int:
    """How many PodGroups' place in line and start estimate a cycle's write-back writes at most:
    ``KAI_LINE_WRITES_PER_CYCLE`` (`_per_cycle`). A start at the head of a long line moves every place
    behind it: the rest follow in the next cycles, the head of the line first."""
    return _per_cycle(cycle, int(getattr(settings, "KAI_LINE_WRITES_PER_CYCLE", 100)))


def _write_annotations(gateway: Any, cluster: Cluster, listed: Mapping[tuple[str, str], Mapping[str, Any]],
                       times: Mapping[tuple[str, str], Mapping[str, datetime | None]],
                       line: Mapping[str, Mapping[str, str | None]], report: WriteBackReport, *,
                       stamps_budget: int, line_budget: int) -> None:
    """Each PodGroup's annotations, judged against what the mirror keeps of the PodGroup (``listed``), so
    a steady cluster costs no writes:

    * its stamps from its workload's ``times`` where they are later than what it says
      (`stamps.annotations_wanted`); at most ``stamps_budget`` PodGroups (`stamp_budget`), the first by name;
    * its place in line and start estimate (``line``: line key → `status_writer.line_annotations`; none
      for a PodGroup that does not wait) where they differ from what it says; at most ``line_budget``
      PodGroups (`line_budget`): those that stopped waiting first, then in the shard's order.

    A PodGroup with both gets one patch. What is left over is still different next cycle and written then."""
    stamp_changes: dict[tuple[str, str], dict[str, str | None]] = {}
    line_changes: list[tuple[tuple[int, int], tuple[str, str], dict[str, str | None]]] = []
    nothing = status_writer.line_annotations(None, None)
    for key, raw in listed.items():
        said = (raw.get("metadata") or {}).get("annotations") or {}
        wanted = stamps.annotations_wanted(times.get(key) or {}, said)
        if wanted:
            stamp_changes[key] = wanted
        should = line.get(str(raw.get("line_key") or "")) or nothing
        diff = {k: v for k, v in should.items() if said.get(k) != v}
        if diff:
            place = should[SHARD_POSITION_ANNOTATION]
            line_changes.append(((0, 0) if place is None else (1, int(place)), key, diff))
    stamped = set(sorted(stamp_changes)[:stamps_budget])
    merged = {key: dict(stamp_changes[key]) for key in stamped}
    lined = set()
    for _, key, diff in sorted(line_changes)[:line_budget]:
        merged[key] = {**merged.get(key, {}), **diff}
        lined.add(key)
    if not merged:
        return
    changes = [(ns, name, str((listed[(ns, name)].get("metadata") or {}).get("uid") or ""), merged[(ns, name)])
               for ns, name in sorted(merged)]
    written: dict[tuple[str, str], dict[str, Any]] = {}
    for (namespace, name, _, wanted), error in zip(changes, gateway.annotate_pod_groups(changes), strict=True):
        key = (namespace, name)
        if error is None:
            report.pod_group_stamps += int(key in stamped)
            report.pod_group_lines += int(key in lined)
            written[key] = {"annotations": dict(wanted)}
        else:
            report.errors.append(str(error))
            log.warning("PodGroup %s/%s: annotations not written: %s", namespace, name, error)
    _keep_said(cluster, written)
