"""One scheduling session: mutable node, job and queue state built from a frozen snapshot.

Invariant (KAI-SEMANTICS §8.24): every task status change goes through ``Session.set_task``, which
removes the task's old charge and adds its new one symmetrically on the node vectors (idle /
releasing, shared-GPU groups, MIG instances), on the job's per-pod-set counters and on the queue
accounting (``allocated`` / ``allocated_np``) of the leaf queue and all its ancestors. A
``Statement`` records each change so it can be rolled back exactly (§2.8).

Node vectors are rows of numpy arrays ``[cpu millicores, memory bytes, whole GPUs, pods]`` so
node scoring and fit checks can run over all nodes at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core.fair_share import capacity, queue_attrs
from scheduler_core.memo import Charged, CycleMemo, KeptJobs
from scheduler_core.model import Key
from scheduler_core.proportion import QueueAttrs

if TYPE_CHECKING:
    from scheduler_core.ordering import QueueComparator
    from scheduler_core.proportion import DivisionStep
from scheduler_core.state import (
    ACTIVE_NODE_STATES,
    CPU,
    EPS,
    GPU,
    GpuGroup,
    JobState,
    NodeState,
    PodSet,
    SubGroupSet,
    TaskState,
    request_info,
)

if TYPE_CHECKING:
    from scheduler_core.statement import Statement


#: the session's node tables, as ``_build_nodes`` makes them (kept with their charges, ``hand_over``)
_NODE_TABLES = ("nodes", "node_index", "cap", "idle", "rel", "gpu_mem", "group_room", "ready", "has_gpu", "has_cpu",
                "min_gpu_mem", "max_gpu_mem", "total", "node_version")
#: a node's ``group_room`` while it holds no shared group that can take more
NO_ROOM = -math.inf


class Session:
    """State of one cycle. Build with ``Session(snapshot, config)``."""

    def __init__(self, snapshot: m.ClusterSnapshot, config: m.CycleConfig, kept: KeptJobs | None = None) -> None:
        self.snapshot = snapshot
        self.config = config
        self.now = snapshot.now
        # The clock is read only through ``before`` and ``reads_clock``: the result holds for any
        # later ``now`` below ``valid_until`` (memo.py's quiet-cycle reuse relies on it).
        self.valid_until = math.inf
        self.errors: list[m.ObjectError] = []
        self.pending_reasons: dict[str, m.Reason] = {}
        # (reason, note, combined) per pair of reason objects (actions.victims.note_attempt)
        self.notes: dict[tuple[int, int], tuple[m.Reason, m.Reason, m.Reason]] = {}
        self.eviction_reasons: dict[int, tuple[str, str | None, m.Reason]] = {}
        self.pipeline_actions: dict[int, str] = {}
        # (job uid, leaf queue) in the order allocate first tries each job (``positions`` in the result)
        self.try_order: list[tuple[str, str]] = []
        self.tried: set[str] = set()
        self.counts = {"binds": 0, "pipelined": 0, "evictions": 0}
        self._group_seq = 0
        self.ghosts: list[TaskState] = []
        # per job index: (job version, evictable tasks, victim order key) — see actions.victims.VictimOrder
        self.victim_cache: dict[int, tuple[int, list[TaskState], Key]] = {}
        self.memo: CycleMemo | None = None  # verdicts remembered across cycles (memo.py), set by the caller
        self.n_groups = 0  # shared-GPU groups on all nodes (each holds one device)
        self.grouped: set[int] = set()  # the nodes holding at least one shared-GPU group
        self.node_version = 0  # bumped on every change of node usage (placement caches key on it)
        self.changes = 0  # bumped on every change of a task's state (caches of the session's state key on it)
        # actions.victims.trigger_jobs's last answer: (changes, jobs, notes it wrote)
        self.triggers: tuple[int, list[JobState], list[tuple[JobState, m.Reason]]] | None = None
        # the charges of the jobs kept from the last cycle, when they still hold (memo.py, layer 5)
        base = kept.base if kept is not None and kept.base is not None and kept.base.fits(snapshot) else None
        if base is not None:
            self._restore_nodes(base)
        else:
            self._build_nodes()
        self._n_node_errors = len(self.errors)
        self._build_queues()
        if base is not None:
            for name, (alloc, alloc_np, request) in base.queues.items():
                q = self.queues[name]
                q.allocated, q.allocated_np, q.request = alloc, alloc_np, request
        self.queue_comparator: QueueComparator | None = None  # set by cycle.open_session with the fair shares
        self.division_steps: list[DivisionStep] = []  # set by cycle.open_session
        self._place_errors = False  # a placed pod's node is unknown: the charges are not kept (hand_over)
        placing = self._build_jobs(kept, base is not None)
        self._built = False
        self._place_existing(placing)
        self._built = True
        self._compute_requests(placing)
        for j in placing:
            # a job the clock rule started (``_place_existing``) is not in its spec's state
            j.built_at = j.version if j.last_start == j.spec.last_start else -1
        self.charged_jobs = len(placing)  # jobs charged by this build (the others came charged)

    # ---- building ---------------------------------------------------------------------------
    def _error(self, kind: str, name: str, fld: str, message: str) -> None:
        self.errors.append(m.ObjectError(kind, name, fld, message))

    def _build_nodes(self) -> None:
        nodes: list[m.NodeSpec] = []
        seen: set[str] = set()
        for n in self.snapshot.nodes:
            bad = None
            if n.name in seen:
                bad = ("name", f"node {n.name}: duplicate name")
            elif n.cpu_millis < 0 or n.memory_bytes < 0 or n.gpus < 0 or n.max_pods < 0:
                bad = ("resources", f"node {n.name}: allocatable resources must be ≥ 0")
            elif n.gpu_memory_mib <= 0:
                bad = ("gpu_memory_mib", f"node {n.name}: GPU memory per device must be > 0")
            if bad:
                self._error("node", n.name, bad[0], bad[1])
                continue
            seen.add(n.name)
            nodes.append(n)
        nodes.sort(key=lambda x: x.name.encode())  # byte order, as KAI's tie-break
        self.nodes = [NodeState(i, n) for i, n in enumerate(nodes)]
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        count = len(nodes)
        self.cap = np.zeros((count, 4))
        for i, n in enumerate(nodes):
            self.cap[i] = (n.cpu_millis, n.memory_bytes, float(n.whole_gpus), float(n.max_pods))
            self.nodes[i].mig_idle = {p: float(c) for p, c in n.mig_instances.items()}
            self.nodes[i].mig_releasing = {p: 0.0 for p in n.mig_instances}
            if n.extended:
                self.nodes[i].ext_idle = {k: float(v) for k, v in n.extended.items()}
                self.nodes[i].ext_releasing = {k: 0.0 for k in n.extended}
        self.idle = self.cap.copy()
        for i, n in enumerate(nodes):
            if n.other_use is not None:
                self._charge_other_use(i, n.other_use)
        self.rel = np.zeros((count, 4))
        self.gpu_mem = np.array([float(n.gpu_memory_mib) for n in nodes]) if nodes else np.zeros(0)
        # per node: the most MiB any of its shared groups not fully releasing still has
        # (device memory − active), NO_ROOM when it has none; kept by `_charge`
        self.group_room = np.full(count, NO_ROOM)
        self.ready = np.array([n.ready for n in nodes], dtype=bool)
        self.has_gpu = self.cap[:, GPU] > 0 if count else np.zeros(0, dtype=bool)
        self.has_cpu = self.cap[:, CPU] > 0 if count else np.zeros(0, dtype=bool)
        self.min_gpu_mem = float(self.gpu_mem.min()) if count else 100.0
        self.max_gpu_mem = float(self.gpu_mem.max()) if count else 100.0
        # whole-cluster capacity for fair share (fair_share.capacity)
        self.total = capacity(nodes, self.snapshot.total_capacity)

    def _charge_other_use(self, i: int, use: m.OtherUse) -> None:
        """What pods outside the snapshot hold on node ``i`` is not idle (KAI counts every pod of a
        node, whoever placed it). A node they overfill has less than nothing idle: nothing fits."""
        self.idle[i] -= (use.cpu_millis, use.memory_bytes, use.gpus, float(use.pods))
        ns = self.nodes[i]
        for profile, count in use.mig_instances.items():
            if profile in ns.mig_idle:
                ns.mig_idle[profile] -= count
        for name, amount in use.extended.items():
            if name in ns.ext_idle:
                ns.ext_idle[name] -= amount

    def _restore_nodes(self, base: Charged) -> None:
        """The node tables of the last session, holding its kept jobs' charges (``hand_over``)."""
        for name, value in base.node_tables.items():
            setattr(self, name, value)
        self.errors.extend(base.node_errors)

    def _build_queues(self) -> None:
        specs: dict[str, m.QueueSpec] = {}
        for q in self.snapshot.queues:
            if q.name in specs:
                self._error("queue", q.name, "name", f"queue {q.name}: duplicate name")
                continue
            problem = None
            for rname, res in (("gpu", q.gpu), ("cpu", q.cpu), ("memory", q.memory)):
                for fname in ("quota", "limit"):
                    v = getattr(res, fname)
                    if not math.isfinite(v) or (v < 0 and v != m.UNLIMITED):
                        problem = (f"{rname}.{fname}", f"queue {q.name}: {rname} {fname} {v} must be ≥ 0 or -1")
                if res.over_quota_weight < 0 and res.over_quota_weight != m.UNLIMITED:
                    problem = (f"{rname}.over_quota_weight",
                               f"queue {q.name}: {rname} over-quota weight must be ≥ 0")
            if problem:
                self._error("queue", q.name, problem[0], problem[1])
                continue
            specs[q.name] = q
        # drop orphans (parent missing) with their subtrees, and cycles
        valid: dict[str, m.QueueSpec] = {}
        for name, q in specs.items():
            chain, cur, ok = {name}, q.parent, True
            while cur is not None:
                if cur not in specs:
                    ok = False
                    self._error("queue", name, "parent",
                                f"queue {name}: parent queue {cur!r} does not exist; the queue is ignored")
                    break
                if cur in chain:
                    ok = False
                    self._error("queue", name, "parent", f"queue {name}: the parent chain loops through {cur!r}")
                    break
                chain.add(cur)
                cur = specs[cur].parent
            if ok:
                valid[name] = q
        self.queue_specs = valid
        self.queues: dict[str, QueueAttrs] = {}
        usage = self.snapshot.usage
        for name, q in valid.items():
            self.queues[name] = queue_attrs(q, usage.get(name, (0.0, 0.0, 0.0)))
        for qa in self.queues.values():
            if qa.parent is not None:
                self.queues[qa.parent].children.append(qa.name)
        # ancestor chains (leaf first) for fast accounting
        self.chain: dict[str, list[QueueAttrs]] = {}
        for name in self.queues:
            out, cur = [], name
            while cur is not None:
                out.append(self.queues[cur])
                cur = self.queues[cur].parent
            self.chain[name] = out
        self.leaf_queues = frozenset(name for name, q in self.queues.items() if not q.children)

    def _build_jobs(self, kept: KeptJobs | None, charged: bool) -> list[JobState]:
        """A ``JobState`` per job spec; returns those the session must charge (``_place_existing``).

        With ``kept`` (the states an earlier cycle of the same memo left, ``memo.py`` layer 4), a
        spec seen then is not built again: its state is reset (``JobState.reset``) and checked
        against this cycle's queues and nodes; only new specs are built, and the states of specs
        that are gone are released. ``charged``: the node and queue tables came from that cycle
        (layer 5) and hold the charges of its kept jobs as built (``built_at``), so such a job is
        only numbered again, and one that is gone is uncharged before it is released."""
        self.jobs: list[JobState] = []
        self.tasks: list[TaskState] = []
        placing: list[JobState] = []
        prior = kept.jobs if kept is not None else {}
        # a small integer per distinct placement shape (only ever a cache key)
        self.shape_ids: dict[Key, int] = kept.shapes if kept is not None else {}
        shape_ids = self.shape_ids
        # derived request data per request object (the snapshot keeps the objects alive): its
        # ``request_info``, whether it charges whole units only, and its largest charge
        infos: dict[int, tuple[Key, bool, float]] = {}
        self.job_by_uid: dict[str, JobState] = {}
        seen = self.job_by_uid
        jobs, tasks = self.jobs, self.tasks
        mass = 0.0  # the jobs' masses together (``_exact``)
        take = prior.pop
        add_job, add_task, claim = jobs.append, tasks.append, seen.setdefault
        for spec in self.snapshot.jobs:
            job = take(id(spec), None) if prior else None
            if job is not None:
                if charged and job.built_at >= 0 and claim(job.uid, job) is job:
                    # as the last build left it (the same queues and nodes): number it again
                    job.index = len(jobs)
                    add_job(job)
                    for t in job.tasks:
                        t.index = len(tasks)
                        add_task(t)
                    mass += job.mass
                    continue
                if job.uid not in seen:
                    if self._context_problem(spec) is None:
                        self._reuse(job)
                        placing.append(job)
                        seen[job.uid] = job
                        mass += job.mass
                        continue
                self._drop(job, charged)
            job = JobState(len(jobs), spec)
            if job.uid in seen:
                self._error("job", job.uid, "name", f"job {job.uid}: duplicate name")
                continue
            seen[job.uid] = job
            problem = self._context_problem(spec) or _spec_problem(spec)
            if problem:
                self._error("job", job.uid, problem[0], problem[1])
                job.valid = False
            job_mass = 0.0
            plain = True
            for ts in spec.tasks:
                r = ts.request
                got = infos.get(id(r))
                if got is None:
                    info = request_info(r)
                    got = infos[id(r)] = (info, not info[3] and r.gpu_kind != m.GPU_MIG and not r.extended,
                                          max(float(info[0].max()), *info[1]))
                t = TaskState(len(tasks), job, ts, shape_ids, got[0])
                tasks.append(t)
                job.tasks.append(t)
                if t.status == m.PENDING:
                    job.n_pending += 1
                plain = plain and got[1]
                job_mass += got[2]
            job.mass = job_mass if plain else math.inf
            mass += job.mass
            if len(job.tasks) == 1:
                job.one_shape = job.tasks[0].shape_id
            self._build_gang(job)
            jobs.append(job)
            placing.append(job)
        for gone in prior.values():
            self._drop(gone, charged)
        prior.clear()
        self.job_mass = mass
        return placing

    def _drop(self, job: JobState, charged: bool) -> None:
        """Let go of a kept job's state; its charges leave the tables first if they hold them."""
        if charged and job.built_at >= 0:
            self._uncharge(job)
        _release_job(job)

    def _uncharge(self, job: JobState) -> None:
        """Take a job's charges, as they are now, off the nodes and queues (its request as built)."""
        for t in job.tasks:
            self._charge(t, -1)
        if job.valid:
            job.reset(job.index)
            for t in job.tasks:
                t.reset(t.index)
            self._add_requests(job, -1)

    def _reuse(self, job: JobState) -> None:
        """Take a valid job's state from an earlier cycle, as a fresh build would make it."""
        job.reset(len(self.jobs))
        tasks = self.tasks
        for t in job.tasks:
            t.reset(len(tasks))
            tasks.append(t)
            if t.status == m.PENDING:
                job.n_pending += 1
        self.jobs.append(job)

    def _context_problem(self, spec: m.JobSpec) -> tuple[str, str] | None:
        """What makes a job invalid in this snapshot's queues and nodes (its spec alone may be
        fine: ``_spec_problem``)."""
        if spec.queue not in self.leaf_queues:
            if spec.queue in self.queue_specs:
                return ("queue", f"job {spec.uid}: queue {spec.queue!r} has child queues; jobs must use a leaf queue")
            if any(q.name == spec.queue for q in self.snapshot.queues):
                return ("queue", f"job {spec.uid}: queue {spec.queue!r} is not usable (its parent is missing)")
            return ("queue", f"job {spec.uid}: queue {spec.queue!r} does not exist")
        for t in spec.tasks:
            if t.node is not None and t.state in m.ACTIVE_USED_STATES and t.node not in self.node_index:
                return ("tasks.node", f"task {t.name}: node {t.node!r} does not exist")
        return None

    def _build_gang(self, job: JobState) -> None:
        spec = job.spec
        tree = spec.subgroups
        if tree is None and all(t.subgroup is None or t.subgroup == "default" for t in spec.tasks):
            # the common shape: one default pod set holding every task (no topology)
            mins = len(spec.tasks) if spec.min_available is None else spec.min_available
            ps = PodSet("default", mins, None)
            ps.parent = job.root
            job.root.members.append(ps)
            job.pod_sets["default"] = ps
            ps.tasks.extend(job.tasks)
            for t in job.tasks:
                t.pod_set = ps
            if len(ps.tasks) > 1:
                ps.tasks.sort(key=lambda t: t.order_key)
            return
        if tree is None:
            mins = len(spec.tasks) if spec.min_available is None else spec.min_available
            tree = m.SubGroupSpec("", None, None, (m.PodSetSpec("default", mins, None),), ())

        def build(sg: m.SubGroupSpec, parent: SubGroupSet | None) -> SubGroupSet:
            node = SubGroupSet(sg.name, sg.min_subgroups, sg.topology_constraint)
            node.parent = parent
            for ps in sg.pod_sets:
                p = PodSet(ps.name, ps.min_available, ps.topology_constraint)
                p.parent = node
                node.members.append(p)
                job.pod_sets[ps.name] = p
            for child in sg.subgroups:
                node.members.append(build(child, node))
            return node

        job.root = build(tree, None)
        job.has_topology = _tree_has_topology(tree)
        added_default = False
        for t in job.tasks:
            name = t.spec.subgroup or "default"
            found = job.pod_sets.get(name)
            if found is None:
                if name != "default":
                    self._error("task", t.name, "subgroup", f"task {t.name}: unknown subgroup {name!r}")
                    job.valid = False
                # as KAI's harness: a missing default pod set holds all such tasks as a strict gang
                ps = PodSet(name, 0, None)
                ps.parent = job.root
                job.root.members.append(ps)
                job.pod_sets[name] = ps
                added_default = added_default or name == "default"
                found = ps
            found.tasks.append(t)
            t.pod_set = found
        if added_default:
            job.pod_sets["default"].min_available = len(job.pod_sets["default"].tasks)
        for ps in job.pod_sets.values():
            if len(ps.tasks) > 1:
                ps.tasks.sort(key=lambda t: t.order_key)

    def _place_existing(self, jobs: list[JobState]) -> None:
        """Charge the tasks of ``jobs`` that already hold node resources (§B.1), in task-name order."""
        placed = [t for j in jobs for t in j.tasks if t.status in m.ACTIVE_USED_STATES]
        placed.sort(key=lambda t: t.name)
        for t in placed:
            status = t.status
            if t.spec.node is None or t.spec.node not in self.node_index:
                if t.job.valid:
                    self._error("task", t.name, "node", f"task {t.name}: {status} but has no known node")
                t.status = m.PENDING
                t.job.n_pending += 1
                self._place_errors = True  # its state is not the spec's: nothing is kept (hand_over)
                continue
            node = self.node_index[t.spec.node]
            groups = tuple(t.spec.gpu_groups)
            if t.shared and not groups:
                groups = tuple(self.new_group_name(t, i) for i in range(t.request.gpu_devices))
            if t.shared:
                t.mem_per_device, t.portion = self.shared_need(t, node)
                t.qvec = (t.qvec[0], t.qvec[1], t.portion * t.request.gpu_devices)
            # a fresh task holds no charge yet: charge it where it is (set_task without the removal)
            t.status, t.node, t.groups = status, node, groups
            self._charge(t, +1)
        for j in jobs:
            if j.last_start is None and j.allocated_count() > 0:
                j.last_start = self.now - 60.0
                self.reads_clock()  # the result reports this start time

    def before(self, t: float) -> bool:
        """Whether ``now < t``. While true, the answer holds until ``t`` only, so the cycle's
        result does too; once false it stays false as time goes on."""
        if self.now < t:
            self.valid_until = min(self.valid_until, t)
            return True
        return False

    def reads_clock(self) -> None:
        """The result itself depends on ``now`` (a duration in a reason, a start time): it holds
        for this instant only."""
        self.valid_until = self.now

    def _compute_requests(self, jobs: list[JobState]) -> None:
        """Queue ``request`` = allocated + pending requests (GPU memory via the smallest node)."""
        for j in jobs:
            for t in j.tasks:
                if t.shared and t.request.gpu_kind == m.GPU_MEMORY:
                    t.req_qvec = (t.req_qvec[0], t.req_qvec[1],
                                  t.request.gpu_memory_mib / self.min_gpu_mem * t.request.gpu_devices)
            if j.valid:
                self._add_requests(j, +1)

    def _add_requests(self, j: JobState, sign: int) -> None:
        """Add (or take off) a job's part of its queues' ``request``: allocated tasks by their
        charge, pending ones by their request."""
        chain = self.chain[j.queue]
        for t in j.tasks:
            if t.status in m.ALLOCATED_STATES:
                vec = t.qvec
            elif t.status == m.PENDING:
                vec = t.req_qvec
            else:
                continue
            for q in chain:
                q.request[0] += sign * vec[0]
                q.request[1] += sign * vec[1]
                q.request[2] += sign * vec[2]

    # ---- GPU sharing helpers ----------------------------------------------------------------
    def new_group_name(self, task: TaskState, i: int) -> str:
        self._group_seq += 1
        return f"auto:{task.name}:{self._group_seq}"

    def shared_need(self, task: TaskState, node: int) -> tuple[float, float]:
        """(MiB per device, accepted GPU portion per device) of a shared task on a node (§5)."""
        r = task.request
        gmem = float(self.gpu_mem[node])
        if r.gpu_kind == m.GPU_FRACTION:
            return float(math.floor(r.gpu_fraction * gmem + EPS)), r.gpu_fraction
        mem = float(r.gpu_memory_mib)
        return mem, math.ceil(100.0 * mem / gmem - EPS) / 100.0

    def shared_mem(self, task: TaskState, nodes: np.ndarray) -> np.ndarray:
        """`shared_need`'s MiB per device for many nodes at once (the same arithmetic, elementwise)."""
        r = task.request
        if r.gpu_kind == m.GPU_FRACTION:
            mem: np.ndarray = np.floor(r.gpu_fraction * self.gpu_mem[nodes] + EPS)
            return mem
        return np.full(len(nodes), float(r.gpu_memory_mib))

    # ---- the one mutation -------------------------------------------------------------------
    def set_task(self, t: TaskState, status: str, node: int | None, groups: tuple[str, ...]) -> None:
        """Move a task to (status, node, groups), keeping every account in step."""
        self._charge(t, -1)
        t.status, t.node, t.groups = status, node, groups
        self._charge(t, +1)

    def _charge(self, t: TaskState, sign: int) -> None:
        status = t.status
        t.job.version += 1
        self.changes += 1
        if status == m.PENDING and t.index >= 0:
            t.job.n_pending += sign
            return
        ps = t.pod_set
        if ps is not None:
            if status in m.ACTIVE_ALLOCATED_STATES:
                ps.active_allocated += sign
            if status in m.ALLOCATED_STATES:
                ps.allocated += sign
            if status in m.ACTIVE_USED_STATES:
                ps.active_used += sign
        # Queue accounting: allocated tasks, and tasks pipelined during this session (KAI's
        # proportion plugin counts every in-session allocate/pipeline; pods that were already
        # pipelined in the snapshot are not counted). Removal undoes exactly what was added.
        if sign > 0:
            counted = t.job.valid and (status in m.ALLOCATED_STATES or (status == m.PIPELINED and self._built))
            t.q_counted = counted
        else:
            counted = t.q_counted
            t.q_counted = False
        if counted:
            qv = t.qvec
            np_job = not t.job.preemptible
            for q in self.chain[t.job.queue]:
                a = q.allocated
                a[0] += sign * qv[0]
                a[1] += sign * qv[1]
                a[2] += sign * qv[2]
                if np_job:
                    b = q.allocated_np
                    b[0] += sign * qv[0]
                    b[1] += sign * qv[1]
                    b[2] += sign * qv[2]
        if t.node is None or status not in m.ACTIVE_USED_STATES:
            return
        self.node_version += 1
        i = t.node
        ns = self.nodes[i]
        vec = t.vec
        # a resource the node does not have at all is not charged (B.1)
        # in-place row updates without temporaries (this is the hottest line of a cycle)
        if status in ACTIVE_NODE_STATES or status == m.RELEASING:
            if sign > 0:
                self.idle[i] -= vec
            else:
                self.idle[i] += vec
        if status == m.RELEASING:
            if sign > 0:
                self.rel[i] += vec
            else:
                self.rel[i] -= vec
        elif status == m.PIPELINED:
            if sign > 0:
                self.rel[i] -= vec
            else:
                self.rel[i] += vec
        if t.index >= 0:
            if sign > 0:
                ns.tasks.add(t)
            else:
                ns.tasks.discard(t)
        if t.shared:
            mem = t.mem_per_device
            for g in t.groups:
                grp = ns.groups.get(g)
                if grp is None:
                    grp = ns.groups[g] = GpuGroup(g)
                    self.n_groups += 1
                    self.grouped.add(i)
                old = grp.contribution()
                if status == m.RELEASING:
                    grp.mem_releasing += sign * mem
                    grp.n_releasing += sign
                elif status == m.PIPELINED:
                    grp.mem_active += sign * mem
                    grp.n_pipelined += sign
                else:
                    grp.mem_active += sign * mem
                    grp.n_active += sign
                new = grp.contribution()
                self.idle[i, GPU] += new[0] - old[0]
                self.rel[i, GPU] += new[1] - old[1]
                if grp.empty:
                    del ns.groups[g]
                    self.n_groups -= 1
                    if not ns.groups:
                        self.grouped.discard(i)
            gmem = float(self.gpu_mem[i])
            self.group_room[i] = max((gmem - g.mem_active for g in ns.groups.values() if not g.fully_releasing),
                                     default=NO_ROOM)
        elif t.request.gpu_kind == m.GPU_MIG:
            for p, c in t.request.mig.items():
                if status in ACTIVE_NODE_STATES:
                    ns.mig_idle[p] = ns.mig_idle.get(p, 0.0) - sign * c
                elif status == m.RELEASING:
                    ns.mig_idle[p] = ns.mig_idle.get(p, 0.0) - sign * c
                    ns.mig_releasing[p] = ns.mig_releasing.get(p, 0.0) + sign * c
                elif status == m.PIPELINED:
                    ns.mig_releasing[p] = ns.mig_releasing.get(p, 0.0) - sign * c
        ext = t.request.extended
        if ext:
            for res, amount in ext.items():
                if status in ACTIVE_NODE_STATES or status == m.RELEASING:
                    ns.ext_idle[res] = ns.ext_idle.get(res, 0.0) - sign * amount
                if status == m.RELEASING:
                    ns.ext_releasing[res] = ns.ext_releasing.get(res, 0.0) + sign * amount
                elif status == m.PIPELINED:
                    ns.ext_releasing[res] = ns.ext_releasing.get(res, 0.0) - sign * amount

    # ---- per-session caps (CycleConfig.max_binds / max_pipelines / max_evictions) -----------
    def statement_delta(self, stmt: Statement) -> dict[str, int]:
        """New binds, pipelined pods and evictions a statement would commit."""
        seen: set[int] = set()
        out = {"binds": 0, "pipelined": 0, "evictions": 0}
        for op in stmt.ops:
            t = op[0]
            if id(t) in seen:
                continue
            seen.add(id(t))
            if t.status == m.ALLOCATED:
                out["binds"] += 1
            elif t.status == m.PIPELINED:
                out["pipelined"] += 1
            elif t.status == m.RELEASING:
                out["evictions"] += 1
        return out

    def cap_problem(self, delta: dict[str, int]) -> m.Reason | None:
        """The cap a commit would break, as a pending reason; None when within every cap."""
        c = self.config
        if c.max_binds is None and c.max_pipelines is None and c.max_evictions is None:
            return None  # no cap configured
        caps = {"binds": c.max_binds, "pipelined": c.max_pipelines, "evictions": c.max_evictions}
        for key, cap in caps.items():
            if cap is not None and delta[key] and self.counts[key] + delta[key] > cap:
                return m.Reason(reasons.SESSION_CAP, f"this cycle's cap of {cap} {key} is reached "
                                f"({self.counts[key]} done, {delta[key]} more needed)",
                                {"cap": key, "limit": cap, "done": self.counts[key], "needed": delta[key]})
        return None

    def add_counts(self, delta: dict[str, int]) -> None:
        for key, n in delta.items():
            self.counts[key] += n

    def make_ghost(self, t: TaskState) -> TaskState:
        """A stand-in for a victim's old pod, left releasing on its node while the task itself is
        re-placed elsewhere (consolidation / re-pipelined victims). It counts on the node only."""
        g = TaskState(-1 - len(self.ghosts), t.job, t.spec, self.shape_ids)
        g.status, g.node, g.groups = m.PENDING, None, ()
        g.vec, g.qvec, g.portion, g.mem_per_device = t.vec, t.qvec, t.portion, t.mem_per_device
        g.pod_set = None
        self.ghosts.append(g)
        return g

    def release(self) -> None:
        """Break the references between the session's objects (a job and its tasks, a pod set
        and its gang tree), so they are freed the moment the cycle lets go of the session instead
        of waiting for Python's cyclic collector (``cycle.collector_paused``). The session is not
        used after this."""
        for j in self.jobs:
            _release_job(j)
        self._forget()

    def hand_over(self, max_shapes: int) -> KeptJobs | None:
        """End the session like ``release``, but keep its valid jobs' states for the next cycle's
        build (``_build_jobs``). Nothing is kept once the table of shape ids holds more than
        ``max_shapes``.

        When every charge is a whole number (``_exact``), the node and queue tables are kept too
        (``memo.py``, layer 5): a job whose state is still the one the build gave it (``built_at``
        is its version) stays charged; every other job, and every stand-in of a moved pod, is
        uncharged as it is now, and a changed job's state is reset for the next build to charge
        again."""
        if len(self.shape_ids) > max_shapes:
            self.release()
            return None
        exact = self._exact()
        kept: dict[int, JobState] = {}
        for j in self.jobs:
            if exact and not (j.valid and j.built_at == j.version):
                self._uncharge(j)  # resets a valid job (built_at -1: charged again by the next build)
            if j.valid:
                kept[id(j.spec)] = j
            else:
                _release_job(j)
        base = None
        if exact:
            for g in self.ghosts:
                self._charge(g, -1)
            base = Charged(self.snapshot, {name: getattr(self, name) for name in _NODE_TABLES},
                           self.errors[:self._n_node_errors],
                           {name: (q.allocated, q.allocated_np, q.request) for name, q in self.queues.items()})
        out = KeptJobs(kept, self.shape_ids, base)
        self._forget()
        return out

    def _exact(self) -> bool:
        """Whether this session's node and queue accounts can be kept and patched (``hand_over``):
        every pod charges whole units only, so sums of charges are exact in any order, as long as
        they stay below 2**53 (bounded by the pods' charges and the nodes' capacity together)."""
        if self._place_errors or self.n_groups:
            return False
        mass = float(np.abs(self.cap).sum()) if len(self.cap) else 0.0
        mass += self.job_mass  # the jobs' masses, found by the build (infinite if one is not whole)
        return 2.0 * mass < 2.0**53

    def _forget(self) -> None:
        self.jobs = []
        self.tasks = []
        self.ghosts = []
        self.job_by_uid = {}

    # ---- results helpers --------------------------------------------------------------------
    def node_gpu_counts(self, i: int) -> tuple[float, float]:
        """(idle, releasing) whole GPUs of a node as the harness counts them (A.10)."""
        return float(self.idle[i, GPU]), float(self.rel[i, GPU])

def _release_job(j: JobState) -> None:
    """Break a job's reference cycles (job ↔ tasks ↔ pod sets ↔ gang tree)."""
    j.tasks.clear()
    for ps in j.pod_sets.values():
        ps.tasks.clear()
    j.pod_sets.clear()
    _clear_tree(j.root)


def _spec_problem(spec: m.JobSpec) -> tuple[str, str] | None:
    """What makes a job invalid whatever the cluster: its tasks' names, states and requests."""
    names: set[str] = set()
    for t in spec.tasks:
        r = t.request
        if t.name in names:
            return ("tasks", f"task {t.name}: duplicate task name")
        names.add(t.name)
        if t.state not in m.TASK_STATES:
            return ("tasks.state", f"task {t.name}: unknown state {t.state!r}")
        if r.cpu_millis < 0 or r.memory_bytes < 0 or r.gpus < 0 or r.gpu_memory_mib < 0:
            return ("tasks.request", f"task {t.name}: requests must be ≥ 0")
        if r.gpu_kind not in m.GPU_KINDS:
            return ("tasks.request.gpu_kind", f"task {t.name}: unknown GPU request kind {r.gpu_kind!r}")
        if r.gpu_kind == m.GPU_FRACTION and not (0 < r.gpu_fraction <= 1):
            return ("tasks.request.gpu_fraction", f"task {t.name}: GPU fraction {r.gpu_fraction} must be in (0, 1]")
        if r.gpu_kind == m.GPU_MEMORY and r.gpu_memory_mib <= 0:
            return ("tasks.request.gpu_memory_mib", f"task {t.name}: GPU memory request must be > 0")
        if r.gpu_kind in (m.GPU_FRACTION, m.GPU_MEMORY) and r.gpu_devices < 1:
            return ("tasks.request.gpu_devices", f"task {t.name}: GPU devices must be ≥ 1")
    if spec.min_available is not None and spec.min_available < 0:
        return ("min_available", f"job {spec.uid}: min_available must be ≥ 0")
    return None


def _clear_tree(sg: SubGroupSet) -> None:
    for x in sg.members:
        if isinstance(x, SubGroupSet):
            _clear_tree(x)
    sg.members.clear()


def _tree_has_topology(sg: m.SubGroupSpec) -> bool:
    if sg.topology_constraint is not None or any(p.topology_constraint is not None for p in sg.pod_sets):
        return True
    return any(_tree_has_topology(c) for c in sg.subgroups)

def _all_pod_sets(sg: m.SubGroupSpec) -> list[m.PodSetSpec]:
    out = list(sg.pod_sets)
    for c in sg.subgroups:
        out.extend(_all_pod_sets(c))
    return out
