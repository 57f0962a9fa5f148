"""What a cycle may remember from earlier cycles, and why the decisions stay those of a
stateless cycle.

A saturated cluster with a deep backlog asks the same questions every cycle: can this pending job
reclaim, is there anything to preempt for it, can consolidation make room. Almost every answer is
"no", and it is "no" for reasons that did not change since the last cycle. The engine avoids the
work in two layers, both exact (``CycleConfig.shortcuts=False`` turns both off and runs the plain
full evaluation, which the property tests compare against):

1. **No-op proofs inside a cycle** (``actions/``). Before an action walks its job order it checks
   whether any job could change the session state. An attempt that fails changes nothing but the
   job's pending reason, so when every attempt is certain to fail the action is replaced by one
   pass that writes the reasons the walk would have written:

   * allocation: once every job left in the walk asks, for each of its pending pods, for more
     whole GPUs than any node has free (idle + releasing), or for its next batch more than all
     nodes have free together, none of them can be placed; the walk
     stops there and the rest get the reasons their attempts would give, computed once per
     (queue, preemptible, pod shapes) where the reason names no pod (``allocate.run_allocate``);
   * consolidation: every pending job needs more GPUs than the cluster has free, and moving
     pods creates none (nothing to write: such jobs are skipped silently);
   * reclaim: every pending job's queue would exceed its fair share with the job
     (``can_reclaim`` fails; it reads only the queue's figures and the job's request);
   * preempt: no pending job has a same-queue preemptible victim of lower priority. The walk's
     signature skips depend on the order of jobs inside each leaf queue only (the scope of a
     signature is the queue), which is the job order the pass replays; a one-pod job right after
     one of the same priority, preemptibility and pod shape that its signature skipped, or that
     failed, is skipped too (the same signature key and request, and nothing changed between).

   These passes give every job of one kind the same reason object, and a note is added to a
   reason once per pair of objects (``actions.victims.note_attempt``), so their cost per job is
   a few lookups. Reasons are never changed once made.

   If one job could succeed, the action runs in full, unchanged.

2. **Verdicts remembered across cycles** (``CycleMemo``, passed by the caller from cycle to cycle:
   ``run_cycle(snapshot, config, memo=memo)``). A verdict is stored under everything it is
   computed from, so a lookup can only return what the computation would return:

   * ``can_reclaim``: (leaf queue, its allocated / non-preemptible allocated / fair share /
     quota vectors, the job's request vector, preemptible);
   * the preemption victim floor of a queue (the lowest priority among its evictable,
     unprotected preemptible jobs) is not remembered: it depends on every running job and costs
     one pass, which the cycle makes anyway.

   The memo holds at most ``max_entries`` verdicts (it is emptied when full: no eviction order
   to get wrong) and counts hits and misses, reported in ``CycleResult.counts["memo_hits"]`` /
   ``["memo_misses"]``. A memo is not shared by concurrent cycles; a control plane keeps one per
   shard in its worker. A search is bounded by queue depth only when the config asks for it
   (``CycleConfig.queue_depth_per_action``, KAI's ``queueDepthPerAction``); the cut is made before
   these passes, so they prove things of the jobs the action really tries.

3. **A quiet cycle's whole result** (``CycleMemo.reusable`` / ``keep``). A saturated cluster's
   cycle usually binds, pipelines and evicts nothing, and the next snapshot is the same one a few
   seconds later. Such a result is reused, without a session, when the next cycle has

   * the same config and the same snapshot apart from ``now`` (nodes, queues, jobs, topologies,
     usage, capacity compared by value; an incremental snapshot builder that keeps unchanged
     objects makes the comparison an identity check per object), and
   * a ``now`` in ``[previous now, valid_until)``. The engine reads the clock only through
     ``Session.before(t)`` ("now < t": a minimum runtime, a preemption delay, a staleness grace
     period), which lowers ``valid_until`` to ``t`` while it answers yes, and through
     ``Session.reads_clock()`` when the result itself holds a time (a start time, a reason saying
     how long is left), which makes the result hold for its own instant only. A "no" stays "no"
     as time goes on, so every comparison the cycle made gives the same answer at any ``now`` in
     the window, and the cycle would decide and explain exactly the same.

   The reused result is a copy with this cycle's timings and ``counts["reused"] = 1``. Anything
   else (one changed job, a node, a config, a clock crossing a threshold) runs the cycle in full.

4. **Job states kept for the next build** (``CycleMemo.take_jobs`` / ``keep_jobs``). Building a
   session makes a ``JobState`` with its tasks and gang tree per job spec, and freeing them after
   the cycle costs about as much again; in a steady state almost every spec is the same object
   as in the last cycle (an incremental snapshot builder keeps unchanged objects). At the end of
   a cycle the session hands its valid jobs' states over (``Session.hand_over``), keyed by the
   identity of their spec (which they keep alive, so the key cannot be taken by another object),
   and the next build takes a state back for the same spec object instead of building one:

   * what a ``JobState`` / ``TaskState`` derives from its spec alone (tasks, gang tree, request
     vectors, placement shape, order keys) is kept; every other slot is set by ``reset`` exactly
     as a fresh build sets it (the constructors call ``reset`` too, so there is one rule);
   * the checks that read the cluster (its queue is a usable leaf, its pods' nodes exist) run
     again every cycle (``Session._context_problem``); the checks of the spec alone passed when
     it was built (only valid jobs are kept);
   * placement shapes keep their small integer ids in a table that lives as long as the kept
     states (ids are cache keys only; the table is dropped with the states when it grows past
     ``max_entries``);
   * states of specs that are gone are released in the build that misses them.

   The session then charges nodes and queues from the reset states as it always does, so the
   build costs what changed plus one reset per job.

5. **Node and queue accounts kept with the jobs' charges** (``KeptJobs.base``, a ``Charged``).
   Charging every running pod again costs a pass over all of them, though almost none changed.
   So the session hands over its node tables (free and releasing vectors per node, the pods
   charged there) and its queue accounts (allocated, non-preemptible allocated, request), holding
   exactly the charges of the jobs it keeps in their built state:

   * a job is kept charged when its state is still the one the build gave it: its ``version``
     (bumped by every change of one of its tasks, ``Session._charge``, by a dropped node hint
     and by a change of its staleness) equals ``built_at``, which the build sets only for a job
     whose start time is its spec's (the clock rule may start one, ``_place_existing``), and a
     start set by a decision follows a change of its tasks;
   * every other job (changed by a decision, invalid, or started by the build's clock rule) and
     every stand-in of a moved pod is uncharged as it is now (``Session._charge`` with the
     opposite sign: the one rule, so the removal is what was added), and a changed job's state
     is reset, to be charged again by the next build;
   * the next build takes the tables only if it would build the same ones (``Charged.fits``:
     the same nodes, capacity and queues, compared by value); it numbers the kept jobs again,
     uncharges those whose spec is gone, and charges only new and reset jobs;
   * this is exact only because every charge is a whole number (no shared GPU, MIG instance or
     extended resource in the cluster: ``JobState.mass`` is finite) and all sums stay below 2**53
     (``Session._exact`` bounds them by the pods' charges and the nodes' capacity): then sums
     are the same in any order, and a removal returns an account to exactly what it was. A
     cluster with a fractional pod, or a build that met a pod on an unknown node, keeps no
     tables, and the next build charges every job.

   ``CycleResult.counts["charged_jobs"]`` says how many jobs a build charged.

Determinism: the memo holds only values of pure functions, keyed on all their inputs, so a cycle
with a memo (fresh, warm, or warmed by other snapshots) decides exactly what ``run_cycle`` without
one decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from scheduler_core import model as m

if TYPE_CHECKING:
    from scheduler_core.state import JobState

#: the snapshot's fields a quiet result depends on (everything but ``now``)
_SNAPSHOT_FIELDS = tuple(f.name for f in dataclasses.fields(m.ClusterSnapshot) if f.name != "now")


class CycleMemo:
    """Pure verdicts remembered across cycles, keyed on all their inputs (see the module
    docstring). Create one and pass it to every ``run_cycle`` of one scheduling shard."""

    __slots__ = ("max_entries", "_verdicts", "hits", "misses", "_last", "_jobs")

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries <= 0:
            raise ValueError(f"max_entries: must be a positive number of verdicts, got {max_entries}")
        self.max_entries = max_entries
        self._verdicts: dict[Hashable, Any] = {}
        self.hits = 0
        self.misses = 0
        # the last quiet cycle: (snapshot, config, result, valid_until)
        self._last: tuple[m.ClusterSnapshot, m.CycleConfig, m.CycleResult, float] | None = None
        self._jobs: KeptJobs | None = None  # job states the last cycle handed over (layer 4)

    def take_jobs(self) -> KeptJobs | None:
        """The job states the last cycle handed over; taken, so no two sessions share one."""
        kept, self._jobs = self._jobs, None
        return kept

    def keep_jobs(self, kept: KeptJobs | None) -> None:
        """Keep a session's job states for the next cycle (``Session.hand_over``)."""
        self._jobs = kept

    def verdict(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value of ``compute()``, remembered under ``key`` (which must name every input of
        ``compute``)."""
        got = self._verdicts.get(key, _MISSING)
        if got is not _MISSING:
            self.hits += 1
            return got
        self.misses += 1
        value = compute()
        if len(self._verdicts) >= self.max_entries:
            self._verdicts.clear()
        self._verdicts[key] = value
        return value

    def keep(self, snapshot: m.ClusterSnapshot, config: m.CycleConfig, result: m.CycleResult,
             valid_until: float) -> None:
        """Remember a cycle's result for reuse if it was quiet (nothing bound, pipelined or evicted)."""
        quiet = not (result.binds or result.pipelined or result.evictions) and valid_until > snapshot.now
        self._last = (snapshot, config, copy_result(result), valid_until) if quiet else None

    def reusable(self, snapshot: m.ClusterSnapshot, config: m.CycleConfig) -> m.CycleResult | None:
        """The remembered quiet result, when it is this cycle's result too (module docstring, 3)."""
        if self._last is None:
            return None
        last, last_config, result, valid_until = self._last
        if not last.now <= snapshot.now < valid_until or config != last_config:
            return None
        if snapshot is not last and any(getattr(snapshot, f) != getattr(last, f) for f in _SNAPSHOT_FIELDS):
            return None
        return copy_result(result)

    def __len__(self) -> int:
        return len(self._verdicts)


class KeptJobs:
    """Job states one session hands to the next build: by ``id`` of their spec, the table of
    placement shape ids their tasks use (module docstring, layer 4), and the node and queue
    tables holding their charges when those can be patched (``base``, layer 5)."""

    __slots__ = ("jobs", "shapes", "base")

    def __init__(self, jobs: dict[int, JobState], shapes: dict[m.Key, int], base: Charged | None = None) -> None:
        self.jobs = jobs
        self.shapes = shapes
        self.base = base


class Charged:
    """A session's node tables and queue accounts holding the charges of the jobs it kept, and
    what they were built from (module docstring, layer 5). Used by one build only: it changes
    them in place."""

    __slots__ = ("nodes", "total_capacity", "queue_specs", "node_tables", "node_errors", "queues")

    def __init__(self, snapshot: m.ClusterSnapshot, node_tables: dict[str, Any], node_errors: list[m.ObjectError],
                 queues: dict[str, tuple[list[float], list[float], list[float]]]) -> None:
        self.nodes = snapshot.nodes
        self.total_capacity = snapshot.total_capacity
        self.queue_specs = snapshot.queues
        self.node_tables = node_tables
        self.node_errors = node_errors
        self.queues = queues  # per queue: (allocated, non-preemptible allocated, request)

    def fits(self, snapshot: m.ClusterSnapshot) -> bool:
        """Whether a build of ``snapshot`` would make the same node tables and queues."""
        return ((snapshot.nodes is self.nodes or snapshot.nodes == self.nodes)
                and snapshot.total_capacity == self.total_capacity
                and (snapshot.queues is self.queue_specs or snapshot.queues == self.queue_specs))


def copy_result(result: m.CycleResult) -> m.CycleResult:
    """A result whose dicts are its own (the caller may change what it is given)."""
    return dataclasses.replace(result, queues=dict(result.queues), pending=dict(result.pending),
                               nodes=dict(result.nodes), last_start=dict(result.last_start),
                               stale_since=dict(result.stale_since), counts=dict(result.counts),
                               timings_ms=dict(result.timings_ms))


_MISSING = object()

__all__ = ["Charged", "CycleMemo", "KeptJobs"]
