"""One scheduling cycle against a cluster (DESIGN.md "One scheduling cycle"): the service behind
the `scheduling.run_cycle` task and the `run_cycle` command.

    lock → reconcile → observe → snapshot → decide → record intent → apply → mark applied

Crash safety: the decisions are recorded (PLANNED, each with its idempotency key) before
anything is applied, and marked APPLIED afterwards. A worker that dies anywhere in between
leaves either nothing (died before recording: nothing was applied either) or an intent log;
the next cycle of the shard first reconciles that log against the cluster (an action that
took effect is marked applied, one that did not is marked failed and decided afresh) and
marks the abandoned cycle failed. The gateway's actions are idempotent, so a retried or
duplicated task never binds or evicts twice.

Per-process memory. A worker remembers three things per shard between cycles: the engine's memo
(``_MEMOS``: verdicts and the last quiet result, `scheduler_core.memo`), the last cycle it recorded
(``_RECORDED``) and the objects of its last snapshot build (``adapters._BUILT``). Any worker may run
a shard's next cycle, so each is kept where it is, in the process, and made harmless rather than
shared: every entry is stored under everything it was computed from and used only when that is
equal again (the memo compares the snapshot and config; a build compares the committed change
counter and each row), or, for the one fact about other workers, "the latest record of this shard
is mine", checked against the database before it is used (`_repeats`). A worker whose memory is
stale or empty computes afresh what the other worker would have reused. Sharing them would gain
nothing: what they save is the identity of objects and work inside one process (a reused object
is compared by identity, a pickled one is a new object), and a shared copy would cost a round trip
and serialisation of thousands of specs per cycle. ``tests/kaiweb/scheduling/test_two_workers.py``
holds it: two workers, each with its own memory, taking turns on one shard in any order decide
exactly what one worker decides, cycle after cycle, why-pending included.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import OperationalError, transaction
from django.utils import timezone

from kaiweb.cluster import mirror
from kaiweb.cluster.backends.types import ActionOutcome, ActionResult, BindAction, EvictAction
from kaiweb.cluster.gateway import Capability, get_gateway
from kaiweb.cluster.models import SchedulingShard
from kaiweb.core import clock
from kaiweb.core.locks import advisory_lock
from kaiweb.org.assigner import assign as assign_node_pools
from kaiweb.scheduling import adapters, dra
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.fragmentation import shard_fragmentation
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.scheduling.signals import cycle_step
from kaiweb.scheduling.typical_pods import shard_typical_pods
from kaiweb.scheduling.write_back import record_actions, write_back
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod
from scheduler_core import model as m
from scheduler_core import run_cycle
from scheduler_core.cycle import collector_paused
from scheduler_core.memo import CycleMemo

log = logging.getLogger(__name__)

INTERRUPTED = (
    "interrupted: the worker running this cycle stopped (killed, or lost its database or broker) "
    "before finishing; the next cycle reconciled its decisions with the cluster"
)


@dataclass(slots=True)
class CycleOutcome:
    """What one cycle did, for tasks, commands and benchmarks."""

    cycle_id: int | None
    status: str
    binds: int = 0
    evictions: int = 0
    pipelined: int = 0
    pending: int = 0
    duration_ms: float = 0.0
    phases_ms: dict[str, float] = field(default_factory=dict)
    queries: int | None = None
    result: m.CycleResult | None = None
    snapshot: m.ClusterSnapshot | None = None
    skipped: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle_id, "status": self.status, "binds": self.binds, "evictions": self.evictions,
            "pipelined": self.pipelined, "pending": self.pending, "duration_ms": round(self.duration_ms, 2),
            "phases_ms": {k: round(v, 2) for k, v in self.phases_ms.items()},
        }


# ----------------------------------------------------------------------------------- helpers


# One engine memo per shard, kept by the worker process across that shard's cycles: what it
# remembers cannot change a decision (scheduler_core.memo; property-tested against the stateless cycle,
# and two workers' memos against one: "Per-process memory" above).
_MEMOS: dict[int, CycleMemo] = {}
# Per shard, the last cycle this process recorded and the workloads it recorded them for: a quiet
# result the memo reuses repeats that cycle's record when no other cycle (of any worker) recorded since.
_RECORDED: dict[int, tuple[int, dict[str, int]]] = {}


def engine_run_cycle(snapshot: m.ClusterSnapshot, config: m.CycleConfig,
                     shard_id: int | None = None) -> m.CycleResult:
    """The engine's entry point, with the shard's memo when a shard is given."""
    memo = _MEMOS.setdefault(shard_id, CycleMemo()) if shard_id is not None else None
    return run_cycle(snapshot, config, memo=memo)


def _repeats(shard: SchedulingShard, cycle: SchedulingCycle, result: m.CycleResult,
             index: adapters.SnapshotIndex) -> int | None:
    """The cycle whose record ``result`` repeats: the engine reused a quiet result, the last cycle
    of the shard that succeeded is the one this process recorded, for the same workload rows."""
    recorded = _RECORDED.get(shard.pk)
    if not result.counts.get("reused") or recorded is None or recorded[1] != index.workloads:
        return None
    latest = (SchedulingCycle.objects.filter(shard=shard).exclude(pk=cycle.pk)
              .exclude(status=CycleStatus.RUNNING).order_by("-pk").values_list("pk", "status").first())
    return recorded[0] if latest == (recorded[0], CycleStatus.SUCCEEDED) else None


def resolve_shard(shard: SchedulingShard | int | str | None) -> SchedulingShard:
    """A shard by instance, id, "cluster/shard" or shard name.

    Default: the first enabled shard of a cluster of the configured backend
    (``KAI_CLUSTER_BACKEND``); for ``kubernetes`` that is the mirrored cluster, made on first use,
    so switching the backend schedules the real cluster and not an empty simulated one."""
    from django.conf import settings

    if isinstance(shard, SchedulingShard):
        return shard
    qs = SchedulingShard.objects.select_related("cluster")
    if shard is None:
        backend = settings.KAI_CLUSTER_BACKEND
        if backend == "kubernetes":
            from kaiweb.cluster.mirror import kubernetes_cluster

            kubernetes_cluster()
        found = SchedulingShard.objects.default()
        if found is None:
            raise LookupError(f"shard: no enabled scheduling shard of a {backend} cluster exists "
                              "(manage.py seed_demo creates the simulated one)")
        return found
    if isinstance(shard, int) or (isinstance(shard, str) and shard.isdigit()):
        found = qs.filter(pk=int(shard)).first()
    elif "/" in shard:
        cluster_name, shard_name = shard.split("/", 1)
        found = qs.filter(cluster__name=cluster_name, name=shard_name).first()
    else:
        found = qs.filter(name=shard).order_by("cluster__name").first()
    if found is None:
        raise LookupError(f"shard: {shard!r} does not exist")
    return found


# KAI's --max-consolidation-preemptees, set per shard in its SchedulingShard spec.args: at most that
# many victim jobs for one consolidation (0 turns consolidation off). Absent, or not a whole number
# ≥ 0, KAI's default (16, `CycleConfig`) holds.
MAX_CONSOLIDATION_PREEMPTEES_ARG = "max-consolidation-preemptees"


def max_consolidation_preemptees(shard: SchedulingShard) -> int | None:
    """The shard's ``max-consolidation-preemptees`` argument, or None when it sets none (or none valid)."""
    raw = str((shard.args or {}).get(MAX_CONSOLIDATION_PREEMPTEES_ARG, "")).strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def cycle_config(shard: SchedulingShard) -> m.CycleConfig:
    def seconds(value: Any) -> float:
        return value.total_seconds() if value is not None else 0.0

    cap = max_consolidation_preemptees(shard)
    return m.CycleConfig(
        gpu_placement=shard.gpu_placement, cpu_placement=shard.cpu_placement, k_value=shard.k_value,
        typical_pods=shard_typical_pods(shard),
        default_preempt_min_runtime_s=seconds(shard.preempt_min_runtime),
        default_reclaim_min_runtime_s=seconds(shard.reclaim_min_runtime),
        queue_depth_per_action=queue_depths(shard),
        **({} if cap is None else {"max_consolidation_preemptees": cap}),
        **({} if (actions := shard_actions(shard)) is None else {"actions": actions}),
    )


def shard_actions(shard: SchedulingShard) -> tuple[str, ...] | None:
    """The actions the shard's SchedulingShard object resolves to, in order (the engine's names;
    any other is left out, as the mirror reports it), or None for the engine's default order."""
    if not isinstance(shard.actions, list):
        return None
    return tuple(str(a) for a in shard.actions if a in m.ACTIONS)


def queue_depths(shard: SchedulingShard) -> tuple[tuple[str, int], ...]:
    """The shard's queueDepthPerAction as the engine takes it (action, depth), by action name; an
    entry that is not an action and a whole number ≥ 0 is left out (the mirror refuses such objects)."""
    depths = shard.queue_depth_per_action if isinstance(shard.queue_depth_per_action, dict) else {}
    return tuple((str(a), d) for a, d in sorted(depths.items())
                 if a in m.ACTIONS and isinstance(d, int) and not isinstance(d, bool) and d >= 0)


# ----------------------------------------------------------------------------------- reconcile


def reconcile(shard: SchedulingShard, gateway: Any) -> dict[str, int]:
    """Settle what earlier cycles of this shard left unfinished (call while holding the lock).

    PLANNED decisions: applied in the cluster → APPLIED, otherwise → FAILED (a later cycle decides
    again from what the cluster really is). RUNNING cycles: no one else can be running this
    shard's cycle while we hold its lock, so they were abandoned → FAILED with a clear error.
    """
    planned = list(
        Decision.objects.filter(cycle__shard=shard, status=DecisionStatus.PLANNED)
        .exclude(kind=DecisionKind.PIPELINE).select_related("workload")
    )
    applied, failed = [], []
    now = timezone.now()
    for d in planned:
        if d.kind == DecisionKind.BIND:
            done = _check(gateway, "is_bound", d.namespace, d.pod_name, d.pod_uid, d.node_name)
        else:
            done = _check(gateway, "is_gone", d.namespace, d.pod_name, d.pod_uid)
        if done:
            d.status, d.applied_at = DecisionStatus.APPLIED, now
            d.message = f"{d.message} (confirmed by reconciliation)"
            applied.append(d)
        else:
            d.status = DecisionStatus.FAILED
            d.message = f"{d.message} (not applied: the cycle was interrupted; decided again later)"
            failed.append(d)
    with transaction.atomic():
        Decision.objects.bulk_update(applied + failed, ["status", "applied_at", "message"])
        Decision.objects.filter(cycle__shard=shard, status=DecisionStatus.PLANNED,
                                kind=DecisionKind.PIPELINE).update(status=DecisionStatus.FAILED)
        abandoned = SchedulingCycle.objects.filter(shard=shard, status=CycleStatus.RUNNING).update(
            status=CycleStatus.FAILED, error=INTERRUPTED, finished_at=now)
    return {"applied": len(applied), "failed": len(failed), "abandoned_cycles": abandoned}


def _check(gateway: Any, method: str, *args: str) -> bool:
    fn = getattr(gateway, method) if Capability.RECONCILES in gateway.capabilities else None
    if fn is None:
        # A backend without its own answer is judged by the database mirror of its pods (kept
        # current by watch_cluster / the cycle's observe step).
        fn = _mirror_is_bound if method == "is_bound" else _mirror_is_gone
    return bool(fn(*args))


def _mirror_pods(namespace: str, name: str, uid: str) -> Any:
    from kaiweb.workloads.choices import ALLOCATED_POD_STATES
    from kaiweb.workloads.models import Pod

    pods = Pod.objects.filter(workload__namespace=namespace, name=name, state__in=ALLOCATED_POD_STATES)
    return pods.filter(uid=uid) if uid else pods


def _mirror_is_bound(namespace: str, name: str, uid: str, node: str) -> bool:
    return _mirror_pods(namespace, name, uid).filter(node__name=node).exists()


def _mirror_is_gone(namespace: str, name: str, uid: str) -> bool:
    return not _mirror_pods(namespace, name, uid).exists()


# ----------------------------------------------------------------------------------- the cycle


def run_and_record_cycle(
    shard: SchedulingShard | int | str | None = None,
    *,
    trigger: str = "manual",
    advance: bool = True,
    lock: bool = True,
) -> CycleOutcome:
    """Run one full cycle of a shard; returns its outcome (`skipped` if another holds the lock)."""
    shard = resolve_shard(shard)
    if not lock:
        with collector_paused():
            return _run_locked(shard, trigger=trigger, advance=advance)
    with advisory_lock("scheduling-cycle", str(shard.pk), wait=False) as got:
        if not got:
            log.info("cycle of shard %s skipped: another worker holds its lock", shard)
            return CycleOutcome(cycle_id=None, status=CycleStatus.SKIPPED, skipped=True)
        with collector_paused():
            return _run_locked(shard, trigger=trigger, advance=advance)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def _run_locked(shard: SchedulingShard, *, trigger: str, advance: bool) -> CycleOutcome:
    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    gateway = get_gateway(shard.cluster)
    t = time.perf_counter()
    reconcile(shard, gateway)
    phases["reconcile"] = _ms(t)
    cycle = SchedulingCycle.objects.create(shard=shard, trigger=trigger[:32], started_at=timezone.now(),
                                           status=CycleStatus.RUNNING)
    repeated: int | None = None
    try:
        t = time.perf_counter()
        caps = gateway.capabilities
        if advance and Capability.OWN_CLOCK in caps:
            gateway.advance()
        if Capability.MIRRORED in caps:
            # Kubernetes: pod-grouper, then the database mirror (a full list unless watch_cluster runs).
            mirror.observe(gateway, shard.cluster)
            # The cluster may configure the shard itself (a SchedulingShard object): decide with that.
            shard.refresh_from_db()
        phases["observe"] = _ms(t)

        # Each workload of a project gets its node pool and queue before any shard decides on it: its
        # pool is one label value, so no two shards ever take the same workload.
        t = time.perf_counter()
        assign_node_pools(gateway, shard.cluster)
        phases["assign"] = _ms(t)

        t = time.perf_counter()
        from kaiweb.usage.accounting import usage_for_engine

        now = gateway.now() if Capability.OWN_CLOCK in caps else clock.timestamp()
        snapshot, index = adapters.build_snapshot(shard, now=now, usage=usage_for_engine(shard))
        snapshot, claims = dra.prepare(snapshot, index, gateway)
        if claims is not None:
            index.claim_problems = dict(claims.problems)
        try:
            dra.record_devices(shard, snapshot, claims, gateway, cycle.pk)
        except Exception:  # noqa: BLE001 - shown on the node pages; the cycle decides without it
            log.exception("cycle %s: storing the nodes' DRA devices failed", cycle.pk)
        phases["snapshot"] = _ms(t)

        t = time.perf_counter()
        result = engine_run_cycle(snapshot, cycle_config(shard), shard.pk)
        phases["engine"] = _ms(t)
        cycle_step.send(sender=SchedulingCycle, point="after-decide", cycle=cycle)

        t = time.perf_counter()
        repeated = _repeats(shard, cycle, result, index)
        recorded = _persist(cycle, result, snapshot, index, repeated)
        to_apply = recorded.decisions
        phases["record"] = _ms(t)
        cycle_step.send(sender=SchedulingCycle, point="after-record", cycle=cycle)

        t = time.perf_counter()
        outcomes = apply_decisions(gateway, to_apply, shard, claims)
        phases["apply"] = _ms(t)
        cycle_step.send(sender=SchedulingCycle, point="after-apply", cycle=cycle)

        t = time.perf_counter()
        applied = mark_applied(cycle, to_apply, outcomes)
        if Capability.MIRRORED in caps:
            # The binds and evictions the cluster took are in the mirror before the next cycle
            # reads it, whether or not the watcher has seen them yet (never left to a step that may fail).
            _against_the_watcher(cycle, "recording the applied actions", lambda: record_actions(applied))
        phases["record"] += _ms(t)

        if Capability.MIRRORED in caps:
            # Kubernetes: queue and PodGroup status, why-pending and events (only what changed).
            t = time.perf_counter()
            try:
                cycle.write_back = write_back(gateway, cycle, recorded).summary()
            except Exception:  # noqa: BLE001 - the decisions are applied and recorded; the next cycle writes again
                log.exception("cycle %s: writing status back to the cluster failed", cycle.pk)
            phases["write_back"] = _ms(t)
    except Exception as exc:
        _RECORDED.pop(shard.pk, None)
        _fail(cycle, exc, phases, t0)
        cycle.refresh_from_db()
        cycle_step.send(sender=SchedulingCycle, point="finished", cycle=cycle)
        raise
    _RECORDED[shard.pk] = (cycle.pk, dict(index.workloads))
    t = time.perf_counter()
    try:
        if repeated is not None:
            # The nodes and their pods are those of the cycle this one repeats: so are its figures.
            cycle.free_gpus, cycle.stranded_gpus = SchedulingCycle.objects.values_list(
                "free_gpus", "stranded_gpus").get(pk=repeated)
        else:
            cycle.free_gpus, cycle.stranded_gpus = shard_fragmentation(shard)
    except Exception:  # noqa: BLE001 - a figure for the charts; the cycle's decisions stand without it
        log.exception("cycle %s: measuring fragmentation failed", cycle.pk)
    phases["fragmentation"] = _ms(t)
    duration = _ms(t0)
    # the engine's parts; its total is the "engine" phase already
    engine_phases = {f"engine.{k}": float(v) for k, v in (result.timings_ms or {}).items() if k != "total"}
    cycle.phase_durations = {k: round(v / 1000.0, 6) for k, v in {**phases, **engine_phases}.items()}
    cycle.duration_seconds = duration / 1000.0
    cycle.finished_at = timezone.now()
    cycle.status = CycleStatus.SUCCEEDED
    cycle.save(update_fields=["phase_durations", "duration_seconds", "finished_at", "status", "free_gpus",
                              "stranded_gpus", "write_back"])
    cycle_step.send(sender=SchedulingCycle, point="finished", cycle=cycle)
    return CycleOutcome(
        cycle_id=cycle.pk, status=cycle.status, binds=len(result.binds), evictions=cycle.evictions,
        pipelined=len(result.pipelined), pending=len(result.pending), duration_ms=duration, phases_ms=phases,
        result=result, snapshot=snapshot,
    )


#: How often the record step is tried when the database aborted it for a lock conflict with the
#: watcher writing the mirror at the same moment (a deadlock or a serialization failure).
PERSIST_ATTEMPTS = 3
_RETRIED_SQLSTATES = ("40P01", "40001")  # deadlock_detected, serialization_failure
T = TypeVar("T")


def _against_the_watcher(cycle: SchedulingCycle, what: str, step: Callable[[], T]) -> T:
    """Run one transaction of the cycle that writes rows the watcher writes too, again when the
    database aborted it for a lock conflict: it is rolled back whole and does its work afresh."""
    for attempt in range(1, PERSIST_ATTEMPTS + 1):
        try:
            return step()
        except OperationalError as exc:
            cause = exc.__cause__
            code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
            if code not in _RETRIED_SQLSTATES or attempt == PERSIST_ATTEMPTS:
                raise
            log.warning("cycle %s: %s lost a lock conflict (%s); trying again", cycle.pk, what, code)
    raise AssertionError("unreachable")


def _persist(cycle: SchedulingCycle, result: m.CycleResult, snapshot: m.ClusterSnapshot,
             index: adapters.SnapshotIndex, repeated: int | None) -> adapters.Recorded:
    """`adapters.persist_result`, which builds its rows afresh on each try."""
    return _against_the_watcher(cycle, "recording", lambda: adapters.persist_result(
        cycle, result, snapshot, index, repeats=repeated))


def _fail(cycle: SchedulingCycle, exc: BaseException, phases: dict[str, float], t0: float) -> None:
    """Record a failed cycle; if the database itself is gone, the next cycle will say so."""
    log.exception("cycle %s failed", cycle.pk)
    try:
        SchedulingCycle.objects.filter(pk=cycle.pk).update(
            status=CycleStatus.FAILED, error=f"{exc.__class__.__name__}: {exc}"[:4000],
            finished_at=timezone.now(), duration_seconds=_ms(t0) / 1000.0,
            phase_durations={k: round(v / 1000.0, 6) for k, v in phases.items()},
        )
    except Exception:  # noqa: BLE001 - the database may be what failed
        log.exception("could not record the failure of cycle %s", cycle.pk)


def apply_decisions(gateway: Any, decisions: list[Decision], shard: SchedulingShard | None = None,
                    claims: dra.Plan | None = None) -> dict[int, ActionResult | Exception]:
    """Carry out binds and evictions through the gateway, each with its idempotency key; evictions
    as the shard says (``eviction_mode``, ``update_pod_eviction_condition``; without ``shard``,
    the shard of each eviction's cycle).

    Returns the outcome per decision id: the gateway's result, or the error that action raised
    (one failed action does not stop the others). An eviction a PodDisruptionBudget refuses is
    such an error: the decision fails and a later cycle decides again.

    With ``claims`` (`dra.prepare`'s plan), the ResourceClaims of the pods to bind are allocated and
    reserved first; a job whose claims cannot all be had is not bound, and the claims of a bind that
    failed are taken back (`dra.allocate`, `dra.release_failed`)."""
    outcomes: dict[int, ActionResult | Exception] = {}
    refused = dra.allocate(gateway, claims, [(d.pod_uid, d.workload_ref, d.node_name) for d in decisions
                                              if d.kind == DecisionKind.BIND])
    if refused:
        for d in decisions:
            if d.kind == DecisionKind.BIND and d.pod_uid in refused:
                outcomes[d.pk] = refused[d.pod_uid]
        decisions = [d for d in decisions if d.pk not in outcomes]
    outcomes.update(_apply(gateway, decisions, shard))
    if claims is not None:
        dra.release_failed(gateway, claims, [d.pod_uid for d in decisions if d.kind == DecisionKind.BIND and (
            isinstance(outcomes.get(d.pk), Exception)
            or getattr(outcomes.get(d.pk), "outcome", None) == ActionOutcome.ALREADY_GONE)])
    return outcomes


def _apply(gateway: Any, decisions: list[Decision],
           shard: SchedulingShard | None) -> dict[int, ActionResult | Exception]:
    binds: list[tuple[Decision, BindAction]] = []
    evicts: list[tuple[Decision, EvictAction]] = []
    versions = _unbound_versions([d.pod_uid for d in decisions if d.kind == DecisionKind.BIND and d.gpu_groups])
    for d in decisions:
        namespace, uid = d.namespace, d.pod_uid
        if d.kind == DecisionKind.BIND:
            portion = d.numbers.get("gpu_portion") if d.numbers else None
            binds.append((d, BindAction(namespace=namespace, name=d.pod_name, uid=uid, node=d.node_name,
                                        gpu_groups=tuple(d.gpu_groups or ()), gpu_portion=portion,
                                        idempotency_key=d.idempotency_key,
                                        resource_version=versions.get(uid, ""))))
        elif d.kind == DecisionKind.EVICT:
            # A cycle whose shard was deleted since: the defaults of a shard.
            by = shard or d.cycle.shard or SchedulingShard()
            evicts.append((d, EvictAction(namespace=namespace, name=d.pod_name, uid=uid, reason=d.reason,
                                          message=d.message, idempotency_key=d.idempotency_key,
                                          mode=by.eviction_mode, disruption_target=by.update_pod_eviction_condition)))
    outcomes: dict[int, ActionResult | Exception] = {}
    if Capability.BULK_APPLY in gateway.capabilities:
        # One result per action, evictions first, each an ActionResult or the error that action raised
        # (the Kubernetes gateway runs them concurrently, as KAI's binder does).
        results = gateway.apply(binds=[a for _, a in binds], evicts=[a for _, a in evicts])
        for (d, _), res in zip([*evicts, *binds], results, strict=True):
            if isinstance(res, Exception):
                log.warning("decision %s (%s) failed: %s", d.pk, d.idempotency_key, res)
            outcomes[d.pk] = res
        return outcomes
    # Evictions first, so that binds onto the resources they free find them free.
    for d, action in [*evicts, *binds]:
        try:
            outcomes[d.pk] = gateway.evict(action) if isinstance(action, EvictAction) else gateway.bind(action)
        except Exception as exc:  # noqa: BLE001 - recorded on the decision; the cycle goes on
            log.warning("decision %s (%s) failed: %s", d.pk, d.idempotency_key, exc)
            outcomes[d.pk] = exc
    return outcomes


def _unbound_versions(uids: list[str]) -> dict[str, str]:
    """The resourceVersion of each of these pods that the mirror holds as pending on no node: the
    state the pod was in at that version, so a write guarded by it lands only on that unbound pod."""
    wanted = [u for u in uids if u]
    if not wanted:
        return {}
    return dict(Pod.objects.filter(uid__in=wanted, state=PodState.PENDING, node__isnull=True)
                .exclude(resource_version="").values_list("uid", "resource_version"))


def mark_applied(cycle: SchedulingCycle, decisions: list[Decision],
                 outcomes: dict[int, ActionResult | Exception]) -> list[Decision]:
    """Mark each decision by what the cluster did: applied, or failed with the reason. Returns the
    applied ones."""
    now = datetime.now(tz=UTC)
    failed: list[Decision] = []
    applied: list[Decision] = []
    for d in decisions:
        out = outcomes.get(d.pk)
        if isinstance(out, Exception):
            d.status, d.message = DecisionStatus.FAILED, f"{d.message} (failed: {out})"[:4000]
            failed.append(d)
        elif out is not None and out.outcome == ActionOutcome.ALREADY_GONE and d.kind == DecisionKind.BIND:
            d.status, d.message = DecisionStatus.FAILED, f"{d.message} (not bound: {out.message})"[:4000]
            failed.append(d)
        else:
            applied.append(d)
    with transaction.atomic():
        if applied:
            Decision.objects.filter(pk__in=[d.pk for d in applied], status=DecisionStatus.PLANNED).update(
                status=DecisionStatus.APPLIED, applied_at=now)
        if failed:
            Decision.objects.bulk_update(failed, ["status", "message"])
        # Pipelining needs nothing from the cluster: it is done once recorded.
        Decision.objects.filter(cycle=cycle, kind=DecisionKind.PIPELINE, status=DecisionStatus.PLANNED).update(
            status=DecisionStatus.APPLIED, applied_at=now)
    for d in applied:
        d.status, d.applied_at = DecisionStatus.APPLIED, now
    return applied


# ----------------------------------------------------------------------------------- replay


def dump_snapshot(shard: SchedulingShard | int | str | None = None) -> dict[str, Any]:
    """The snapshot and config the shard's next cycle would decide on, as JSON-able data."""
    shard = resolve_shard(shard)
    snapshot, config, _ = next_snapshot(shard)
    return {"kind": "kaiweb.snapshot/v1", "shard": f"{shard.cluster.name}/{shard.name}",
            "snapshot": snapshot.to_dict(), "config": config.to_dict()}


def next_snapshot(shard: SchedulingShard | None) -> tuple[m.ClusterSnapshot, m.CycleConfig, adapters.SnapshotIndex]:
    """The snapshot and config the shard's next cycle would decide on, as the cycle builds them: its
    cluster's clock, the time-based usage input, ``adapters.build_snapshot`` (made anew: nothing is
    remembered) and DRA's devices and claims (`dra.prepare`). Without a shard, every queue and node with the engine's default config."""
    from kaiweb.usage.accounting import usage_for_engine

    if shard is None:
        snapshot, index = adapters.build_snapshot(None, now=clock.timestamp(), reuse=False)
        return snapshot, m.CycleConfig(), index
    gateway = get_gateway(shard.cluster)
    now = gateway.now() if Capability.OWN_CLOCK in gateway.capabilities else clock.timestamp()
    snapshot, index = adapters.build_snapshot(shard, now=now, usage=usage_for_engine(shard), reuse=False)
    snapshot, claims = dra.prepare(snapshot, index, gateway)
    if claims is not None:
        index.claim_problems = dict(claims.problems)
    return snapshot, cycle_config(shard), index


def replay_snapshot(data: dict[str, Any]) -> tuple[m.ClusterSnapshot, m.CycleConfig, m.CycleResult]:
    """Run the engine on a dumped snapshot (nothing is recorded or applied)."""
    if not isinstance(data, dict) or "snapshot" not in data:
        raise ValueError("snapshot file: expected an object with 'snapshot' (and 'config'), as dump_snapshot writes")
    snapshot = m.ClusterSnapshot.from_dict(data["snapshot"])
    config = m.CycleConfig.from_dict(data.get("config") or {})
    return snapshot, config, engine_run_cycle(snapshot, config)
