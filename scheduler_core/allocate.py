"""Placing jobs: node scoring, predicates, GPU sharing, topology, and the allocate action.

Invariants (KAI-SEMANTICS §2.6, §2.7, §5, §8.8–10):
* a job's gang batch is placed in one statement or not at all;
* a task is *allocated* only on idle resources, *pipelined* when it needs releasing ones; if any
  gang-phase task is pipelined, the whole batch is pipelined (no partial bind);
* queue limits hold at every level; a non-preemptible job stays within quota;
* nodes are tried by descending score sum, ties by node name in byte order (SCHEMA B.4);
* allocate never evicts.
"""

from __future__ import annotations

import math

import numpy as np

from scheduler_core import model as m
from scheduler_core import placement as fa
from scheduler_core import predicates as pr
from scheduler_core import reasons
from scheduler_core.model import Key
from scheduler_core.ordering import (
    JobsOrder,
    _member_order_key,
    batch_request,
    tasks_to_allocate,
    within_queue_depth,
)
from scheduler_core.session import Session
from scheduler_core.state import CPU, GPU, MEM, PODS, JobState, PodSet, SubGroupSet, TaskState
from scheduler_core.statement import Statement
from scheduler_core.units import RESOURCE_TITLES, amount

_EPS = 1e-9




# --------------------------------------------------------------------------------------------
# Queue capacity (§2.6 step 2)


def queue_capacity_problem(s: Session, job: JobState, tasks: list[TaskState]) -> m.Reason | None:
    """Limit at every level, and non-preemptible within quota; None when the batch may go."""
    req = [0.0, 0.0, 0.0]
    for t in tasks:
        v = t.qvec
        g = v[2]
        if t.request.gpu_kind == m.GPU_MEMORY:
            # the most lenient portion (largest node GPU memory): reject only if certainly over
            g = t.request.gpu_memory_mib / s.max_gpu_mem * t.request.gpu_devices
        req[0] += v[0]
        req[1] += v[1]
        req[2] += g
    for q in s.chain[job.queue]:
        for r in (2, 0, 1):
            if req[r] > 0 and q.limit[r] != m.UNLIMITED and q.allocated[r] + req[r] > q.limit[r] + _EPS:
                return m.Reason(
                    reasons.QUEUE_OVER_LIMIT,
                    f"queue {q.name} would exceed its {RESOURCE_TITLES[r]} limit of {amount(r, q.limit[r])}: "
                    f"{amount(r, q.allocated[r])} allocated + {amount(r, req[r])} requested",
                    {"queue": q.name, "resource": ("cpu", "memory", "gpu")[r], "limit": q.limit[r],
                     "allocated": q.allocated[r], "requested": req[r]},
                )
        if not job.preemptible:
            for r in (2, 0, 1):
                if req[r] > 0 and q.deserved[r] != m.UNLIMITED and q.allocated_np[r] + req[r] > q.deserved[r] + _EPS:
                    return m.Reason(
                        reasons.NON_PREEMPTIBLE_OVER_QUOTA,
                        f"non-preemptible job would take queue {q.name} over its {RESOURCE_TITLES[r]} quota of "
                        f"{amount(r, q.deserved[r])}: {amount(r, q.allocated_np[r])} already used by "
                        f"non-preemptible jobs + {amount(r, req[r])} requested",
                        {"queue": q.name, "resource": ("cpu", "memory", "gpu")[r], "quota": q.deserved[r],
                         "allocated_non_preemptible": q.allocated_np[r], "requested": req[r]},
                    )
    return None


# --------------------------------------------------------------------------------------------
# Node selection for one task


class Placer:
    """Scores and fits tasks on nodes for one session."""

    #: reuse the last node order for tasks of the same shape while no other node changed
    #: (off only to check that it changes no decision)
    fast_paths = True

    def __init__(self, s: Session) -> None:
        self.s = s
        cfg = s.config
        # the plain evaluation (``CycleConfig.shortcuts=False``) scores every node in full too
        self.fast_paths = Placer.fast_paths and cfg.shortcuts
        self.predicates = cfg.predicates and cfg.has_plugin("predicates")
        # node level: nodeplacement arguments; device level: gpuspread (or GPU spread placement)
        self.node_gpu_spread = cfg.gpu_placement == "spread"
        self.gpu_spread = self.node_gpu_spread or (cfg.plugins is not None and "gpuspread" in cfg.plugins)
        self.cpu_spread = cfg.cpu_placement == "spread"
        # fragmentation-aware: GPU pods go where they grow expected fragmentation least (placement.py)
        self.frag_aware = cfg.gpu_placement == "fragmentation-aware" and not self.gpu_spread
        self.typical = fa.typical_pods_from_requests(cfg.typical_pods or fa.DEFAULT_TYPICAL_PODS) \
            if self.frag_aware else None
        self._frag_before: dict[tuple[int, ...], float] = {}
        self.use_availability = cfg.has_plugin("nodeavailability")
        # the fragmentation gradient already prefers GPUs being shared when that does no harm
        self.use_sharing_order = cfg.has_plugin("gpusharingorder") and not self.gpu_spread and not self.frag_aware
        self.use_resource_type = cfg.has_plugin("resourcetype")
        self.use_placement = cfg.has_plugin("nodeplacement") or cfg.plugins is None
        self._affinity_cache: dict[Key, np.ndarray] = {}
        self._static_reasons: dict[Key, list[str | None]] = {}
        self._preferred_cache: dict[Key, np.ndarray] = {}
        # placed pods with required anti-affinity keep matching pods out of their domain
        self.anti_holders = [t for t in s.tasks if t.spec.pod_anti_affinity]
        self.all_nodes = np.arange(len(s.nodes))
        # per task shape: the node order of the last full scoring, its idle-fit flags, the position
        # of the last choice and the node version after placing it; see place()
        self._last: dict[Key, tuple[list[int], list[bool], list[bool], int, int, bool]] = {}
        self._failed: dict[Key, int] = {}

    # ---- predicates -------------------------------------------------------------------------
    def _static_key(self, t: TaskState) -> Key:
        return (t.shape_id, self.predicates)

    def _static_mask(self, t: TaskState) -> np.ndarray:
        """Predicates that do not depend on node usage (``predicates.static_failure``), cached per
        pod shape: the shape holds every field they read (request kind, MIG profiles, extended
        resources, node selector and affinity, tolerations)."""
        key = self._static_key(t)
        mask = self._affinity_cache.get(key)
        if mask is not None:
            return mask
        spec = t.spec
        failures = [pr.static_failure(ns.spec, spec, self.predicates) for ns in self.s.nodes]
        out = np.array([x is None for x in failures], dtype=bool)
        self._affinity_cache[key] = out
        self._static_reasons[key] = failures
        return out

    def static_reasons(self, t: TaskState) -> list[str | None]:
        """Per node, why the static predicates keep ``t`` off it (None = they let it on)."""
        self._static_mask(t)
        return self._static_reasons[self._static_key(t)]

    def _preferred_scores(self, t: TaskState, cand: np.ndarray) -> np.ndarray | None:
        """Preferred node affinity: kube's NodeAffinity score, normalised to 0..100 over all nodes
        and weighted (``predicates.PREFERRED_NODE_AFFINITY_WEIGHT``); plus preferred pod
        (anti-)affinity, normalised the same way (``PREFERRED_POD_AFFINITY_WEIGHT``)."""
        out: np.ndarray | None = None
        prefs = t.spec.preferred_node_affinity
        if prefs:
            key = (t.shape_id,)
            full = self._preferred_cache.get(key)
            if full is None:
                raw = np.array([float(pr.preferred_node_affinity_raw(ns.spec, prefs)) for ns in self.s.nodes])
                top = raw.max() if len(raw) else 0.0
                full = raw * (100.0 / top) if top > 0 else np.zeros(len(raw))
                full *= pr.PREFERRED_NODE_AFFINITY_WEIGHT
                self._preferred_cache[key] = full
            out = full[cand].copy()
        if t.spec.preferred_pod_affinity or t.spec.preferred_pod_anti_affinity:
            raw = self._pod_preference_raw(t, cand)
            lo, hi = (raw.min(), raw.max()) if len(raw) else (0.0, 0.0)
            norm = (raw - lo) * (100.0 / (hi - lo)) if hi > lo else np.zeros(len(raw))
            norm *= pr.PREFERRED_POD_AFFINITY_WEIGHT
            out = norm if out is None else out + norm
        return out

    # ---- dynamic predicates (host ports, pod affinity) -----------------------------------------
    def _placed(self, t: TaskState, with_releasing: bool) -> list[TaskState]:
        """Pods on nodes other than ``t`` (releasing ones only if ``with_releasing``)."""
        out = []
        for o in self.s.tasks:
            if o is t or o.node is None or o.status not in m.ACTIVE_USED_STATES:
                continue
            if not with_releasing and o.status in (m.RELEASING, m.STUCK_IN_RELEASING):
                continue
            out.append(o)
        return out

    def _domains(self, key: str, pods: list[TaskState]) -> set[str]:
        out = set()
        for o in pods:
            if o.node is None:
                continue
            v = self.s.nodes[o.node].spec.label(key)
            if v is not None:
                out.add(v)
        return out

    def _pod_preference_raw(self, t: TaskState, cand: np.ndarray) -> np.ndarray:
        spec, ns_ = t.spec, t.job.spec.namespace
        placed = self._placed(t, True)
        raw = np.zeros(len(cand))
        for sign, terms in ((1.0, spec.preferred_pod_affinity), (-1.0, spec.preferred_pod_anti_affinity)):
            for w in terms:
                chosen = [o for o in placed
                          if pr.pod_term_selects(w.term, ns_, o.job.spec.namespace, o.spec.labels)]
                doms = self._domains(w.term.topology_key, chosen)
                for k, i in enumerate(cand.tolist()):
                    v = self.s.nodes[i].spec.label(w.term.topology_key)
                    if v is not None and v in doms:
                        raw[k] += sign * w.weight
        return raw

    def _dynamic_context(self, t: TaskState, with_releasing: bool) -> Key:
        """What the dynamic predicates of ``t`` compare against: per required (anti-)affinity
        term the topology domains holding a selected pod (None = no selected pod anywhere), and
        the placed pods whose anti-affinity selects ``t``."""
        spec, ns_ = t.spec, t.job.spec.namespace
        placed = self._placed(t, with_releasing) if (spec.pod_affinity or spec.pod_anti_affinity
                                                      or self.anti_holders) else []
        aff = []
        for term in spec.pod_affinity:
            chosen = [o for o in placed if pr.pod_term_selects(term, ns_, o.job.spec.namespace, o.spec.labels)]
            aff.append((term, self._domains(term.topology_key, chosen) if chosen else None))
        anti = []
        for term in spec.pod_anti_affinity:
            chosen = [o for o in placed if pr.pod_term_selects(term, ns_, o.job.spec.namespace, o.spec.labels)]
            anti.append((term, self._domains(term.topology_key, chosen)))
        existing: list[tuple[str, set[str]]] = []
        for o in placed:
            if not o.spec.pod_anti_affinity:
                continue
            for term in o.spec.pod_anti_affinity:
                if pr.pod_term_selects(term, o.job.spec.namespace, ns_, spec.labels):
                    existing.append((term.topology_key, self._domains(term.topology_key, [o])))
        return aff, anti, existing, with_releasing

    def dynamic_failure(self, t: TaskState, i: int, ctx: Key) -> str | None:
        """Why ``t`` may not go to node ``i`` given the pods placed now; None if it may."""
        aff, anti, existing, with_releasing = ctx
        spec = t.spec
        node = self.s.nodes[i]
        if spec.host_ports:
            for o in node.tasks:
                if o is t or not o.spec.host_ports:
                    continue
                if not with_releasing and o.status in (m.RELEASING, m.STUCK_IN_RELEASING):
                    continue
                if pr.ports_conflict(spec.host_ports, o.spec.host_ports):
                    return pr.HOST_PORTS
        for term, doms in aff:
            if doms is None:
                # no pod matches anywhere: kube lets the first pod of a group in if it matches itself
                if pr.pod_term_selects(term, t.job.spec.namespace, t.job.spec.namespace, spec.labels) \
                        and node.spec.label(term.topology_key) is not None:
                    continue
                return pr.POD_AFFINITY
            v = node.spec.label(term.topology_key)
            if v is None or v not in doms:
                return pr.POD_AFFINITY
        for term, doms in anti:
            v = node.spec.label(term.topology_key)
            if v is not None and v in doms:
                return pr.POD_ANTI_AFFINITY
        for key, doms in existing:
            v = node.spec.label(key)
            if v is not None and v in doms:
                return pr.EXISTING_ANTI_AFFINITY
        return None

    def _apply_dynamic(self, t: TaskState, cand: np.ndarray, fit_idle: np.ndarray, fit_any: np.ndarray) -> None:
        """Clear the fit flags of nodes the dynamic predicates refuse: on idle resources every
        pod counts; pipelining onto releasing resources ignores the pods being released."""
        idle_ctx = self._dynamic_context(t, True)
        any_ctx = None
        for k in np.flatnonzero(fit_any).tolist():
            i = int(cand[k])
            if self.dynamic_failure(t, i, idle_ctx) is None:
                continue
            fit_idle[k] = False
            if any_ctx is None:
                any_ctx = self._dynamic_context(t, False)
            if self.dynamic_failure(t, i, any_ctx) is not None:
                fit_any[k] = False

    def _apply_extended(self, t: TaskState, cand: np.ndarray, fit_idle: np.ndarray, fit_any: np.ndarray) -> None:
        ext = t.request.extended
        for k in np.flatnonzero(fit_any).tolist():
            ns = self.s.nodes[int(cand[k])]
            for name, wanted in ext.items():
                idle = ns.ext_idle.get(name, 0.0)
                if idle + _EPS < wanted:
                    fit_idle[k] = False
                if idle + ns.ext_releasing.get(name, 0.0) + _EPS < wanted:
                    fit_any[k] = False
                    break

    def _mig_fits(self, t: TaskState, i: int) -> tuple[bool, bool]:
        """(fits on idle, fits on idle+releasing) for a MIG request."""
        ns = self.s.nodes[i]
        idle_ok = all(ns.mig_idle.get(p, 0.0) + _EPS >= c for p, c in t.request.mig.items())
        any_ok = all(ns.mig_idle.get(p, 0.0) + ns.mig_releasing.get(p, 0.0) + _EPS >= c
                     for p, c in t.request.mig.items())
        return idle_ok, any_ok

    def _shared_options(self, t: TaskState, i: int) -> tuple[list[tuple[float, str | None, bool]], float, float]:
        """Candidate devices for a shared task on node i: (score, group or None=new, on idle).

        Sorted best first: gpupack = most used group first and new devices last; gpuspread the
        reverse. Returns also the task's MiB per device and accepted portion on this node."""
        s = self.s
        ns = s.nodes[i]
        mem, portion = s.shared_need(t, i)
        gmem = float(s.gpu_mem[i])
        opts: list[tuple[float, str | None, bool]] = []
        for g in sorted(ns.groups):
            grp = ns.groups[g]
            if grp.fully_releasing:
                continue
            free_any = gmem - grp.mem_active
            if free_any + _EPS < mem:
                continue
            # a group waiting for releasing capacity (pipelined tasks) can only take pipelined tasks
            on_idle = grp.n_pipelined == 0 and gmem - grp.mem_active - grp.mem_releasing + _EPS >= mem
            used = (grp.mem_active + grp.mem_releasing) / gmem
            score = (1.0 - used) if self.gpu_spread else used
            opts.append((score, g, on_idle))
        # whole devices free on idle + releasing; the idle ones first (releasing may be negative
        # when pipelined tasks already wait for it)
        total_whole = max(0, int(math.floor(s.idle[i, GPU] + s.rel[i, GPU] + _EPS)))
        if mem > gmem + _EPS:
            total_whole = 0  # more GPU memory than one device of this node has: no device can take it
        idle_whole = min(max(0, int(math.floor(s.idle[i, GPU] + _EPS))), total_whole)
        rel_whole = total_whole - idle_whole
        whole_score = 1.0 if self.gpu_spread else 0.0
        for _ in range(max(idle_whole, 0)):
            opts.append((whole_score, None, True))
        for _ in range(max(rel_whole, 0)):
            opts.append((whole_score, None, False))
        # stable sort: score descending, existing groups by name, idle markers before releasing
        opts.sort(key=lambda o: (-o[0], o[1] is None, not o[2]))
        return opts, mem, portion

    def _shared_counts(self, t: TaskState, i: int) -> tuple[int, int]:
        """How many devices of node i `_shared_options` offers a shared task, and how many of them on
        idle: the same counts without building and sorting the options (the fit test of every node
        for every fractional task; at 2,000 nodes and 7,000 fractional pods the options took minutes)."""
        s = self.s
        mem, _ = s.shared_need(t, i)
        gmem = float(s.gpu_mem[i])
        n_any = n_idle = 0
        for grp in s.nodes[i].groups.values():
            if grp.fully_releasing or gmem - grp.mem_active + _EPS < mem:
                continue
            n_any += 1
            if grp.n_pipelined == 0 and gmem - grp.mem_active - grp.mem_releasing + _EPS >= mem:
                n_idle += 1
        total_whole = max(0, int(math.floor(s.idle[i, GPU] + s.rel[i, GPU] + _EPS)))
        if mem > gmem + _EPS:
            total_whole = 0
        idle_whole = min(max(0, int(math.floor(s.idle[i, GPU] + _EPS))), total_whole)
        return n_any + total_whole, n_idle + idle_whole

    def _shared_to_count(self, t: TaskState, cand: np.ndarray, fitting: np.ndarray,
                         n: int) -> tuple[np.ndarray, np.ndarray]:
        """The positions in ``fitting`` whose node `_shared_counts` must look at for a shared task
        on ``n`` devices, and those that offer it no device at all. With the shortcuts on:
        a node with ``n`` whole devices free on idle is left out of both (its counts are at least
        ``n`` on idle and on any, whatever its groups hold), and a node with no whole device free
        and no group with room for the task (``Session.group_room``) offers none (its counts are 0).
        The same arithmetic as `_shared_counts`, for all the nodes at once."""
        if not self.fast_paths or len(fitting) == 0:
            return fitting, fitting[:0]
        s = self.s
        nodes = cand[fitting]
        idle = s.idle[nodes, GPU]
        mem = s.shared_mem(t, nodes)
        total_whole = np.maximum(0.0, np.floor(idle + s.rel[nodes, GPU] + _EPS))
        total_whole[mem > s.gpu_mem[nodes] + _EPS] = 0.0
        idle_whole = np.minimum(np.maximum(0.0, np.floor(idle + _EPS)), total_whole)
        none = (total_whole == 0.0) & (s.group_room[nodes] + _EPS < mem)
        return fitting[(idle_whole < n) & ~none], fitting[none]

    # ---- scoring ----------------------------------------------------------------------------
    def scores(self, t: TaskState, cand: np.ndarray, fit_idle: np.ndarray, extra: np.ndarray | None,
               placement_points: np.ndarray | None = None) -> np.ndarray:
        """Score sum of the plugins for each candidate node (§2.7); ``placement_points`` replaces
        the node-placement plugin's binpack/spread term (fragmentation-aware placement)."""
        s = self.s
        r = t.request
        score = np.zeros(len(cand))
        gpu_task = not r.cpu_only
        res = GPU if gpu_task else CPU
        if self.use_placement and placement_points is not None:
            score += placement_points
        elif self.use_placement:
            free = s.idle[cand, res] + s.rel[cand, res]
            cap = s.cap[cand, res]
            if r.gpu_kind == m.GPU_MIG:
                free = np.array([sum(s.nodes[i].mig_idle.values()) + sum(s.nodes[i].mig_releasing.values())
                                 for i in cand])
                cap = np.array([float(sum(s.nodes[i].spec.mig_instances.values())) for i in cand])
            has = cap > 0
            spread = self.node_gpu_spread if gpu_task else self.cpu_spread
            if spread:
                total = cap.copy()
                if gpu_task and r.gpu_kind != m.GPU_MIG:
                    total = np.array([float(s.nodes[i].spec.gpus or s.cap[i, GPU]) for i in cand])
                with np.errstate(divide="ignore", invalid="ignore"):
                    score += np.where(has & (total > 0), free / np.where(total > 0, total, 1), 0.0)
            elif has.any():
                lo, hi = free[has].min(), free[has].max()
                if hi - lo > _EPS:
                    score += np.where(has, 9.0 * (1.0 - (free - lo) / (hi - lo)), 0.0)
                else:
                    score += np.where(has, 9.0, 0.0)
        if self.use_availability:
            score += np.where(fit_idle, 1000.0, 0.0)
        if self.use_resource_type and r.cpu_only:
            no_gpu = np.array([s.cap[i, GPU] == 0 and not s.nodes[i].spec.mig_instances for i in cand])
            score += np.where(no_gpu, 10.0, 0.0)
        if self.use_sharing_order and t.shared and self.fast_paths:
            # The same test as the loop below, for all candidates at once: a group with room for the
            # task exists on node i exactly when the largest room of its groups (``Session.group_room``,
            # NO_ROOM without one that is not fully releasing) has it. The loop cost grew with the
            # candidates times their groups for every shared task (minutes for a fill of 28,000
            # fractional pods on 2,000 nodes).
            score += np.where(s.group_room[cand] + _EPS >= s.shared_mem(t, cand), 10000.0, 0.0)
        elif self.use_sharing_order and (t.shared or r.cpu_only):
            bonus = np.zeros(len(cand))
            # only the candidates holding shared groups can earn it
            with_groups = np.flatnonzero(np.isin(cand, sorted(s.grouped))) if s.grouped else cand[:0]
            for k in with_groups.tolist():
                i = int(cand[k])
                ns = s.nodes[i]
                if r.cpu_only:
                    bonus[k] = 10000.0
                    continue
                mem, _ = s.shared_need(t, i)
                gmem = float(s.gpu_mem[i])
                if any(not g.fully_releasing and gmem - g.mem_active + _EPS >= mem for g in ns.groups.values()):
                    bonus[k] = 10000.0
            score += bonus
        if extra is not None:
            score += extra
        return score

    def place(self, stmt: Statement, t: TaskState, cand: np.ndarray, pipeline_only: bool,
              extra_score: np.ndarray | None = None) -> bool:
        """Put one task on the best feasible node among ``cand``; False when none fits."""
        s = self.s
        r = t.request
        if len(cand) == 0:
            return False
        # Fast path for identical tasks placed one after another (the common burst of equal
        # pods): if no node changed since the last task of the same shape went to node i, node i
        # is still the best (its score only rose: less free room, other nodes unchanged) as long
        # as it still fits on idle, and after it the previous order still holds for the nodes
        # that did not change. Only for scores that are monotone in free room (whole-GPU
        # binpack, no topology term, no sharing bonus).
        key = None
        if (self.fast_paths and extra_score is None and cand is self.all_nodes and r.gpu_kind == m.GPU_WHOLE
                and not self.node_gpu_spread and not self.frag_aware and not t.dynamic and not t.prefers
                and not r.extended
                and not self.anti_holders):
            key = (t.shape_id, pipeline_only)
            if self._failed.get(key) == s.node_version:
                return False  # the same shape found no node and nothing changed since
            last = self._last.get(key) if t.status == m.PENDING else None
            if last is not None and last[4] == s.node_version:
                # Walk the previous order from the last choice. Nodes after it are unchanged; the
                # ones we filled only lost room, so they either keep their place, drop out, or
                # (no longer fitting on idle) move down into the releasing-only part of the
                # order, which then has to be scored again.
                nodes, fits_idle, fits_any, p, moved_down = last[0], last[1], last[2], last[3], last[5]
                v = t.vec.tolist()
                while p < len(nodes):
                    if not fits_idle[p] and moved_down:
                        break
                    if not fits_any[p]:
                        p += 1
                        continue
                    i = nodes[p]
                    idle = s.idle[i].tolist()
                    rel = s.rel[i].tolist()
                    any_now = all(idle[x] + rel[x] + _EPS >= v[x] for x in (0, 1, 2, 3))
                    idle_now = any_now and all(idle[x] + _EPS >= v[x] for x in (0, 1, 2, 3))
                    if fits_idle[p] and not idle_now:
                        moved_down = moved_down or any_now
                        p += 1
                        continue
                    if any_now:
                        self._commit_move(stmt, t, m.ALLOCATED if idle_now and not pipeline_only else m.PIPELINED,
                                          i, ())
                        self._last[key] = (nodes, fits_idle, fits_any, p, s.node_version, moved_down)
                        return True
                    p += 1
        static = self._static_mask(t)[cand]
        vec = t.vec
        cols = vec > 0
        idle = s.idle[cand]
        anyr = idle + s.rel[cand]
        if t.shared:
            cols = cols.copy()
            cols[GPU] = False
        fit_idle = (idle[:, cols] + _EPS >= vec[cols]).all(axis=1) & static
        fit_any = (anyr[:, cols] + _EPS >= vec[cols]).all(axis=1) & static
        if r.gpu_kind == m.GPU_MIG:
            for k, i in enumerate(cand):
                if fit_any[k]:
                    a, b = self._mig_fits(t, int(i))
                    fit_idle[k] = fit_idle[k] and a
                    fit_any[k] = b
        if r.extended:
            self._apply_extended(t, cand, fit_idle, fit_any)
        if t.dynamic or self.anti_holders:
            self._apply_dynamic(t, cand, fit_idle, fit_any)
        if t.shared:
            # a node fits a shared task if enough devices (groups with room + whole GPUs) exist
            n = r.gpu_devices
            to_count, none = self._shared_to_count(t, cand, np.flatnonzero(fit_any), n)
            fit_any[none] = fit_idle[none] = False
            for k in to_count.tolist():
                n_any, n_idle = self._shared_counts(t, int(cand[k]))
                fit_any[k] = n_any >= n
                fit_idle[k] = fit_idle[k] and n_idle >= n
        if not fit_any.any():
            if key is not None:
                self._failed[key] = s.node_version
            return False
        if t.prefers:
            pref = self._preferred_scores(t, cand)
            if pref is not None:
                extra_score = pref if extra_score is None else extra_score + pref
        frag = self.fragmentation_terms(t, cand, fit_any) if self.frag_aware and self.use_placement else None
        if frag is None:
            score = self.scores(t, cand, fit_idle, extra_score)
            order = np.lexsort((cand, -score))
        else:
            score = self.scores(t, cand, fit_idle, extra_score, frag[0])
            order = np.lexsort((cand, frag[1], -score))
        fits_sorted = fit_any[order]
        # only the fitting nodes, in score order (on a full cluster most nodes do not fit)
        for pos in np.flatnonzero(fits_sorted).tolist():
            k = order[pos]
            i = int(cand[k])
            if t.shared:
                if self._place_shared(stmt, t, i, pipeline_only, bool(fit_idle[k])):
                    return True
                continue
            on_idle = bool(fit_idle[k]) and not pipeline_only
            self._commit_move(stmt, t, m.ALLOCATED if on_idle else m.PIPELINED, i, ())
            if key is not None and t.status in (m.ALLOCATED, m.PIPELINED):
                self._last[key] = (cand[order].tolist(), fit_idle[order].tolist(), fits_sorted.tolist(), pos,
                                   s.node_version, False)
            return True
        return False

    # ---- fragmentation-aware placement (scheduler_core.placement) ------------------------------
    def _milli(self, mib: float, i: int) -> int:
        """MiB of one GPU of node i in milli-GPU (monotone, so "fits" is kept)."""
        return int(round(fa.MILLI * mib / float(self.s.gpu_mem[i]))) if self.s.gpu_mem[i] > 0 else 0

    def gpu_row(self, i: int) -> list[int]:
        """Node i's free milli per GPU, descending: whole GPUs free on idle + releasing resources
        (1000 each), then each shared GPU's free memory (releasing memory counts as free)."""
        s = self.s
        whole = max(0, int(math.floor(s.idle[i, GPU] + s.rel[i, GPU] + _EPS)))
        gmem = float(s.gpu_mem[i])
        row = [fa.MILLI] * whole
        for g in s.nodes[i].groups.values():
            if not g.fully_releasing:
                row.append(min(fa.MILLI, max(0, self._milli(gmem - g.mem_active, i))))
        row.sort(reverse=True)
        return row

    def _task_milli(self, t: TaskState, i: int) -> tuple[int, int]:
        """(share per GPU in milli, GPUs) of a GPU task on node i; a shared pod on several devices
        is scored as one of them."""
        r = t.request
        if t.shared:
            mem, _ = self.s.shared_need(t, i)
            return max(1, min(fa.MILLI, self._milli(mem, i))), 1
        return fa.MILLI, int(round(r.gpus))

    def fragmentation_terms(self, t: TaskState, cand: np.ndarray, fit_any: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Node-placement points (FGD score 0..100 scaled to binpack's 0..9) and the tie-break key
        (lower first) per candidate, for a whole-GPU, fractional or GPU-memory task; None for
        other tasks (CPU-only, MIG), which keep binpack."""
        r = t.request
        if r.cpu_only or r.gpu_kind not in (m.GPU_WHOLE, m.GPU_FRACTION, m.GPU_MEMORY) or self.typical is None:
            return None
        s = self.s
        points = np.zeros(len(cand))
        tie = np.full(len(cand), np.inf)
        ks = np.flatnonzero(fit_any)
        if ks.size == 0:
            return points, tie
        nodes = [int(cand[k]) for k in ks.tolist()]
        rows = [self.gpu_row(i) for i in nodes]
        width = max(1, max(len(x) for x in rows))
        gpu = np.zeros((len(nodes), width), dtype=np.int64)
        for k, x in enumerate(rows):
            gpu[k, :len(x)] = x
        cpu_free = np.array([s.idle[i, CPU] + s.rel[i, CPU] for i in nodes])
        model_idx = np.zeros(len(nodes), dtype=np.int64)  # typical pods carry no GPU model here
        before = np.empty(len(nodes))
        missing = []
        for k, x in enumerate(rows):
            v = self._frag_before.get(tuple(x))
            if v is None:
                missing.append(k)
            else:
                before[k] = v
        if missing:
            idx = np.array(missing)
            # the typical pods ask no CPU, so the fragment depends on the GPU row alone
            vals = fa.node_fragmentation(cpu_free[idx], gpu[idx], model_idx[idx], self.typical)
            for k, v in zip(missing, vals.tolist()):
                before[k] = v
                self._frag_before[tuple(rows[k])] = v
        shapes = [self._task_milli(t, i) for i in nodes]
        delta = np.empty(len(nodes))
        chosen = np.empty(len(nodes))
        for milli, num in sorted(set(shapes)):
            sel = np.array([x == (milli, num) for x in shapes])
            d, c = fa.placement_deltas(cpu_free[sel], gpu[sel], model_idx[sel], r.cpu_millis, milli, num,
                                       self.typical, before[sel])
            delta[sel], chosen[sel] = d, c
        milli_req = np.array([x[0] for x in shapes], dtype=np.float64)
        gpu_req = np.array([x[0] * x[1] for x in shapes], dtype=np.float64)
        gpu_scale = float(max(1.0, s.cap[:, GPU].max() if len(s.nodes) else 1.0)) * fa.MILLI
        cpu_scale = float(max(1.0, s.cap[:, CPU].max() if len(s.nodes) else 1.0))
        key = fa.tie_break(cpu_free - r.cpu_millis, gpu.sum(axis=1) - gpu_req, chosen - milli_req,
                           np.zeros(len(nodes)), fractional=t.shared, spread=False,
                           cpu_scale=cpu_scale, gpu_scale=gpu_scale)
        points[ks] = 9.0 * fa.fgd_score(delta) / 100.0
        tie[ks] = key
        return points, tie

    def _fragmentation_device_order(self, t: TaskState, i: int, opts: list[tuple[float, str | None, bool]],
                                    mem: float) -> list[tuple[float, str | None, bool]]:
        """The devices for a shared task on node i, the one that grows the node's fragment least
        first, then the fullest (best fit); otherwise in ``_shared_options``' order (existing GPU
        groups before new devices, idle before releasing)."""
        s = self.s
        gmem = float(s.gpu_mem[i])
        row = self.gpu_row(i)
        if not row or self.typical is None:
            return opts
        milli, _ = self._task_milli(t, i)
        gpu = np.array([row], dtype=np.int64)
        cpu = np.array([s.idle[i, CPU] + s.rel[i, CPU]])
        model_idx = np.zeros(1, dtype=np.int64)
        before = fa.node_fragmentation(cpu, gpu, model_idx, self.typical)
        deltas = fa.fractional_deltas(cpu, gpu, model_idx, t.request.cpu_millis, milli, self.typical, before)[0]
        by_value = {v: float(d) for v, d in zip(row, deltas.tolist()) if d != math.inf}
        groups = s.nodes[i].groups

        def value(o: tuple[float, str | None, bool]) -> int:
            if o[1] is None:
                return fa.MILLI
            return min(fa.MILLI, max(0, self._milli(gmem - groups[o[1]].mem_active, i)))

        return sorted(opts, key=lambda o: (by_value.get(value(o), math.inf), value(o)))

    def _commit_move(self, stmt: Statement, t: TaskState, status: str, i: int, groups: tuple[str, ...]) -> None:
        # pipelining an evicted task back onto its own node (and GPU groups) cancels the eviction
        if status == m.PIPELINED and t.status == m.RELEASING and t.node == i and t.orig_status != m.RELEASING \
                and (not groups or tuple(groups) == tuple(t.groups)):
            stmt.move(t, t.pre_evict or m.RUNNING, i, t.groups)
            return
        if t.status == m.RELEASING:
            _leave_ghost(stmt, t)
        stmt.move(t, status, i, groups)

    def _place_shared(self, stmt: Statement, t: TaskState, i: int, pipeline_only: bool, node_idle: bool) -> bool:
        s = self.s
        n = t.request.gpu_devices
        opts, mem, portion = self._shared_options(t, i)
        if len(opts) < n:
            return False
        if self.frag_aware:
            opts = self._fragmentation_device_order(t, i, opts, mem)
        chosen = opts[:n]
        new_groups = sum(1 for o in chosen if o[1] is None)
        if self.predicates and new_groups and s.idle[i, PODS] + s.rel[i, PODS] + _EPS < 1 + new_groups:
            # a new GPU group needs a pod slot for its reservation pod
            return False
        on_idle = node_idle and all(o[2] for o in chosen) and not pipeline_only
        # un-evict: an evicted shared task going back to its own groups
        if t.status == m.RELEASING and t.node == i and t.orig_status != m.RELEASING and not on_idle:
            own = set(t.groups)
            if all(o[1] in own for o in chosen if o[1] is not None) and new_groups == 0 and len(own) == n:
                stmt.move(t, t.pre_evict or m.RUNNING, i, t.groups)
                return True
        groups = tuple(o[1] if o[1] is not None else s.new_group_name(t, k) for k, o in enumerate(chosen))
        if t.status == m.RELEASING:
            _leave_ghost(stmt, t)
        stmt.place_shared(t, m.ALLOCATED if on_idle else m.PIPELINED, i, groups, mem, portion)
        return True


def _leave_ghost(stmt: Statement, t: TaskState) -> None:
    """A victim re-placed on another node: its old pod keeps releasing where it was, the task
    itself becomes a new (pipelined) pod."""
    s = stmt.session
    ghost = s.make_ghost(t)
    node, groups = t.node, t.groups
    stmt.move(t, m.PENDING, None, ())
    stmt.move(ghost, m.RELEASING, node, groups)


# --------------------------------------------------------------------------------------------
# Topology (§6.1)


def _domain_of(node: m.NodeSpec, levels: tuple[str, ...], depth: int) -> tuple[str, ...] | None:
    out = []
    for lv in levels[: depth + 1]:
        v = node.labels.get(lv)
        if v is None:
            return None
        out.append(v)
    return tuple(out)


def constraint_levels(s: Session, tc: m.TopologyConstraint,
                      member: str = "") -> tuple[m.TopologySpec, str | None, str | None] | m.Reason:
    """The topology a constraint names and the node label keys of its required and preferred
    levels, each named by its node label or its alias (``TopologySpec.level_label``); or, when the
    topology or a level named does not exist, the reason the constrained pods stay pending.

    KAI never drops such a constraint: a topology it does not have is a fit error, and a level the
    topology does not have, required or preferred alike, fails the placement of the (sub)group
    (``plugins/topology``: ``subSetNodesFn``, ``calculateRelevantDomainLevels``)."""
    who = f"sub-group {member}" if member and member != "default" else "workload"
    topo = next((x for x in s.snapshot.topologies if x.name == tc.topology), None)
    if topo is None:
        known = ", ".join(sorted(x.name for x in s.snapshot.topologies)) or "none"
        return m.Reason(reasons.TOPOLOGY_UNKNOWN,
                        f"{who}: topology constraint names topology {tc.topology!r}, which does not exist "
                        f"(topologies: {known})",
                        {"topology": tc.topology, "subgroup": member})
    labels: list[str | None] = []
    for placement, level in (("required", tc.required_level), ("preferred", tc.preferred_level)):
        label = topo.level_label(level) if level else None
        if level and label is None:
            return m.Reason(reasons.TOPOLOGY_UNKNOWN,
                            f"{who}: {level!r} is its {placement} topology level, but topology {topo.name} has "
                            f"no level of that name or alias (levels: {topo.describe_levels()})",
                            {"topology": topo.name, "level": level, "placement": placement, "subgroup": member,
                             "levels": list(topo.levels), "aliases": [a for a in topo.aliases if a]})
        labels.append(label)
    return topo, labels[0], labels[1]


def topology_subsets(s: Session, tasks: list[TaskState], tc: m.TopologyConstraint | None,
                     cand: np.ndarray, member: str = "",
                     ) -> tuple[list[np.ndarray], np.ndarray | None, m.Reason | None]:
    """Ordered node sets to try for a constrained batch, plus preferred-level scores; no set and
    the reason when the constraint cannot be honoured (``constraint_levels``)."""
    if tc is None:
        return [cand], None, None
    got = constraint_levels(s, tc, member)
    if isinstance(got, m.Reason):
        return [], None, got
    topo, required, preferred = got
    levels = topo.levels
    req_d = levels.index(required) if required is not None else None
    pref_d = levels.index(preferred) if preferred is not None else None
    if pref_d is not None:
        deepest = pref_d
    elif req_d is not None:
        deepest = req_d
    else:
        return [cand], None, None
    inside = [int(i) for i in cand if _domain_of(s.nodes[int(i)].spec, levels, len(levels) - 1) is not None]
    total_req = np.zeros(4)
    for t in tasks:
        total_req += t.vec
        if t.shared:
            total_req[GPU] += t.portion or t.request.gpu_fraction or 0.0

    def ratio(nodes: list[int]) -> float:
        free = (s.idle[nodes] + s.rel[nodes]).sum(axis=0) if nodes else np.zeros(4)
        worst = 0.0
        for r in range(4):
            if total_req[r] <= 0:
                continue
            worst = max(worst, total_req[r] / free[r] if free[r] > 0 else 1000.0)
        return worst

    # the domain tree: each domain's children sorted by least free room first (ratio descending,
    # then id); candidates at one level are listed in that tree order (pack top-most first)
    by_depth: list[dict[Key, list[int]]] = []
    for d in range(len(levels)):
        doms: dict[Key, list[int]] = {}
        for i in inside:
            dom = _domain_of(s.nodes[i].spec, levels, d)
            if dom is not None:  # always: a node inside has every level
                doms.setdefault(dom, []).append(i)
        by_depth.append(doms)
    ratios = {key: ratio(nodes) for doms in by_depth for key, nodes in doms.items()}
    rank: dict[Key, int] = {}
    for doms in by_depth:
        sibs: dict[Key, list[Key]] = {}
        for key in doms:
            sibs.setdefault(key[:-1], []).append(key)
        for group in sibs.values():
            group.sort(key=lambda k: (-ratios[k], k))
            for r_, k in enumerate(group):
                rank[k] = r_

    def tree_pos(key: Key) -> Key:
        return tuple(rank[key[: d + 1]] for d in range(len(key)))

    top = req_d if req_d is not None else -1
    subsets: list[tuple[int, Key, list[int]]] = []
    for d in range(deepest, top - 1, -1):
        doms = by_depth[d] if d >= 0 else {(): inside}
        for key, nodes in doms.items():
            rt = ratios.get(key, ratio(nodes)) if d >= 0 else ratio(nodes)
            if rt <= 1.0 + _EPS:
                subsets.append((-d, tree_pos(key), nodes))
    subsets.sort(key=lambda x: (x[0], x[1]))
    extra = None
    if pref_d is not None:
        order = sorted(by_depth[pref_d].items(), key=lambda kv: tree_pos(kv[0]))
        extra_map: dict[int, float] = {}
        n = len(order)
        for pos, (_, nodes) in enumerate(order):
            for i in nodes:
                extra_map[i] = math.floor(10 * (pos + 1) / n) * 100000.0
        extra = np.array([extra_map.get(int(i), 0.0) for i in cand])
    if not subsets:
        lvl = tc.required_level or tc.preferred_level
        return [], extra, m.Reason(
            reasons.TOPOLOGY_UNSATISFIED,
            f"topology {tc.topology}, requirement {lvl} couldn't be satisfied: no {lvl} domain has room for "
            f"{len(tasks)} pods",
            {"topology": tc.topology, "level": lvl, "pods": len(tasks)},
        )
    return [np.array(sorted(x[2]), dtype=int) for x in subsets], extra, None


def _member_tasks(x: PodSet | SubGroupSet, tasks: list[TaskState]) -> list[TaskState]:
    if isinstance(x, PodSet):
        return [t for t in tasks if t.pod_set is x]
    out: list[TaskState] = []
    for y in x.members:
        out.extend(_member_tasks(y, tasks))
    return out


def _place_member(s: Session, placer: Placer, stmt: Statement, x: PodSet | SubGroupSet, tasks: list[TaskState],
                  cand: np.ndarray, extra: np.ndarray | None, pipeline_only: bool,
                  failure: list[TaskState | m.Reason]) -> bool:
    """Place the tasks of one member of the gang tree inside ``cand`` (§2.6 step 3): a member with
    a topology constraint tries its ordered node sets one by one (checkpoint / rollback); its
    children are placed recursively inside the chosen set, each with its own constraint."""
    mine = _member_tasks(x, tasks)
    if not mine:
        return True
    subsets: list[np.ndarray] = [cand]
    sub_extra_full = extra
    if x.topology is not None:
        subsets, own_extra, problem = topology_subsets(s, mine, x.topology, cand, x.name)
        if problem is not None:
            failure.append(problem)
            return False
        if own_extra is not None:
            sub_extra_full = own_extra
    pos = {int(c): k for k, c in enumerate(cand)} if sub_extra_full is not None else {}
    for subset in subsets:
        sub_extra = None if sub_extra_full is None else np.array([sub_extra_full[pos[int(i)]] for i in subset])
        cp = stmt.checkpoint()
        ok = True
        if isinstance(x, PodSet):
            for t in mine:
                if not placer.place(stmt, t, subset, pipeline_only, sub_extra):
                    failure.append(t)
                    ok = False
                    break
        else:
            for y in sorted(x.members, key=_member_order_key):
                if not _place_member(s, placer, stmt, y, mine, subset, sub_extra, pipeline_only, failure):
                    ok = False
                    break
        if ok:
            return True
        stmt.rollback(cp)
    return False


# --------------------------------------------------------------------------------------------
# Allocating one job (§2.6)


def should_pipeline_job(job: JobState) -> bool:
    """A pod set with a pipelined task and fewer than its minimum truly allocated (§2.6 step 5)."""
    for ps in job.pod_sets.values():
        if ps.allocated < ps.min_available and any(t.status == m.PIPELINED for t in ps.tasks):
            return True
    return False


def allocate_job(s: Session, placer: Placer, stmt: Statement, job: JobState, pipeline_only: bool,
                 simulation: bool = False, record: bool = True) -> bool:
    """Place the job's next batch, all or nothing. On failure the statement is rolled back to
    where it was and (when ``record``) the job's pending reason is set."""
    tasks = tasks_to_allocate(job, simulation)
    if not tasks:
        return False
    problem = queue_capacity_problem(s, job, tasks)
    if problem is not None:
        if record:
            s.pending_reasons[job.uid] = problem
        return False
    cand = placer.all_nodes
    cp = stmt.checkpoint()
    failure: list[TaskState | m.Reason] = []
    if job.has_topology:
        ok = _place_member(s, placer, stmt, job.root, tasks, cand, None, pipeline_only, failure)
    else:
        ok = True
        for t in tasks:
            if not placer.place(stmt, t, cand, pipeline_only):
                ok = False
                failure.append(t)
                break
    if ok:
        if should_pipeline_job(job):
            for t in job.tasks:
                if t.status == m.ALLOCATED:
                    if t.shared:
                        stmt.place_shared(t, m.PIPELINED, t.node, t.groups, t.mem_per_device, t.portion)  # type: ignore[arg-type]  # an allocated task has its node
                    else:
                        stmt.move(t, m.PIPELINED, t.node, t.groups)
        return True
    failed = next((f for f in failure if isinstance(f, TaskState)), None)
    # predicate failures are explained on the state the failed task saw (the batch's earlier
    # pods in place: their host ports and anti-affinity count)
    summary = predicate_failure_reason(s, placer, tasks, failed) if record and failed is not None else None
    stmt.rollback(cp)
    topo_problem = next((f for f in failure if isinstance(f, m.Reason)), None)
    if record and failed is None and topo_problem is not None:
        s.pending_reasons[job.uid] = topo_problem
    if record and failed is not None:
        s.pending_reasons[job.uid] = summary or fit_failure_reason(s, job, tasks, failed)
    _drop_node_hints(tasks)
    return False


def _drop_node_hints(tasks: list[TaskState]) -> None:
    """After a failed placement attempt, a pending pod no longer keeps the node its spec named
    (KAI clears it when the attempt is rolled back; ``close_session`` reads ``was_cleared``)."""
    for t in tasks:
        if t.status == m.PENDING and t.spec.node is not None and not t.was_cleared:
            t.was_cleared = True
            t.job.version += 1  # a change of the task's state (``JobState.version``)


def node_failures(s: Session, placer: Placer, t: TaskState) -> list[str | None]:
    """Per node, why ``t`` cannot go there now (KAI's / Kubernetes' wording), None if it could:
    the static predicates first, then the room left (idle + releasing), then host ports and pod
    affinity."""
    static = placer.static_reasons(t)
    r = t.request
    free = s.idle + s.rel
    vec = t.vec
    out: list[str | None] = []
    ctx = placer._dynamic_context(t, False) if (t.dynamic or placer.anti_holders) else None
    for i, why in enumerate(static):
        if why is None:
            row = free[i]
            if row[PODS] + _EPS < 1:
                why = pr.POD_NUMBER
            elif not t.shared and row[GPU] + _EPS < vec[GPU]:
                why = pr.insufficient("GPUs")
            elif row[CPU] + _EPS < vec[CPU]:
                why = pr.insufficient("CPU cores")
            elif row[MEM] + _EPS < vec[MEM]:
                why = pr.insufficient("memory")
            elif r.gpu_kind == m.GPU_MIG and not placer._mig_fits(t, i)[1]:
                ns = s.nodes[i]
                short = sorted(p for p, c in r.mig.items()
                               if ns.mig_idle.get(p, 0.0) + ns.mig_releasing.get(p, 0.0) + _EPS < c)
                why = pr.insufficient_mig(short[0] if short else "")
            elif t.shared and len(placer._shared_options(t, i)[0]) < r.gpu_devices:
                why = pr.insufficient("GPU memory")
            elif t.shared and placer.predicates and row[PODS] + _EPS < 1 + sum(
                    1 for o in placer._shared_options(t, i)[0][:r.gpu_devices] if o[1] is None):
                why = pr.POD_NUMBER  # a new GPU group needs a second pod slot, for its reservation pod
            else:
                ns = s.nodes[i]
                short = sorted(p for p, c in r.extended.items()
                               if ns.ext_idle.get(p, 0.0) + ns.ext_releasing.get(p, 0.0) + _EPS < c)
                if short:
                    why = pr.insufficient(short[0])
                elif ctx is not None:
                    why = placer.dynamic_failure(t, i, ctx)
        out.append(why)
    return out


def nodes_summary(reasons: list[str | None]) -> str:
    """KAI's fit-error histogram: ``0/3 nodes are available: 1 node(s) had untolerated taint
    {gpu: true}, 2 node(s) didn't have enough resources: GPUs.`` (reasons sorted as text)."""
    counts: dict[str, int] = {}
    for why in reasons:
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
    free = sum(1 for why in reasons if why is None)
    parts = sorted(f"{c} {why}" for why, c in counts.items())
    return f"{free}/{len(reasons)} nodes are available" + (": " + ", ".join(parts) if parts else "") + "."


def predicate_failure_reason(s: Session, placer: Placer, tasks: list[TaskState], failed: TaskState) -> m.Reason | None:
    """KAI's per-node histogram for a pod that some predicate (taints, affinity, cordon, host
    ports, extended resources, ...) keeps off some nodes: ``task p: 0/2 nodes are available: 1
    node(s) had untolerated taint {k: v}, 1 ...``, with the counts in ``details["nodes"]``; code
    ``no-node-matches`` when no node passes the static predicates at all. None when only room is
    short (``fit_failure_reason`` explains that)."""
    r = failed.request
    slot_short = failed.shared and placer.predicates and bool(((s.idle[:, PODS] + s.rel[:, PODS]) < 2 - _EPS).any())
    if not len(s.nodes) or (placer._static_mask(failed).all() and not failed.dynamic and not placer.anti_holders
                            and not r.extended and not slot_short):
        return None
    n = len(tasks)
    failures = node_failures(s, placer, failed)
    static = placer.static_reasons(failed)
    counts: dict[str, int] = {}
    for why in failures:
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
    who = f"task {failed.name}" if n == 1 else f"task {failed.name} of a batch of {n} pods"
    code = reasons.NO_NODE_MATCHES if all(x is not None for x in static) else reasons.NO_NODE_FITS
    return m.Reason(code, f"{who}: {nodes_summary(failures)}",
                    {"pods": n, "task": failed.name, "nodes_total": len(failures),
                     "nodes_available": sum(1 for x in failures if x is None), "nodes": dict(sorted(counts.items()))})


def fit_failure_reason(s: Session, job: JobState, tasks: list[TaskState], failed: TaskState) -> m.Reason:
    """A sentence with the numbers for a batch that found no room."""
    r = failed.request
    n = len(tasks)
    if r.gpu_kind == m.GPU_WHOLE and r.gpus > 0:
        per = r.gpus
        free = s.idle[:, GPU] + s.rel[:, GPU]
        fitting = int((free + _EPS >= per).sum())
        if n > 1:
            msg = f"gang of {n} × {amount(GPU, per)}: only {fitting} nodes have {amount(GPU, per)} free"
        else:
            msg = f"{amount(GPU, per)} requested: no node has {amount(GPU, per)} free ({fitting} nodes fit)"
        return m.Reason(reasons.NO_NODE_FITS, msg, {"pods": n, "gpus_per_pod": per, "nodes_with_room": fitting})
    if failed.shared:
        what = f"{r.gpu_fraction:.2f} of a GPU" if r.gpu_kind == m.GPU_FRACTION else f"{r.gpu_memory_mib} MiB of GPU memory"
        return m.Reason(reasons.NO_NODE_FITS, f"{n} pod(s) asking {what} each: no node has a device with room",
                        {"pods": n})
    if r.gpu_kind == m.GPU_MIG:
        return m.Reason(reasons.NO_NODE_FITS, f"{n} pod(s) asking MIG {dict(r.mig)}: no node has these instances free",
                        {"pods": n, "mig": dict(r.mig)})
    return m.Reason(reasons.NO_NODE_FITS,
                    f"{n} pod(s) of {amount(0, r.cpu_millis)} and {amount(1, r.memory_bytes)}: "
                    f"no node has room for task {failed.name}", {"pods": n})


# --------------------------------------------------------------------------------------------
# The allocate action (§2.9)


def run_allocate(s: Session, placer: Placer) -> None:
    """Allocate pending jobs in queue/job order; commit each success, re-queue elastic jobs.

    Shortcut (``CycleConfig.shortcuts``, exact): once no job left in the order can be placed,
    the rest of the walk only writes pending reasons, so it is replaced by ``_fail_rest``. "Can
    not be placed" is proven by whole GPUs alone (``_GpuNeeds``): every pending pod of the job
    asks for more than any node has free (idle + releasing), or its batch for more than all nodes
    have together. Placing pods only takes room, so the proof holds for the rest of the walk, and
    a failed attempt changes nothing another attempt reads, so the order of the remaining
    attempts does not matter."""
    eligible = []
    needs = _GpuNeeds(s) if s.config.shortcuts else None
    depth = s.config.queue_depth(m.ALLOCATE)
    counted = needs.pushed if needs is not None and depth is None else None
    for j in s.jobs:  # valid, with pods to place, ready and not being deleted; a reason for those not ready
        if j.n_pending and j.valid:  # n_pending: has_pending()
            if not j.ready():
                s.pending_reasons[j.uid] = m.Reason(
                    reasons.NOT_READY, f"job is not ready for scheduling: fewer pods exist than its gang minimum "
                    f"({j.root.need} member(s) required)", {})
            elif not j.spec.deleting:
                eligible.append(j)
                if counted is not None:
                    counted(j)
    if depth is not None:  # KAI's queueDepthPerAction: the rest of each queue waits for a later cycle
        eligible, cut = within_queue_depth(eligible, depth)
        for j in cut:
            s.pending_reasons[j.uid] = m.Reason(
                reasons.NOT_ATTEMPTED, f"not tried in this cycle: allocate tries at most {depth} job(s) of each "
                f"queue (queueDepthPerAction), and {j.queue!r} has more ahead of this one",
                {"action": m.ALLOCATE, "queue_depth": depth})
        if needs is not None:
            for j in eligible:
                needs.pushed(j)
    # only the popped job's queues change between pops here (see JobsOrder)
    order = JobsOrder(s, eligible, local_changes=True)
    check = True  # at the start and after each failed attempt (successes do not need the proof)
    tried, try_order = s.tried, s.try_order
    while True:
        if check and needs is not None and needs.none_fits():
            # the walk's order of the jobs left: every attempt fails and gives back what it took,
            # so the order drained without attempts is the order the walk would have tried them in
            rest = order.drain()
            for left in rest:
                if left.uid not in tried:
                    tried.add(left.uid)
                    try_order.append((left.uid, left.queue))
            _fail_rest(s, placer, rest, needs.free()[0])
            break
        check = False
        job = order.pop()
        if job is None:
            break
        if job.uid not in tried:  # the first try of a job is its place in the order (a job pushed back keeps it)
            tried.add(job.uid)
            try_order.append((job.uid, job.queue))
        if needs is not None:
            needs.popped(job)
        stmt = Statement(s)
        had_alloc = job.allocated_count() > 0
        if allocate_job(s, placer, stmt, job, pipeline_only=False):
            delta = s.statement_delta(stmt)
            over = s.cap_problem(delta)
            if over is not None:
                stmt.discard()
                s.pending_reasons[job.uid] = over
                continue
            s.add_counts(delta)
            pipelined = False
            for t in stmt.commit():
                if t.status == m.PIPELINED:
                    s.pipeline_actions[t.index] = m.ALLOCATE
                    pipelined = True
            if not had_alloc and not pipelined and job.allocated_count() > 0:
                job.last_start = s.now
                s.reads_clock()  # the result reports this start time
            s.pending_reasons.pop(job.uid, None)
            if job.has_pending() and tasks_to_allocate(job):
                order.push(job)
                if needs is not None:
                    needs.pushed(job)
        else:
            stmt.discard()
            check = True


class _GpuNeeds:
    """What the jobs left in an allocation order ask for in whole GPUs, counted per kind: (the
    fewest one pending pod asks for, what the next batch asks for in all), 0 where some pod
    asks for none or for a share of one (such a figure proves nothing); and the free whole GPUs
    (idle + releasing, as placement counts them) on the freest node and on all nodes.

    A job is certain to fail while its smallest pod asks for more than the freest node has, or
    its batch for more than all nodes have: a pod takes its GPUs from one node's free count,
    which never goes below what it took (free counts are whole numbers)."""

    __slots__ = ("s", "count", "by_shape", "_free", "ones")

    def __init__(self, s: Session) -> None:
        """Empty: the jobs of the order are counted in as they are pushed (``pushed``)."""
        self.s = s
        self.count: dict[tuple[float, float], int] = {}
        self.by_shape: dict[int, float] = {}
        self._free: tuple[int, float, float] = (-1, 0.0, 0.0)  # (node version, freest node, all nodes)
        self.ones: dict[int, tuple[float, float]] = {}  # a pending one-pod job's figures, per pod shape

    def _gpus(self, t: TaskState) -> float:
        got = self.by_shape.get(t.shape_id)
        if got is None:
            r = t.request
            got = self.by_shape[t.shape_id] = float(r.gpus) if r.gpu_kind == m.GPU_WHOLE and r.gpus > 0 else 0.0
        return got

    def need(self, job: JobState) -> tuple[float, float]:
        if job.one_shape >= 0:  # the common job of one pod: its batch is that pod or nothing
            if not job.n_pending:
                return _NO_NEED
            got = self.ones.get(job.one_shape)
            if got is None:
                g = self._gpus(job.tasks[0])
                got = self.ones[job.one_shape] = (g, g)
            return got if tasks_to_allocate(job) else (got[0], 0.0)
        least = math.inf
        for t in job.tasks:
            if t.status == m.PENDING:
                g = self._gpus(t)
                if g < least:
                    least = g
        batch = 0.0
        for t in tasks_to_allocate(job):
            g = self._gpus(t)
            if g == 0.0:
                batch = 0.0
                break
            batch += g
        return (0.0 if least == math.inf else least, batch)

    def pushed(self, job: JobState) -> None:
        n = self.need(job)
        self.count[n] = self.count.get(n, 0) + 1

    def popped(self, job: JobState) -> None:
        # the figures a job was counted with: its pending pods have not changed since it was pushed
        n = self.need(job)
        left = self.count[n] - 1
        if left:
            self.count[n] = left
        else:
            del self.count[n]

    def free(self) -> tuple[float, float]:
        """(freest node, all nodes) in whole GPUs, read again when node usage has changed. A node's
        count can be below 0 (a shared device over a full node): it adds nothing to all nodes."""
        s = self.s
        at, most, total = self._free
        if at != s.node_version:
            free = s.idle[:, GPU] + s.rel[:, GPU]
            most = float(free.max()) if len(s.nodes) else -math.inf
            total = float(np.maximum(free, 0.0).sum())
            self._free = (s.node_version, most, total)
        return most, total

    def none_fits(self) -> bool:
        if not self.count:
            return False
        most, total = self.free()
        for least, batch in self.count:
            if not ((least > 0 and most + _EPS < least) or (batch > 0 and total + 1e-6 < batch)):
                return False
        return True


_NO_NEED = (0.0, 0.0)


def _fail_rest(s: Session, placer: Placer, rest: list[JobState], most: float) -> None:
    """Write what the attempts of every job in ``rest`` would write, knowing that each of
    them fails (``run_allocate``'s shortcut). An attempt whose outcome cannot name a pod (the
    queue's limit or quota, or "no node has N GPUs free" with every node passing the job's static
    predicates) is computed once per (queue, preemptible, pod shapes); any other runs as the
    walk would run it."""
    # per (queue, preemptible, pod shapes): (the reason, whether node hints are dropped, whether
    # the attempt must run instead: a pod shape some node's static predicates reject or that is
    # checked at each placement, or a batch whose pods are not alike)
    same: dict[Key, tuple[m.Reason | None, bool, bool]] = {}
    stmt = Statement(s)
    anti = bool(placer.anti_holders)
    reasons_of = s.pending_reasons
    for job in rest:
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue
        got = None
        if not (job.has_topology or anti):
            one = job.one_shape >= 0  # a one-pod job's batch is its pod
            key = (job.queue, job.preemptible, job.one_shape) if one else (
                job.queue, job.preemptible, tuple(t.shape_id for t in tasks))
            got = same.get(key)
            if got is None:
                first = tasks[0]
                # the pod that fails: the first one when it fits nowhere, else (a batch too
                # large for all free GPUs together) one the walk finds, alike when all are alike
                if not (placer._static_mask(first).all() and not first.dynamic and not first.request.extended
                        and (one or first.request.gpus > most + _EPS
                             or all(t.shape_id == first.shape_id for t in tasks))):
                    got = same[key] = (None, False, True)
                else:
                    # as allocate_job: the queue's figures first (nothing is tried), then the
                    # room (explained for a pod like the failed one, after the rollback)
                    over = queue_capacity_problem(s, job, tasks)
                    got = same[key] = ((over, False, False) if over is not None
                                       else (fit_failure_reason(s, job, tasks, first), True, False))
        if got is None or got[2]:
            allocate_job(s, placer, stmt, job, pipeline_only=False)
            stmt.discard()
            continue
        reasons_of[job.uid] = got[0]  # type: ignore[assignment]  # set whenever got[2] is False
        if got[1] and (len(tasks) > 1 or tasks[0].spec.node is not None):  # a pod without a node hint has none to drop
            _drop_node_hints(tasks)


def job_batch_request(job: JobState) -> list[float]:
    return batch_request(tasks_to_allocate(job))


__all__ = [
    "Placer", "allocate_job", "run_allocate", "queue_capacity_problem", "should_pipeline_job",
    "constraint_levels", "topology_subsets", "job_batch_request",
]
