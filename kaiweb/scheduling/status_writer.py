"""PodGroup status and events, written as KAI writes them after each cycle.

For every PodGroup of the cluster (a hand-made one or one the pod-grouper made; a pod's implicit
single-pod group has no PodGroup object and is explained on the pod alone):

* pods still waiting, but fewer exist than the gang needs → a ``NotReady`` event on the PodGroup,
  "Job is not ready for scheduling. Waiting for N pods, currently M exist, G are gated" (per
  subgroup when it has subgroups); the scheduler does not try it;
* pods still waiting after a cycle that tried → ``status.schedulingConditions`` gets one
  ``UnschedulableOnNodePool`` condition (reason ``Unschedulable``, the message, and ``reasons``
  with KAI's one-word reason: ``OverLimit``, ``NonPreemptibleOverQuota``,
  ``PreemptionDelayNotElapsed``, ``QueueDoesNotExist`` where ours maps to one) and an
  ``Unschedulable`` event — unless some of its pods are allocated, as KAI leaves it then;
* nothing waiting → the scheduling conditions are cleared.

Each write happens only when the status differs from what the PodGroup already says (as the
mirror keeps it: what the watcher saw, then what was written), and each event once per distinct
message, so a steady cluster costs no writes.

For ``kubectl`` users, each waiting PodGroup also says where it stands (`line_annotations`): its place
in the engine's order in its queue and in its shard (``kaiweb.io/queue-position``,
``kaiweb.io/shard-position``, from the cycle's waiting line) and, once the worker has estimated it, when
it may start (``kaiweb.io/start-estimate-p50``, ``-p80``: RFC 3339 UTC, to the minute) and why it waits
(``kaiweb.io/start-estimate-reason``). Annotations rather than status fields: KAI's PodGroup CRD fixes
its status fields and the API server prunes any other. They go away once the PodGroup no longer waits.
The write-back writes them with KAI's stamps, one patch per PodGroup, only where they changed and at
most ``KAI_LINE_WRITES_PER_CYCLE`` PodGroups a cycle, the head of the line first.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kaiweb.cluster.backends.kubernetes.parsing import stamp_text
from kaiweb.cluster.backends.types import (
    LINE_ANNOTATION_MAX,
    LINE_ANNOTATIONS,
    QUEUE_POSITION_ANNOTATION,
    SHARD_POSITION_ANNOTATION,
    START_P50_ANNOTATION,
    START_P80_ANNOTATION,
    START_REASON_ANNOTATION,
)
from kaiweb.cluster.errors import ClusterError
from kaiweb.core import clock
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, PodState
from scheduler_core import reasons as reason_codes

log = logging.getLogger(__name__)

CONDITION_TYPE = "UnschedulableOnNodePool"
# The engine's reason codes (scheduler_core.reasons) → KAI's UnschedulableReason, where KAI has one;
# a code is looked up whole.
KAI_REASONS = {
    reason_codes.QUEUE_OVER_LIMIT: "OverLimit",
    reason_codes.NON_PREEMPTIBLE_OVER_QUOTA: "NonPreemptibleOverQuota",
    reason_codes.PREEMPT_NON_PREEMPTIBLE_OVER_QUOTA: "NonPreemptibleOverQuota",
    reason_codes.PREEMPTION_DELAY: "PreemptionDelayNotElapsed",
}


def kai_reason(code: str) -> str | None:
    return KAI_REASONS.get(code)


@dataclass
class GangCount:
    """How many pods of a gang (or of one subgroup) exist, wait, are gated."""

    name: str  # "" for the whole PodGroup
    min_member: int
    alive: int = 0
    gated: int = 0

    @property
    def ready(self) -> bool:
        return self.alive >= self.min_member


@dataclass
class StatusReport:
    statuses_written: int = 0
    events: int = 0
    deferred: int = 0  # PodGroups with a status or event due, left for the next cycles: the budget was spent
    errors: list[str] = field(default_factory=list)
    # (namespace, name) → the scheduling conditions written on that PodGroup
    conditions: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    # (namespace, name) → [digest, epoch seconds] of the event said on that PodGroup (`_event_due`)
    events_said: dict[tuple[str, str], list[Any]] = field(default_factory=dict)


def not_ready_message(counts: Iterable[GangCount]) -> str | None:
    """KAI's NotReady message, or None when every part of the gang has enough pods."""
    parts = []
    for c in counts:
        if c.ready:
            continue
        if c.name:
            parts.append(f" Waiting for {c.min_member} pods for SubGroup {c.name}, currently {c.alive} exist, "
                         f"{c.gated} are gated.")
        else:
            parts.append(f" Waiting for {c.min_member} pods, currently {c.alive} exist, {c.gated} are gated")
    return "Job is not ready for scheduling." + "".join(parts) if parts else None


def gang_counts(min_member: int | None, subgroups: list[dict[str, Any]] | None,
                pods: Iterable[tuple[str, str]]) -> list[GangCount]:
    """The gang's parts: one per leaf subgroup with its minMember, or the whole PodGroup."""
    pods = list(pods)  # (state, subgroup)
    parents = {sg.get("parent") for sg in subgroups or [] if isinstance(sg, dict)}
    leaves = [sg for sg in subgroups or [] if isinstance(sg, dict) and sg.get("name") and sg["name"] not in parents]
    live_states = (PodState.PENDING, PodState.GATED, *ALLOCATED_POD_STATES)
    if not leaves:
        counts = [GangCount("", 1 if min_member is None else min_member)]
        owners = {"": counts[0]}
        key = lambda _sub: ""  # noqa: E731 - one bucket
    else:
        counts = [GangCount(sg["name"], int(sg.get("minMember") or 0)) for sg in leaves]
        owners = {c.name: c for c in counts}
        key = lambda sub: sub  # noqa: E731
    for state, sub in pods:
        bucket = owners.get(key(sub))
        if bucket is None or state not in live_states:
            continue
        bucket.alive += 1
        if state == PodState.GATED:
            bucket.gated += 1
    return counts


def desired_conditions(current: list[Any], *, message: str, reason: str | None, node_pool: str) -> list[dict[str, Any]]:
    """The one scheduling condition to hold; its transition time and id are kept when it says the same."""
    wanted = {"type": CONDITION_TYPE, "nodePool": node_pool, "reason": "Unschedulable", "message": message,
              "status": "True", "reasons": [{"reason": reason or "Unschedulable", "message": message}]}
    for cond in current or []:
        if isinstance(cond, Mapping) and all(cond.get(k) == v for k, v in wanted.items()):
            return [dict(cond)]
    previous = max((int(c.get("transitionID") or 0) for c in current or [] if isinstance(c, Mapping)
                    and str(c.get("transitionID") or "0").isdigit()), default=0)
    return [{**wanted, "transitionID": str(previous + 1),
             "lastTransitionTime": clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")}]


def write_pod_group_status(gateway: Any, cycle: Any, pod_groups: Mapping[tuple[str, str], Mapping[str, Any]],
                           why_pending: Mapping[int, tuple[str, str]], budget: int | None = None) -> StatusReport:
    """After a cycle: the status and events of each PodGroup of the shard (see the module docstring).

    ``pod_groups``: each PodGroup as far as this reads it (metadata.uid, status.schedulingConditions)
    by (namespace, name), from the mirror (`write_back._pod_groups_said`). ``why_pending``: workload id
    → (reason code, message), as the cycle recorded it (`adapters.Recorded.why_pending`). ``budget``: the
    writes (statuses and events) this cycle makes at most: first for the PodGroups never told anything
    yet, then in name order; the PodGroups after it are judged again next cycle (``report.deferred``).
    So a new PodGroup among thousands is told why it waits within a cycle or two, whatever its name."""
    from kaiweb.workloads.models import Pod, Workload

    report = StatusReport()
    cluster = cycle.shard.cluster
    workloads = {w.pk: w for w in Workload.objects.filter(cluster=cluster, namespace__in={ns for ns, _ in pod_groups},
                                                          name__in={n for _, n in pod_groups})}
    pods: dict[int, list[tuple[str, str]]] = {}
    for wid, state, sub in Pod.objects.filter(workload_id__in=list(workloads)).values_list("workload_id", "state",
                                                                                           "subgroup"):
        pods.setdefault(wid, []).append((state, sub or ""))
    def told_first(kv: tuple[int, Any]) -> tuple[bool, str, str]:
        raw = pod_groups.get((kv[1].namespace, kv[1].name)) or {}
        return bool(raw.get("said_event")), kv[1].namespace, kv[1].name

    for wid, w in sorted(workloads.items(), key=told_first):
        raw = pod_groups.get((w.namespace, w.name))
        if raw is None:
            continue
        states = pods.get(wid, [])
        waiting = any(s in (PodState.PENDING, PodState.GATED) for s, _ in states)
        allocated = any(s in ALLOCATED_POD_STATES for s, _ in states)
        meta = raw.get("metadata") or {}
        ref = {"apiVersion": raw.get("apiVersion", "scheduling.run.ai/v2alpha2"), "kind": "PodGroup",
               "namespace": w.namespace, "name": w.name, "uid": meta.get("uid", "")}
        current = list(((raw.get("status") or {}).get("schedulingConditions")) or [])
        wanted, event = current, None
        if waiting:
            not_ready = not_ready_message(gang_counts(w.min_member, w.subgroups, states))
            why = why_pending.get(wid)
            if not_ready is not None:
                event = _event_due(ref, "NotReady", not_ready, raw.get("said_event"))
            elif why is not None:
                code, message = why[0], why[1] or why[0]
                event = _event_due(ref, "Unschedulable", message, raw.get("said_event"))
                if not allocated:
                    wanted = desired_conditions(current, message=message, reason=kai_reason(code),
                                                node_pool=cycle.shard.name)
        else:
            wanted = [c for c in current if not (isinstance(c, Mapping) and c.get("type") == CONDITION_TYPE)]
        if event is None and wanted == current:
            continue  # nothing to tell it
        if budget is not None and report.events + report.statuses_written >= budget:
            report.deferred += 1
            continue
        try:
            if event is not None:
                gateway.object_event(ref, "Normal", event[0], event[1])
                report.events += 1
                report.events_said[(w.namespace, w.name)] = event[2]
            if wanted != current:
                gateway.write_pod_group_status(w.namespace, w.name, {"schedulingConditions": wanted})
                report.statuses_written += 1
                report.conditions[(w.namespace, w.name)] = wanted
        except ClusterError as exc:
            report.errors.append(str(exc))
            log.warning("PodGroup %s/%s status not written: %s", w.namespace, w.name, exc)
    return report


# A PodGroup's event is said again after this long even if unchanged (Kubernetes keeps events an hour).
EVENT_REPEAT_SECONDS = 1800.0


def _event_due(ref: Mapping[str, str], reason: str, message: str, said: Any) -> tuple[str, str, list[Any]] | None:
    """The Normal event to say on the PodGroup as (reason, message, what the mirror keeps of it), or None
    when the write-back said the same one on this incarnation less than `EVENT_REPEAT_SECONDS` ago
    (``said``: what the mirror keeps, ``[digest, epoch seconds]``). Saying it again is a no-op for the
    API server (the same event exists) but a round trip: at thousands of waiting PodGroups those took
    most of every cycle."""
    digest = hashlib.sha256(f"{ref.get('uid', '')}|Normal|{reason}|{message}".encode()).hexdigest()[:16]
    now = clock.timestamp()
    if isinstance(said, list) and len(said) == 2 and said[0] == digest and now - float(said[1]) < EVENT_REPEAT_SECONDS:
        return None
    return reason, message, [digest, round(now, 1)]


# ------------------------------------------------------------------ the place in line, for kubectl

# shard id → (estimated_at of the refresh read, line key → (p50, p80, reason) texts): the estimates change
# once per refresh, the places every cycle, so a cycle rewords only a refresh it has not read yet.
_ESTIMATE_TEXTS: dict[int, tuple[datetime, dict[str, tuple[str | None, str | None, str]]]] = {}


def _minute_text(at: datetime | None) -> str | None:
    return None if at is None else stamp_text((at + timedelta(seconds=30)).replace(second=0, microsecond=0))


def _utc_clock(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%H:%M UTC")


def line_annotations(place: Any, texts: tuple[str | None, str | None, str] | None) -> dict[str, str | None]:
    """The annotations a PodGroup should hold (key → text, None: none): ``place`` is its [place in the
    shard, place in its queue] (None: it does not wait, so none), ``texts`` its estimate's p50, p80 and
    reason as `estimate_texts` words them (None: not estimated yet)."""
    out: dict[str, str | None] = dict.fromkeys(LINE_ANNOTATIONS)
    if not isinstance(place, list | tuple) or len(place) != 2:
        return out
    out[SHARD_POSITION_ANNOTATION], out[QUEUE_POSITION_ANNOTATION] = str(int(place[0])), str(int(place[1]))
    if texts is not None:
        out[START_P50_ANNOTATION], out[START_P80_ANNOTATION], reason = texts
        out[START_REASON_ANNOTATION] = reason[:LINE_ANNOTATION_MAX]
    return out


def annotation_texts(row: Mapping[str, Any], now: float, at: datetime, samples: int) -> list[str | None]:
    """An estimate row (``WaitingLine.estimates``) as its PodGroup's annotations say it: p50 and p80 in
    RFC 3339 UTC to the minute (None: not within the horizon) and the reason, its times in UTC. Worded
    by the refresh, on its worker, and stored with the row (``"said"``), so no cycle words thousands."""
    from kaiweb.scheduling.selectors import estimate_of

    e = estimate_of(dict(row), now, at, samples, clock_text=_utc_clock)
    return [_minute_text(e.p50_at), _minute_text(e.p80_at), e.reason[:LINE_ANNOTATION_MAX]]


def estimate_texts(shard_id: int, estimated_at: datetime) -> dict[str, tuple[str | None, str | None, str]]:
    """A shard's stored estimates' annotation texts (`annotation_texts`), by line key; read once per
    refresh (kept by shard and ``estimated_at``)."""
    from kaiweb.scheduling.models import WaitingLine

    held = _ESTIMATE_TEXTS.get(shard_id)
    if held is not None and held[0] == estimated_at:
        return held[1]
    row = WaitingLine.objects.filter(shard_id=shard_id).values("estimates", "estimated_at").first()
    texts: dict[str, tuple[str | None, str | None, str]] = {}
    if row is not None and row["estimated_at"] is not None:
        for key, stored in (row["estimates"] or {}).items():
            said = stored.get("said") if isinstance(stored, Mapping) else None
            if isinstance(said, list) and len(said) == 3:
                texts[key] = (said[0], said[1], str(said[2] or ""))
        _ESTIMATE_TEXTS[shard_id] = (row["estimated_at"], texts)
    return texts


def waiting_line_annotations(cluster: Any, shard_id: int | None = None,
                             positions: Mapping[str, Any] | None = None) -> dict[str, dict[str, str | None]]:
    """Line key (``w<workload id>``) → the annotations its PodGroup should hold (`line_annotations`), for
    every workload waiting in one of the cluster's shards' lines: ``shard_id``'s as its cycle recorded it
    (``positions``, from memory), the other shards' as their latest cycles did. One query, one more when the
    cluster has other shards, and one per shard whose estimates were refreshed since the last read."""
    from kaiweb.scheduling.models import WaitingLine

    lines = list(WaitingLine.objects.filter(shard__cluster=cluster).order_by("shard_id").values_list(
        "shard_id", "estimated_at"))
    places = {sid: positions for sid, _ in lines if sid == shard_id and positions is not None}
    others = [sid for sid, _ in lines if sid not in places]
    if others:
        places.update(WaitingLine.objects.filter(shard_id__in=others).values_list("shard_id", "positions"))
    out: dict[str, dict[str, str | None]] = {}
    for sid, estimated_at in lines:
        texts = estimate_texts(sid, estimated_at) if estimated_at is not None else {}
        for key, place in (places.get(sid) or {}).items():
            out[key] = line_annotations(place, texts.get(key))
    return out
