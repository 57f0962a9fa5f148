"""The simulated cluster: the embedded default backend, used by `make run`, demos, tests and B5.

The cluster lives in the database (Node, Workload and Pod rows). Time is a simulated clock
kept in the cluster's settings (`settings["simulation"]`): each `advance()` (one per cycle)
moves it forward by `seconds_per_cycle` (or to the wall clock with `clock: "real"`), completes
the pods whose duration has elapsed (freeing their resources) and submits the jobs the seeded
workload generator produces for that tick. Binding makes a pod run at once; evicting it
recreates it as a new pending pod (a new uid, like a controller recreating an evicted pod).
The simulation has no PodDisruptionBudgets and no pod conditions: an eviction's mode (``delete``
as KAI, or ``evict`` through the Eviction API, `EvictAction.mode`) only names what was done, and
both always take effect.

Actions are idempotent: binding a pod already bound to that node, or evicting a pod incarnation
that no longer exists, is reported as such and changes nothing, so a retried cycle never binds
or evicts twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count

from kaiweb.cluster.backends.types import (
    EVICT_BY_DELETE,
    ActionOutcome,
    ActionResult,
    BindAction,
    EvictAction,
    Listing,
    ObservedNode,
    ObservedPod,
    ResourceAmounts,
)
from kaiweb.cluster.errors import Capability, ClusterRejected
from kaiweb.cluster.models import Cluster, Node
from kaiweb.cluster.workload_generator import BURST_LABEL, WorkloadGenerator
from kaiweb.queues.models import PriorityClass, Queue
from kaiweb.workloads.choices import ALLOCATED_POD_STATES, PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from scheduler_core.sim.traces import Job

DEFAULT_SIMULATION: dict[str, Any] = {
    "clock": "simulated",  # or "real": the wall clock
    "seconds_per_cycle": 30,
    "now": None,  # epoch seconds; starts at the wall clock
    "tick": 0,
    "seed": 7,
    "generate": False,  # submit jobs from the workload generator on each advance
    "max_pending_per_queue": 6,  # the generator stops feeding a queue with this many pending jobs
    "namespace": "demo",
}

# The database's states are the engine's; the gateway reports a pod being bound as bound, as a
# cluster's API server would.
_TO_OBSERVED = {PodState.BINDING: PodState.BOUND}


@dataclass(frozen=True, slots=True)
class AdvanceReport:
    """What one step of the simulated clock did."""

    now: float
    tick: int
    completed_pods: int
    completed_workloads: int
    submitted_workloads: int


def simulation_settings(cluster: Cluster) -> dict[str, Any]:
    sim = dict(DEFAULT_SIMULATION)
    sim.update((cluster.settings or {}).get("simulation") or {})
    return sim


def workload_state(pods: Sequence[Pod], min_member: int | None) -> str:
    """A workload's state from its pods: completed when every pod succeeded, running when the
    gang minimum runs, partially running below it, pending when nothing runs."""
    if pods and all(p.state == PodState.SUCCEEDED for p in pods):
        return WorkloadState.COMPLETED
    active = [p for p in pods if p.state not in (PodState.SUCCEEDED, PodState.FAILED)]
    running = sum(1 for p in active if p.state in ALLOCATED_POD_STATES)
    if running == 0:
        return WorkloadState.PENDING
    needed = 1 if min_member is None else min_member
    return WorkloadState.RUNNING if running >= min(needed, len(active)) else WorkloadState.PARTIAL


class SimulatedGateway:
    """The `ClusterGateway` of a cluster that lives in the database."""

    backend = "simulated"
    capabilities = frozenset({Capability.OWN_CLOCK, Capability.BULK_APPLY, Capability.RECONCILES})

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster or Cluster.objects.filter(backend="simulated").order_by("pk").first()
        if self.cluster is None:
            raise LookupError("no simulated cluster: create one (manage.py seed_demo) or set KAI_CLUSTER_BACKEND")

    # ------------------------------------------------------------------ clock

    @property
    def on_wall_clock(self) -> bool:
        """Whether the cluster's clock is the wall clock: a real one, or a simulated one not started yet."""
        sim = simulation_settings(self.cluster)
        return sim["clock"] == "real" or sim["now"] is None

    def now(self) -> float:
        """The cluster's clock in epoch seconds."""
        if self.on_wall_clock:
            return datetime.now(tz=UTC).timestamp()
        return float(simulation_settings(self.cluster)["now"])

    def now_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.now(), tz=UTC)

    def advance(self, seconds: float | None = None) -> AdvanceReport:
        """One step of the cluster: move the clock, complete finished pods, submit new jobs."""
        with transaction.atomic():
            cluster = Cluster.objects.select_for_update().get(pk=self.cluster.pk)
            sim = simulation_settings(cluster)
            if sim["clock"] == "real":
                now = datetime.now(tz=UTC).timestamp()
            else:
                start = float(sim["now"]) if sim["now"] is not None else datetime.now(tz=UTC).timestamp()
                now = start + float(seconds if seconds is not None else sim["seconds_per_cycle"])
            tick = int(sim["tick"])
            completed_pods, completed_workloads = self._complete(now)
            submitted = self._submit(sim, tick, now) if sim["generate"] else 0
            sim.update(now=now, tick=tick + 1)
            cluster.settings = dict(cluster.settings or {}, simulation=sim)
            cluster.save(update_fields=["settings", "updated"])
            self.cluster = cluster
        return AdvanceReport(now, tick, completed_pods, completed_workloads, submitted)

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Change simulation settings (clock, seconds_per_cycle, seed, generate, …)."""
        unknown = sorted(set(changes) - set(DEFAULT_SIMULATION))
        if unknown:
            raise ValueError(f"simulation: unknown setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULT_SIMULATION)}")
        if "clock" in changes and changes["clock"] not in ("simulated", "real"):
            raise ValueError(f"simulation.clock: must be 'simulated' or 'real', not {changes['clock']!r}")
        if "seconds_per_cycle" in changes and not float(changes["seconds_per_cycle"]) > 0:
            raise ValueError("simulation.seconds_per_cycle: must be a positive number of seconds")
        with transaction.atomic():
            cluster = Cluster.objects.select_for_update().get(pk=self.cluster.pk)
            sim = simulation_settings(cluster)
            sim.update(changes)
            cluster.settings = dict(cluster.settings or {}, simulation=sim)
            cluster.save(update_fields=["settings", "updated"])
            self.cluster = cluster
        return sim

    def _complete(self, now: float) -> tuple[int, int]:
        # Plain rows: every running pod is looked at each step, and only the finished become rows to write.
        running = (Pod.objects.filter(workload__cluster=self.cluster, state__in=ALLOCATED_POD_STATES,
                                      duration_seconds__isnull=False, started_at__isnull=False)
                   .values_list("id", "started_at", "duration_seconds", "workload_id"))
        done = []
        for pk, started_at, duration, workload_id in running:
            end = started_at + timedelta(seconds=duration)
            if end.timestamp() <= now:
                done.append(Pod(pk=pk, workload_id=workload_id, state=PodState.SUCCEEDED, finished_at=end))
        if not done:
            return 0, 0
        Pod.objects.bulk_update(done, ["state", "finished_at"], batch_size=500)
        changed = self._refresh_workloads({p.workload_id for p in done}, now)
        return len(done), changed

    def _submit(self, sim: dict[str, Any], tick: int, now: float) -> int:
        generator = WorkloadGenerator(seed=int(sim["seed"]))
        jobs = generator.jobs_for_tick(tick)
        if not jobs:
            return 0
        queues = {q.name: q for q in Queue.objects.filter(name__in={j.queue for j in jobs}, children__isnull=True)}
        pending = dict(
            Workload.objects.filter(cluster=self.cluster, state=WorkloadState.PENDING)
            .values_list("queue__name").annotate(n=Count("id")).values_list("queue__name", "n")
        )
        cap = int(sim["max_pending_per_queue"])
        accepted: list[Job] = []
        for job in jobs:
            if job.queue not in queues:
                continue
            if tick > 0 and pending.get(job.queue, 0) >= cap and BURST_LABEL not in job.labels:
                continue
            pending[job.queue] = pending.get(job.queue, 0) + 1
            accepted.append(job)
        return len(self.submit(accepted, namespace=str(sim["namespace"]), at=now, queues=queues))

    def submit(
        self, jobs: Iterable[Job], namespace: str = "demo", at: float | None = None,
        queues: dict[str, Queue] | None = None,
    ) -> list[Workload]:
        """Create the workloads and pods of `jobs` (skipping names that exist); bulk, a few queries."""
        jobs = list(jobs)
        if not jobs:
            return []
        submitted_at = datetime.fromtimestamp(at if at is not None else self.now(), tz=UTC)
        if queues is None:
            queues = {q.name: q for q in Queue.objects.filter(name__in={j.queue for j in jobs})}
        missing = sorted({j.queue for j in jobs} - set(queues))
        if missing:
            raise ValueError(f"queue: unknown queue(s) {', '.join(missing)}")
        classes = {pc.name: pc for pc in PriorityClass.objects.all()}
        def ns(j: Job) -> str:
            return j.namespace or namespace

        spaces = {ns(j) for j in jobs}
        existing = set(Workload.objects.filter(cluster=self.cluster, namespace__in=spaces,
                                               name__in=[j.job_id for j in jobs]).values_list("namespace", "name"))
        workloads = []
        for j in jobs:
            if (ns(j), j.job_id) in existing:
                continue
            existing.add((ns(j), j.job_id))
            workloads.append(Workload(
                cluster=self.cluster, namespace=ns(j), name=j.job_id, uid=uuid.uuid4().hex,
                queue=queues[j.queue], priority_class=classes.get(j.priority_class),
                min_member=j.num_pods if j.min_member is None else j.min_member,
                labels={"kaiweb.io/kind": j.kind, **j.labels}, state=WorkloadState.PENDING, submitted_at=submitted_at,
            ))
        with transaction.atomic():
            Workload.objects.bulk_create(workloads, batch_size=500)
            if workloads and workloads[0].pk is None:
                ids = {(w_ns, w_name): pk for w_ns, w_name, pk in Workload.objects.filter(
                    cluster=self.cluster, namespace__in=spaces, name__in=[w.name for w in workloads],
                ).values_list("namespace", "name", "pk")}
                for w in workloads:
                    w.pk = ids[(w.namespace, w.name)]
            by_name = {j.job_id: j for j in jobs}
            pods = []
            for w in workloads:
                j = by_name[w.name]
                fractional = 0 < j.gpu_per_pod < 1
                for i in range(j.num_pods):
                    pods.append(Pod(
                        workload_id=w.pk, name=f"{j.job_id}-{i}", uid=uuid.uuid4().hex,
                        gpu=0 if fractional else j.gpu_per_pod, gpu_fraction=j.gpu_per_pod if fractional else None,
                        cpu=j.cpu_millis_per_pod, memory=j.memory_bytes_per_pod,
                        state=PodState.PENDING, duration_seconds=j.duration,
                    ))
            Pod.objects.bulk_create(pods, batch_size=1000)
        return workloads

    def _refresh_workloads(self, workload_ids: Iterable[int], now: float) -> int:
        """Recompute the state of the given workloads from their pods; returns how many completed."""
        ids = list(workload_ids)
        if not ids:
            return 0
        workloads = list(Workload.objects.filter(pk__in=ids).prefetch_related("pods"))
        at = datetime.fromtimestamp(now, tz=UTC)
        changed, completed = [], 0
        for w in workloads:
            pods = list(w.pods.all())
            new = workload_state(pods, w.min_member)
            if new == w.state:
                continue
            if w.state == WorkloadState.PENDING and new in (WorkloadState.RUNNING, WorkloadState.PARTIAL):
                w.last_start_at = at
            if new == WorkloadState.COMPLETED:
                w.finished_at = max((p.finished_at for p in pods if p.finished_at), default=at)
                completed += 1
            w.state = new
            changed.append(w)
        Workload.objects.bulk_update(changed, ["state", "last_start_at", "finished_at"], batch_size=500)
        return completed

    # ------------------------------------------------------------------ the gateway protocol

    def ping(self) -> str:
        nodes = Node.objects.filter(cluster_id=self.cluster.pk, ready=True).count()
        return f"simulated cluster {self.cluster.name}: {nodes} ready node(s)"

    def list_nodes(self) -> Listing[ObservedNode]:
        items = []
        for n in Node.objects.filter(cluster=self.cluster).order_by("name"):
            items.append(ObservedNode(
                name=n.name,
                allocatable=ResourceAmounts(cpu_millis=int(n.allocatable_cpu), memory_bytes=int(n.allocatable_memory),
                                            gpus=n.allocatable_gpu, pods=n.allocatable_pods),
                gpu_product=n.gpu_product or None, gpu_memory_mib=n.gpu_memory_mib or None,
                mig_enabled=n.mig_enabled, mig_strategy=None, labels=dict(n.labels or {}), ready=n.ready,
                unschedulable=n.unschedulable, taints=(), resource_version="", uid=str(n.pk),
            ))
        return Listing(tuple(items))

    def list_pods(self) -> Listing[ObservedPod]:
        items = []
        pods = (Pod.objects.filter(workload__cluster=self.cluster)
                .exclude(state__in=(PodState.SUCCEEDED, PodState.FAILED))
                .select_related("workload__queue", "workload__priority_class", "node").order_by("name"))
        for p in pods:
            w = p.workload
            items.append(ObservedPod(
                namespace=w.namespace, name=p.name, uid=p.uid, node=p.node.name if p.node else None,
                phase="Running" if p.state in ALLOCATED_POD_STATES else "Pending",
                state=_TO_OBSERVED.get(p.state, p.state), queue=w.queue.name, pod_group=w.name,
                sub_group=p.subgroup or None, priority_class=w.priority_class.name if w.priority_class else None,
                priority=w.priority_class.value if w.priority_class else None,
                requests=ResourceAmounts(cpu_millis=int(p.cpu), memory_bytes=int(p.memory), gpus=p.gpu),
                gpu_fraction=p.gpu_fraction, gpu_memory_mib=p.gpu_memory_mib, gpu_fraction_num_devices=p.gpu_devices,
                gpu_groups=tuple(p.gpu_groups or ()), labels={}, node_selector={}, created_at=w.submitted_at,
                deleted_at=None, resource_version="",
            ))
        return Listing(tuple(items))

    def list_pod_groups(self) -> Listing[Any]:
        return Listing(())

    def list_queues(self) -> Listing[Any]:
        # The database is the source of truth for queues here: nothing to sync.
        return Listing(())

    def list_priority_classes(self) -> Listing[Any]:
        return Listing(())

    def upsert_queue(self, *args: Any, **kwargs: Any) -> None:
        """Queues live in the database already."""

    def delete_queue(self, *args: Any, **kwargs: Any) -> None:
        """Queues live in the database already."""

    def write_queue_status(self, *args: Any, **kwargs: Any) -> None:
        """Queue status is recorded by the cycle itself (QueueStatus rows)."""

    def write_shard_conditions(self, *args: Any, **kwargs: Any) -> bool:
        """A simulated cluster has no SchedulingShard objects: the shard's page says it all."""
        return False

    def report_pending(self, *args: Any, **kwargs: Any) -> None:
        """Why-pending is recorded by the cycle itself (PendingReason rows)."""

    def report_pending_many(self, reports: Sequence[Any]) -> list[Any]:
        """Why-pending is recorded by the cycle itself (PendingReason rows)."""
        return [None] * len(reports)

    def bind(self, action: BindAction) -> ActionResult:
        return self.apply(binds=[action])[0]

    def evict(self, action: EvictAction) -> ActionResult:
        return self.apply(evicts=[action])[0]

    def _pods_for(self, refs: Sequence[BindAction | EvictAction]) -> dict[str, Pod]:
        """The pods the actions name, by uid (two workloads may have pods of the same name)."""
        if not refs:
            return {}
        pods = Pod.objects.filter(uid__in={r.uid for r in refs if r.uid}, workload__cluster=self.cluster)
        return {p.uid: p for p in pods.select_related("workload")}

    def apply(self, binds: Sequence[BindAction] = (), evicts: Sequence[EvictAction] = ()) -> list[ActionResult]:
        """Carry out binds and evictions in bulk (a few queries); one result per action, in order.

        Evictions run first so that a bind onto the resources they free is valid.
        """
        now = self.now()
        at = datetime.fromtimestamp(now, tz=UTC)
        nodes = {n.name: n for n in Node.objects.filter(cluster=self.cluster, name__in={b.node for b in binds})}
        pods = self._pods_for([*evicts, *binds])
        results: dict[int, ActionResult] = {}
        changed: dict[int, Pod] = {}
        touched: set[int] = set()
        evicted_workloads: set[int] = set()
        for i, ev in enumerate(evicts):
            pod = pods.get(ev.uid)
            if pod is None or pod.state not in (*ALLOCATED_POD_STATES, PodState.RELEASING):
                results[i] = ActionResult(ActionOutcome.ALREADY_GONE, f"pod {ev.namespace}/{ev.name} "
                                          "(that incarnation) is no longer running")
                continue
            # The controller recreates an evicted pod: a new pending incarnation with a new uid.
            pod.state, pod.node, pod.gpu_groups, pod.started_at = PodState.PENDING, None, [], None
            pod.uid = uuid.uuid4().hex
            changed[pod.pk] = pod
            touched.add(pod.workload_id)
            evicted_workloads.add(pod.workload_id)
            done = "deleted" if ev.mode == EVICT_BY_DELETE else "evicted"
            results[i] = ActionResult(ActionOutcome.EVICTED, f"pod {ev.namespace}/{ev.name} {done} and recreated")
        offset = len(evicts)
        for j, b in enumerate(binds):
            pod = pods.get(b.uid)
            node = nodes.get(b.node)
            if pod is None:
                results[offset + j] = ActionResult(ActionOutcome.ALREADY_GONE,
                                                   f"pod {b.namespace}/{b.name} (that incarnation) no longer exists")
                continue
            if node is None:
                raise ClusterRejected(f"bind pod {b.namespace}/{b.name}",
                                      f"node {b.node!r} is not a node of cluster {self.cluster.name}", status=404)
            if pod.state in ALLOCATED_POD_STATES and pod.node_id == node.pk:
                results[offset + j] = ActionResult(ActionOutcome.ALREADY_BOUND, f"{b.name} already on {b.node}")
                continue
            if pod.state in ALLOCATED_POD_STATES:
                raise ClusterRejected(f"bind pod {b.namespace}/{b.name} to {b.node}",
                                      "the pod is already bound to another node", status=409, reason="Conflict")
            pod.state, pod.node, pod.started_at = PodState.RUNNING, node, at
            pod.gpu_groups = list(b.gpu_groups)
            changed[pod.pk] = pod
            touched.add(pod.workload_id)
            results[offset + j] = ActionResult(ActionOutcome.BOUND, f"{b.name} bound to {b.node}")
        with transaction.atomic():
            Pod.objects.bulk_update(list(changed.values()), ["state", "node", "gpu_groups", "started_at", "uid"],
                                    batch_size=500)
            if evicted_workloads:
                Workload.objects.filter(pk__in=evicted_workloads).update(last_eviction_at=at)
            self._refresh_workloads(touched, now)
        return [results[i] for i in range(len(evicts) + len(binds))]

    # ------------------------------------------------------------------ reconciliation

    def is_bound(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Whether that pod incarnation runs on that node (a bind took effect)."""
        q = Pod.objects.filter(workload__cluster=self.cluster, workload__namespace=namespace, name=name,
                               state__in=ALLOCATED_POD_STATES, node__name=node)
        return q.filter(uid=uid).exists() if uid else q.exists()

    def is_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether that pod incarnation no longer runs (an eviction took effect)."""
        q = Pod.objects.filter(workload__cluster=self.cluster, workload__namespace=namespace, name=name,
                               state__in=ALLOCATED_POD_STATES)
        return not (q.filter(uid=uid).exists() if uid else q.exists())
