"""The mutable state of one session, per object: nodes (numpy rows ``[cpu millicores, memory bytes,
whole GPUs, pods]``), shared-GPU groups, tasks, jobs and their pod sets and subgroups.

Only ``Session.set_task`` changes a task's status (it keeps every counter here in step), and only
through a ``Statement`` that can undo it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scheduler_core import model as m
from scheduler_core.model import Key

CPU, MEM, GPU, PODS = 0, 1, 2, 3

EPS = 1e-9

_VEC_CACHE: dict[tuple[float, float, float], np.ndarray] = {}


@dataclass(slots=True)
class GpuGroup:
    """One physical GPU shared by fractional tasks on a node (KAI's GPU group)."""

    name: str
    mem_active: float = 0.0  # MiB held by tasks that are not releasing (incl. pipelined)
    mem_releasing: float = 0.0  # MiB held by releasing tasks
    n_active: int = 0  # allocated/running/stuck tasks
    n_pipelined: int = 0
    n_releasing: int = 0

    def contribution(self) -> tuple[int, int]:
        """(idle delta, releasing delta) of whole GPUs this group causes on its node."""
        if self.n_active > 0:
            return (-1, 0)
        if self.n_releasing > 0:
            return (-1, 0) if self.n_pipelined > 0 else (-1, 1)
        if self.n_pipelined > 0:
            return (0, -1)
        return (0, 0)

    @property
    def empty(self) -> bool:
        return self.n_active + self.n_pipelined + self.n_releasing == 0

    @property
    def fully_releasing(self) -> bool:
        return self.n_releasing > 0 and self.n_active == 0 and self.n_pipelined == 0

@dataclass(slots=True)
class NodeState:
    """Non-vector state of a node: shared GPU groups and MIG instances."""

    index: int
    spec: m.NodeSpec
    groups: dict[str, GpuGroup] = field(default_factory=dict)
    mig_idle: dict[str, float] = field(default_factory=dict)
    mig_releasing: dict[str, float] = field(default_factory=dict)
    tasks: set[TaskState] = field(default_factory=set)  # the tasks charged here (no order is read)
    ext_idle: dict[str, float] = field(default_factory=dict)  # extended resources, as MIG instances
    ext_releasing: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

class PodSet:
    """A leaf of a job's gang tree with its live counters."""

    __slots__ = ("name", "min_available", "topology", "tasks", "active_allocated", "allocated", "active_used",
                 "parent")

    def __init__(self, name: str, min_available: int, topology: m.TopologyConstraint | None) -> None:
        self.name = name
        self.min_available = min_available
        self.topology = topology
        self.tasks: list[TaskState] = []
        self.active_allocated = 0
        self.allocated = 0
        self.active_used = 0
        self.parent: SubGroupSet | None = None

    @property
    def satisfied(self) -> bool:
        return self.active_allocated >= self.min_available

class SubGroupSet:
    """A node of a job's gang tree: ``need`` of its members must be satisfied."""

    __slots__ = ("name", "min_subgroups", "topology", "members", "parent")

    def __init__(self, name: str, min_subgroups: int | None, topology: m.TopologyConstraint | None) -> None:
        self.name = name
        self.min_subgroups = min_subgroups
        self.topology = topology
        self.members: list[PodSet | SubGroupSet] = []
        self.parent: SubGroupSet | None = None

    @property
    def need(self) -> int:
        return len(self.members) if self.min_subgroups is None else min(self.min_subgroups, len(self.members))

    @property
    def satisfied(self) -> bool:
        return sum(1 for x in self.members if x.satisfied) >= self.need

def request_info(r: m.TaskRequest) -> Key:
    """What a task derives from its request alone: (node charge vector, queue charge vector,
    request part of the placement shape, shared-GPU flag, whole GPUs an eviction frees). Pods of
    one snapshot often share a request object, so the session computes this once per object."""
    whole = float(r.gpus) if r.gpu_kind == m.GPU_WHOLE else 0.0
    vkey = (r.cpu_millis, r.memory_bytes, whole)
    vec = _VEC_CACHE.get(vkey)
    if vec is None:
        # shared by equal requests; never changed in place (read-only)
        vec = np.array([r.cpu_millis, r.memory_bytes, whole, 1.0])
        vec.flags.writeable = False
        if len(_VEC_CACHE) < 4096:
            _VEC_CACHE[vkey] = vec
    gpu_units = whole
    if r.gpu_kind == m.GPU_FRACTION:
        gpu_units = r.gpu_fraction * r.gpu_devices
    elif r.gpu_kind == m.GPU_MIG:
        gpu_units = r.mig_gpu_units
    qvec = (float(r.cpu_millis), float(r.memory_bytes), gpu_units)
    shape = (r.cpu_millis, r.memory_bytes, r.gpu_kind, r.gpus, r.gpu_fraction, r.gpu_memory_mib,
             r.gpu_devices, tuple(sorted(r.mig.items())) if r.mig else (),
             tuple(sorted(r.extended.items())) if r.extended else ())
    shared = r.gpu_kind in (m.GPU_FRACTION, m.GPU_MEMORY)  # a fraction / GPU-memory pod
    # whole GPUs an eviction of this pod gives back to its node (a shared device counts one)
    freed = whole + (1.0 if shared else 0.0)
    return vec, qvec, shape, shared, freed

class TaskState:
    """A task's live state. ``vec`` is its node charge [cpu, mem, whole GPUs, pods];
    ``qvec`` its queue charge [cpu, mem, GPU units] (set on placement for shared GPUs)."""

    __slots__ = ("index", "job", "spec", "name", "status", "node", "groups", "pod_set", "vec", "qvec",
                 "req_qvec", "base_qvec", "portion", "mem_per_device", "order_key", "orig_status",
                 "orig_groups", "was_cleared", "shape_id", "q_counted", "pre_evict", "freed_gpus", "shared",
                 "dynamic", "prefers", "outcome")

    def __init__(self, index: int, job: JobState, spec: m.TaskSpec, shape_ids: dict[Key, int],
                 info: Key | None = None) -> None:
        """``shape_ids``: the session's table of placement shape ids (a small integer per distinct
        shape, only ever a cache key), to which a new shape is added."""
        # What follows down to ``reset`` is derived from the spec alone (kept when a job's state
        # is reused in a later cycle, ``JobState.reset``).
        self.job = job
        self.spec = spec
        self.name = spec.name
        self.pod_set: PodSet | None = None
        if info is None:
            info = request_info(spec.request)
        self.vec, self.base_qvec, req_shape, self.shared, self.freed_gpus = info
        # task order: task-order priority (present first, higher first), then name
        tp = spec.task_order_priority
        self.order_key = (0 if tp is not None else 1, -(tp or 0), spec.name)
        self.orig_status = spec.state
        self.orig_groups: tuple[str, ...] = tuple(spec.gpu_groups)
        # what placement depends on: the request and the node constraints
        shape = req_shape + (spec.node_affinity,
                                  tuple(sorted(spec.node_selector.items())) if spec.node_selector else ())
        # placement constraints beyond the node selector (all empty for most pods)
        self.dynamic = False  # host ports or pod (anti-)affinity: checked at every placement
        self.prefers = False  # preferred node or pod affinity: adds to the node score
        if (spec.tolerations or spec.required_node_affinity is not None or spec.preferred_node_affinity
                or spec.host_ports or spec.pod_affinity or spec.pod_anti_affinity or spec.preferred_pod_affinity
                or spec.preferred_pod_anti_affinity):
            shape = shape + (spec.tolerations, spec.required_node_affinity, spec.preferred_node_affinity,
                                       spec.host_ports, spec.pod_affinity, spec.pod_anti_affinity,
                                       spec.preferred_pod_affinity, spec.preferred_pod_anti_affinity,
                                       job.spec.namespace,
                                       tuple(sorted(spec.labels.items())) if spec.pod_affinity else ())
            self.dynamic = bool(spec.host_ports or spec.pod_affinity or spec.pod_anti_affinity)
            self.prefers = bool(spec.preferred_node_affinity or spec.preferred_pod_affinity
                                or spec.preferred_pod_anti_affinity)
        self.shape_id = shape_ids.setdefault(shape, len(shape_ids))
        # the last ``TaskOutcome`` reported for it (close_session reuses it while it is equal)
        self.outcome: m.TaskOutcome | None = None
        self.reset(index)

    def reset(self, index: int) -> None:
        """The state a session starts from: the spec's status, no node charged yet."""
        self.index = index
        self.status = self.orig_status
        self.node: int | None = None
        self.groups = self.orig_groups
        self.portion = 0.0  # accepted GPU portion per device (shared tasks)
        self.mem_per_device = 0.0
        # queue charge vectors are tuples, replaced (never changed in place) when they change
        self.qvec: tuple[float, float, float] = self.base_qvec
        self.req_qvec: tuple[float, float, float] = self.base_qvec  # request side (GPU memory via smallest node)
        self.was_cleared = False
        self.q_counted = False  # whether the queue accounting currently holds this task
        self.pre_evict: str | None = None  # status before its latest eviction (for un-evict)

    @property
    def request(self) -> m.TaskRequest:
        return self.spec.request


    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Task {self.name} {self.status} node={self.node}>"

class JobState:
    """A job's live state: tasks, gang tree, flags."""

    __slots__ = ("index", "spec", "uid", "queue", "tasks", "root", "pod_sets", "last_start", "stale_since",
                 "valid", "priority", "preemptible", "n_pending", "victim_key", "has_topology", "elastic",
                 "version", "ready_at", "ready_value", "batch_at", "batch", "key_at", "key", "mass",
                 "built_at", "one_shape")

    def __init__(self, index: int, spec: m.JobSpec) -> None:
        # derived from the spec alone (the session builds tasks and gang tree once per spec)
        self.spec = spec
        self.uid = spec.uid
        self.queue = spec.queue
        self.tasks: list[TaskState] = []
        self.pod_sets: dict[str, PodSet] = {}
        self.root = SubGroupSet("", None, None)
        self.priority = spec.priority
        self.preemptible = spec.preemptible
        self.victim_key: Key | None = None  # static part of the victim order (actions.victims.VictimJob)
        self.has_topology = False  # some member of the gang tree has a topology constraint
        self.elastic: bool | None = None  # cached by is_elastic()
        # ordering.tasks_to_allocate's last batch (valid at ``batch_at``; kept through a reset, so an
        # equal batch in a later cycle is the same list)
        self.batch: list[TaskState] = _NO_TASKS
        self.key: Key = ()  # order_key's last value (valid at ``key_at``; kept through a reset likewise)
        # the sum of its pods' largest charges, a bound on what it adds to an account; infinite
        # unless every pod charges whole units only (no shared GPU, MIG instance or extended
        # resource), whose charges add up exactly in any order (set by the session with its tasks)
        self.mass = math.inf
        # a job of one pod: that pod's placement shape id (set by the session with the ids), else -1
        self.one_shape = -1
        self.reset(index)

    def reset(self, index: int) -> None:
        """The state a session starts from; its pod sets' counters are reset with it (its tasks
        by the session, ``TaskState.reset``). So a ``JobState`` kept from an earlier cycle
        (``Session``'s job reuse) is the one a fresh build gives: the slots set in ``__init__``
        depend on the spec only, or are caches valid at a version (``batch``, ``key``)."""
        self.index = index
        self.last_start = self.spec.last_start
        self.stale_since = self.spec.stale_since
        self.valid = True
        self.n_pending = 0  # tasks in Pending, kept by Session._charge
        # bumped on every change of its state: one of its tasks (``Session._charge``), a dropped
        # node hint, its staleness (caches of derived state key on it)
        self.version = 0
        # derived state kept until ``version`` moves (slots, not tuples: nothing new to allocate)
        self.ready_at, self.ready_value = -1, False  # ready() and the version it was computed at
        self.batch_at = -1  # the version ``batch`` (ordering.tasks_to_allocate) was computed at
        self.key_at = -1  # the version ``key`` (order_key) was computed at
        # the version right after the session charged it, while its state is the one the
        # snapshot gives (-1: not charged as built); ``Session.hand_over`` compares it
        self.built_at = -1
        for ps in self.pod_sets.values():
            ps.active_allocated = ps.allocated = ps.active_used = 0

    # ---- gang state -------------------------------------------------------------------------
    def pending_tasks(self) -> list[TaskState]:
        return [t for t in self.tasks if t.status == m.PENDING]

    def has_pending(self) -> bool:
        return self.n_pending > 0

    def active_allocated(self) -> int:
        if len(self.pod_sets) == 1:
            for ps in self.pod_sets.values():
                return ps.active_allocated
        return sum(ps.active_allocated for ps in self.pod_sets.values())

    def allocated_count(self) -> int:
        if len(self.pod_sets) == 1:
            for ps in self.pod_sets.values():
                return ps.allocated
        return sum(ps.allocated for ps in self.pod_sets.values())

    def gang_satisfied(self) -> bool:
        return self.root.satisfied

    def elastic_state(self) -> int:
        """0 = some pod set below its minimum, 1 = exactly at minimum everywhere, 2 = above."""
        above = False
        for ps in self.pod_sets.values():
            if ps.active_allocated < ps.min_available:
                return 0
            if ps.active_allocated > ps.min_available:
                above = True
        return 2 if above else 1

    def is_elastic(self) -> bool:
        """Some pod set has more pods than its minimum (static for the cycle)."""
        if self.elastic is None:
            self.elastic = any(len(ps.tasks) > ps.min_available for ps in self.pod_sets.values())
        return self.elastic

    def ready(self) -> bool:
        """KAI readiness: enough alive (non-gated) pods for the root's requirement (§1.3). It
        reads only task states, so it is kept until the job's ``version`` moves."""
        if self.ready_at != self.version:
            self.ready_value = self._readiness()
            self.ready_at = self.version
        return self.ready_value

    def _readiness(self) -> bool:
        alive = ALIVE_STATES
        members = self.root.members
        if len(members) == 1 and isinstance(members[0], PodSet):
            ps = members[0]
            if len(ps.tasks) == 1:  # a job of one pod
                return (1 if ps.tasks[0].status in alive else 0) >= ps.min_available
            return sum(1 for t in ps.tasks if t.status in alive) >= ps.min_available

        def ok(x: PodSet | SubGroupSet) -> bool:
            if isinstance(x, PodSet):
                return sum(1 for t in x.tasks if t.status in alive) >= x.min_available
            return sum(1 for y in x.members if ok(y)) >= x.need

        return ok(self.root)

    def order_key(self) -> Key:
        """JobOrder inside a leaf (§2.4): priority, elastic state, age, build order, name. Only the
        elastic state moves (with the pod-set counters), so it is kept until ``version`` moves."""
        if self.key_at != self.version:
            s = self.spec
            key = (-self.priority, self.elastic_state(), s.creation, s.build_order, self.uid)
            if key != self.key:  # an equal key from an earlier cycle stays (nothing new to keep)
                self.key = key
            self.key_at = self.version
        return self.key

    def __repr__(self) -> str:  # pragma: no cover
        return f"<Job {self.uid}>"

_NO_TASKS: list[TaskState] = []  # an empty batch (never changed: callers only read batches)

ACTIVE_NODE_STATES = frozenset({m.RUNNING, m.ALLOCATED, m.BINDING, m.BOUND, m.STUCK_IN_RELEASING})

ALIVE_STATES = frozenset({m.PENDING}) | m.ACTIVE_ALLOCATED_STATES
