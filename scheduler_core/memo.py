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

   * consolidation: every pending job needs more GPUs than the cluster has free, and moving
     pods creates none (nothing to write: such jobs are skipped silently);
   * reclaim: every pending job's queue would exceed its fair share with the job
     (``can_reclaim`` fails; it reads only the queue's figures and the job's request);
   * preempt: no pending job has a same-queue preemptible victim of lower priority. The walk's
     signature skips depend on the order of jobs inside each leaf queue only (the scope of a
     signature is the queue), which is the job order the pass replays.

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
   shard in its worker. The engine never bounds a search by queue depth (as KAI's
   ``queueDepthPerAction`` does), so no decision is given up and there is no cut to report.

Determinism: the memo holds only values of pure functions, keyed on all their inputs, so a cycle
with a memo (fresh, warm, or warmed by other snapshots) decides exactly what ``run_cycle`` without
one decides.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class CycleMemo:
    """Pure verdicts remembered across cycles, keyed on all their inputs (see the module
    docstring). Create one and pass it to every ``run_cycle`` of one scheduling shard."""

    __slots__ = ("max_entries", "_verdicts", "hits", "misses")

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries <= 0:
            raise ValueError(f"max_entries: must be a positive number of verdicts, got {max_entries}")
        self.max_entries = max_entries
        self._verdicts: dict[Hashable, Any] = {}
        self.hits = 0
        self.misses = 0

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

    def __len__(self) -> int:
        return len(self._verdicts)


_MISSING = object()

__all__ = ["CycleMemo"]
