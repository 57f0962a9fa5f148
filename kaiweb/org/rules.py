"""The org layer's rules, on plain values (no database): KRM's, restated.

* which queues departments and projects get, named, parented and labelled (`derive_queues`);
* which node pool a node belongs to (`pool_of`) and a pool's phase (`pool_phase`);
* which node pools a workload may go to, in order (`candidate_pools`), those it may be charged to
  (`charged_candidates`), the one it goes to now (`choose_pool`) and where it moves when its pool cannot
  schedule it (`next_pool`); which pool labels put an object in (`labelled_pool`).

The services apply them to the rows and the Kubernetes path to the cluster's objects: one place per rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kaiweb.org.choices import (
    ACCEPTING_PHASES,
    DEFAULT_POOL,
    DEFAULT_QUEUE_PRIORITY,
    DEPARTMENT_LABEL,
    MAX_QUEUE_NAME,
    NODE_POOL_LABEL,
    PROJECT_ID_LABEL,
    PROJECT_LABEL,
    OwnerKind,
    PoolPhase,
)

RESOURCE_NAMES = ("gpu", "cpu", "memory")


@dataclass(frozen=True, slots=True)
class Amounts:
    """One resource of a queue entry, in KRM's units (GPUs, millicores, MB). Every field defaults to 0,
    as in KRM: a limit of 0 is a ceiling of zero; -1 is no ceiling."""

    deserved: float = 0.0
    limit: float = 0.0
    over_quota_weight: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One entry of a department's or project's queues: the quota of one owner in one node pool."""

    pool: str
    name: str = ""
    priority: int = DEFAULT_QUEUE_PRIORITY
    gpu: Amounts = Amounts()
    cpu: Amounts = Amounts()
    memory: Amounts = Amounts()


@dataclass(frozen=True, slots=True)
class OwnerSpec:
    """A department or a project as the rules see it."""

    kind: str
    name: str
    queues: tuple[QueueEntry, ...] = ()
    department: str = ""  # a project's parent
    uid: str = ""  # a project's id, put on its queues' labels


@dataclass(frozen=True, slots=True)
class DerivedQueue:
    """A queue an owner's entry gives: its name, its parent (the department's queue of the same pool, for
    a project), its labels and its numbers."""

    name: str
    owner_kind: str
    owner_name: str
    pool: str
    parent: str | None
    priority: int
    gpu: Amounts
    cpu: Amounts
    memory: Amounts
    labels: dict[str, str] = field(default_factory=dict)


def derived_queue_name(owner: str, pool: str) -> str:
    """KRM's name for an owner's queue when the entry names none: ``<owner>-<pool>``, or ``<owner>`` for
    the default pool, cut to 63 characters."""
    name = owner if pool == DEFAULT_POOL else f"{owner}-{pool}"
    return name[:MAX_QUEUE_NAME].rstrip("-.")


def suffixed_name(name: str, kind: str, owner: str, pool: str) -> str:
    """A taken name with a short suffix. KRM's suffix is random; this one is a hash of the owner and pool,
    so the same specs give the same names (the derivation is deterministic)."""
    digest = hashlib.sha256(f"{kind}/{owner}/{pool}".encode()).hexdigest()[:5]
    return f"{name[:MAX_QUEUE_NAME - 6].rstrip('-.')}-{digest}"


def derive_queues(owners: Iterable[OwnerSpec], held: Mapping[str, tuple[str, str] | None]) -> list[DerivedQueue]:
    """Every queue the owners' entries give. Departments first, then projects, each by name.

    `held` is the queues that exist and who owns them: ``(kind, owner name)``, or None for a queue no
    owner made (a hand-made queue, left alone as with KRM's ``allowExternalQueues``). An entry whose name
    is held by another owner or by a hand-made queue, or given to an earlier entry, gets a suffix."""
    ordered = sorted(owners, key=lambda o: (o.kind != OwnerKind.DEPARTMENT, o.name))
    given: dict[str, tuple[str, str]] = {}
    result: list[DerivedQueue] = []
    department_queue: dict[tuple[str, str], str] = {}
    for owner in ordered:
        me = (owner.kind, owner.name)
        for entry in sorted(owner.queues, key=lambda e: e.pool):
            name = entry.name or derived_queue_name(owner.name, entry.pool)
            holder = given.get(name, held.get(name, me) if name in held else me)
            if holder != me:
                name = suffixed_name(name, owner.kind, owner.name, entry.pool)
            given[name] = me
            labels: dict[str, str] = {}
            parent = None
            if owner.kind == OwnerKind.DEPARTMENT:
                labels[DEPARTMENT_LABEL] = owner.name
                department_queue[(owner.name, entry.pool)] = name
            else:
                labels[PROJECT_LABEL] = owner.name
                if owner.uid:
                    labels[PROJECT_ID_LABEL] = owner.uid
                if owner.department:
                    labels[DEPARTMENT_LABEL] = owner.department
                    parent = department_queue.get((owner.department, entry.pool))
            if entry.pool != DEFAULT_POOL:
                labels[NODE_POOL_LABEL] = entry.pool
            result.append(DerivedQueue(name, owner.kind, owner.name, entry.pool, parent, entry.priority,
                                       entry.gpu, entry.cpu, entry.memory, labels))
    return result


def spec_errors(owner: OwnerSpec, pools: Iterable[str], departments: Iterable[str],
                default_pools: Sequence[str] = ()) -> dict[str, str]:
    """KRM's admission rules for a department or project, as {field: rule}: the parent exists, every pool
    named exists, no two entries name one pool, every default pool has an entry."""
    errors: dict[str, str] = {}
    known = set(pools)
    if owner.kind == OwnerKind.PROJECT and owner.department and owner.department not in set(departments):
        errors["department"] = f"department {owner.department!r} does not exist"
    seen: set[str] = set()
    for entry in owner.queues:
        if entry.pool not in known:
            errors["queues"] = f"node pool {entry.pool!r} does not exist"
            break
        if entry.pool in seen:
            errors["queues"] = f"two entries name node pool {entry.pool!r}; one queue per node pool"
            break
        seen.add(entry.pool)
        for r in RESOURCE_NAMES:
            amounts: Amounts = getattr(entry, r)
            if amounts.deserved < 0 or amounts.over_quota_weight < 0:
                errors["queues"] = f"{entry.pool}: {r} deserved and over-quota weight must not be negative"
            elif amounts.limit != -1 and amounts.limit < amounts.deserved:
                errors["queues"] = (f"{entry.pool}: {r} limit {amounts.limit:g} is below deserved "
                                    f"{amounts.deserved:g}; -1 is no ceiling")
    missing = [p for p in default_pools if p not in seen]
    if missing:
        errors["default_node_pools"] = (f"{', '.join(missing)} has no queue in this project; every default "
                                        "node pool needs one")
    return errors


# ------------------------------------------------------------------------------------------ pools


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    label_key: str = ""
    label_value: str = ""


def pool_of(labels: Mapping[str, Any] | None, pools: Iterable[PoolSpec]) -> str:
    """The node pool of a node with these labels: the first pool, by name, whose label pair the node has;
    else the default pool. (KRM makes pairs unique; a node with the pairs of two pools under different
    keys goes to the first by name here, so the answer never depends on the order pools were read.)"""
    labels = labels or {}
    for pool in sorted(pools, key=lambda p: p.name):
        if pool.label_key and str(labels.get(pool.label_key, "")) == pool.label_value and pool.label_key in labels:
            return pool.name
    return DEFAULT_POOL


def node_move(labels: Mapping[str, Any] | None, pools: Iterable[PoolSpec], busy: bool) -> tuple[str, bool]:
    """The pool a node's ``kai.scheduler/node-pool`` label should name now, and whether the node is held:
    its labels choose another pool (`pool_of`) while pods admitted in its current pool still run on it,
    so it keeps its current pool, cordoned, until they end (KRM's drain before the move)."""
    labels = labels or {}
    want = pool_of(labels, pools)
    have = labelled_pool(labels)
    if want != have and busy:
        return have, True
    return want, False


def labelled_pool(labels: Mapping[str, Any] | None) -> str:
    """The pool a node's, queue's or PodGroup's labels put it in: the node-pool label's value, the default
    pool when it is absent."""
    return str((labels or {}).get(NODE_POOL_LABEL) or DEFAULT_POOL)


def pool_phase(nodes: Iterable[tuple[str, bool]], deleting: bool = False) -> tuple[str, str]:
    """A pool's phase and why, from its nodes as (name, ready and schedulable)."""
    nodes = list(nodes)
    if deleting:
        return PoolPhase.DELETING, "the node pool is being deleted"
    if not nodes:
        return PoolPhase.EMPTY, "the node pool has no nodes"
    ready = [n for n, ok in nodes if ok]
    if not ready:
        names = ", ".join(sorted(n for n, _ in nodes)[:5])
        return PoolPhase.UNSCHEDULABLE, f"none of its {len(nodes)} node(s) is ready and schedulable ({names})"
    return PoolPhase.READY, f"{len(ready)} of {len(nodes)} node(s) ready"


# ------------------------------------------------------------------------------------------ placement


def _affinity_pools(terms: Sequence[Mapping[str, Any]], pools: Sequence[PoolSpec]) -> list[str]:
    """The pools a required node affinity points at: a pool whose label pair an ``In`` expression names,
    and the default pool for ``kai.scheduler/node-pool DoesNotExist``; in the terms' order."""
    found: list[str] = []
    for term in terms:
        for expr in term.get("matchExpressions") or ():
            key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or ())
            if key == NODE_POOL_LABEL and op == "DoesNotExist":
                found.append(DEFAULT_POOL)
            elif key == NODE_POOL_LABEL and op == "In":
                found.extend(str(v) for v in values)
            elif op == "In":
                found.extend(p.name for p in pools if p.label_key == key and p.label_value in values)
    return list(dict.fromkeys(found))


def candidate_pools(*, annotation: str = "", affinity_terms: Sequence[Mapping[str, Any]] = (),
                    podgroup_pool: str | None = None, default_pools: Sequence[str] = (),
                    pools: Sequence[PoolSpec] = ()) -> tuple[list[str], str]:
    """The node pools a workload asked for, in order, and where the list came from. The first source that
    gives any pool wins: the ``kai.scheduler/node-pools`` annotation, the pod's required node affinity
    against the pools' label pairs, a pool label already on the PodGroup, the project's default pools,
    and last the default pool. Names of pools that do not exist are dropped."""
    known = {p.name for p in pools} | {DEFAULT_POOL}
    sources: list[tuple[str, list[str]]] = [
        ("annotation", annotation.split()),
        ("node affinity", _affinity_pools(affinity_terms, pools)),
        ("PodGroup label", [podgroup_pool] if podgroup_pool else []),
        ("project default pools", list(default_pools)),
    ]
    for source, names in sources:
        existing = [n for n in dict.fromkeys(names) if n in known]
        if existing:
            return existing, source
    return [DEFAULT_POOL], "default pool"


def charged_candidates(candidates: Sequence[str], queues: Mapping[str, str]) -> list[str]:
    """The candidates in which the project has a queue (``queues``: pool → queue name): a workload is
    never charged to a pool where its project has none, so that pool is skipped."""
    return [p for p in candidates if p in queues]


def choose_pool(candidates: Sequence[str], phases: Mapping[str, str], start: int = 0) -> str | None:
    """The first candidate from `start` on (wrapping round) whose phase accepts workloads (Ready or Empty);
    None when none does: the workload waits rather than go where it did not ask."""
    n = len(candidates)
    for i in range(n):
        pool = candidates[(start + i) % n]
        if phases.get(pool) in ACCEPTING_PHASES:
            return pool
    return None


def next_pool(candidates: Sequence[str], current: str, phases: Mapping[str, str]) -> tuple[str | None, bool]:
    """Where a workload its pool cannot schedule moves: the next accepting candidate after `current`,
    round-robin, and whether it went past the last candidate (then it is marked unschedulable, as in
    KRM). One candidate: it stays."""
    if len(candidates) <= 1 or current not in candidates:
        return (current if current in candidates else choose_pool(candidates, phases)), False
    at = list(candidates).index(current)
    chosen = choose_pool(candidates, phases, at + 1)
    wrapped = chosen is not None and list(candidates).index(chosen) <= at
    return chosen, wrapped
