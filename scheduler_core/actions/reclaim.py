"""KAI's reclaim action: a queue below its fair share takes back resources from queues above theirs,
keeping the reclaimer within its share and the victims' protections (the search: `victims.solve`)."""

from __future__ import annotations

import bisect
import copy
import math

import numpy as np

from scheduler_core import model as m
from scheduler_core import reasons
from scheduler_core import reclaimable as rc
from scheduler_core.actions.victims import (
    Attempt,
    PoolMinusQueue,
    Signatures,
    commit_attempt,
    demand_vector,
    has_evictable,
    held_gpus,
    is_protected,
    job_index,
    min_runtime_violation,
    note_attempt,
    note_attempts,
    queue_numbers,
    solve,
    trigger_jobs,
    victim_entry,
)
from scheduler_core.allocate import Placer
from scheduler_core.model import Key
from scheduler_core.ordering import JobsOrder, batch_request, tasks_to_allocate, within_queue_depth
from scheduler_core.proportion import QueueAttrs, allocatable_share
from scheduler_core.session import Session
from scheduler_core.state import GPU, JobState, TaskState
from scheduler_core.statement import Statement
from scheduler_core.units import number


def _reclaim_bound(s: Session, job: JobState, req: list[float], victims: list[JobState],
                   held_cache: dict[int, float] | None = None,
                   leaf_totals: dict[str, tuple[float, float]] | None = None) -> str | None:
    """A definitive "cannot" before any search: the GPUs the victim queues may give up under the
    reclaim strategies (§3.7 d), plus every free GPU, are fewer than the job needs. None = maybe.

    A victim queue V* (the victim's queue below the common ancestor) gives chunks only while it
    holds more than its threshold (allocatable share, or its quota when the reclaimer stays within
    its own), so it can lose less than ``held − threshold + largest chunk``.

    ``leaf_totals``: per leaf queue of the victims, (GPUs held, largest held by one job), when the
    caller keeps them; only for whole-GPU amounts, whose sums do not depend on the order."""
    need = req[GPU]
    if need <= 0 or any(t.request.gpu_kind == m.GPU_MIG for t in job.tasks):
        return None  # MIG capacity is counted in instances, not in whole devices
    free = float(np.maximum(s.idle[:, GPU] + s.rel[:, GPU], 0).sum())
    free += s.n_groups
    held: dict[str, float] = {}
    largest: dict[str, float] = {}
    rstar: dict[str, str] = {}
    levels: dict[str, tuple[str, str]] = {}
    # Runs of victims of one leaf queue are summed in a local (the same additions in the same
    # order as one dictionary update per victim, without the lookups).
    cur_q: str | None = None
    v_name = ""
    acc = big = 0.0
    for q, (gsum, gbig) in (leaf_totals or {}).items():
        lv = levels.get(q)
        if lv is None:
            lv = levels[q] = rc.leveled_queues(s.queues, job.queue, q)
        r_name, v_name = lv
        rstar[v_name] = r_name
        held[v_name] = held.get(v_name, 0.0) + gsum
        largest[v_name] = max(largest.get(v_name, 0.0), gbig)
    for v in (victims if leaf_totals is None else ()):
        q = v.queue
        if q != cur_q:
            if cur_q is not None:
                held[v_name], largest[v_name] = acc, big
            lv = levels.get(q)
            if lv is None:
                lv = levels[q] = rc.leveled_queues(s.queues, job.queue, q)
            r_name, v_name = lv
            rstar[v_name] = r_name
            acc, big = held.get(v_name, 0.0), largest.get(v_name, 0.0)
            cur_q = q
        g = held_cache.get(v.index) if held_cache is not None else None
        if g is None:
            g = held_gpus(v, held_cache)
        acc += g
        if g > big:
            big = g
    if cur_q is not None:
        held[v_name], largest[v_name] = acc, big
    bound = 0.0
    parts = []
    for v_name, gsum in sorted(held.items()):
        vq, rq = s.queues[v_name], s.queues[rstar[v_name]]
        alloc = allocatable_share(vq)
        within = rc.fits_deserved(rq, req)
        thr = []
        for r in range(3):
            a = math.inf if alloc[r] == m.UNLIMITED else alloc[r]
            d = math.inf if vq.deserved[r] == m.UNLIMITED else vq.deserved[r]
            thr.append(min(a, d) if within else a)
        if any(vq.allocated[r] > thr[r] for r in (0, 1)):
            give = gsum  # over in CPU or memory: every chunk passes the strategy check
        elif vq.allocated[GPU] <= thr[GPU]:
            give = 0.0
        else:
            give = min(gsum, vq.allocated[GPU] - thr[GPU] + largest[v_name] - 1e-6)
        bound += give
        parts.append(f"queue {v_name} may give up at most {number(math.floor(give))} GPUs "
                     f"(holds {number(vq.allocated[GPU])}, protected up to {number(thr[GPU])})")
    if free + bound < need - 1e-9:
        return (f"cannot free {number(need)} GPUs: {number(free)} free and " + "; ".join(parts)
                if parts else f"cannot free {number(need)} GPUs")
    return None

def _can_reclaim(s: Session, job: JobState, req: list[float]) -> rc.Verdict:
    """``rc.can_reclaim`` for a job's batch, through the session's memo when there is one; the
    key holds every input the verdict reads (see ``memo.py``)."""
    memo = s.memo if s.config.shortcuts else None
    if memo is None:
        return rc.can_reclaim(s.queues, job.queue, req, job.preemptible)
    q = s.queues[job.queue]
    key = ("can_reclaim", q.name, tuple(q.allocated), tuple(q.allocated_np), tuple(q.fair), tuple(q.deserved),
           tuple(req), job.preemptible)
    verdict: rc.Verdict = memo.verdict(key, lambda: rc.can_reclaim(s.queues, job.queue, req, job.preemptible))
    return verdict

def _reclaim_hopeless(s: Session, triggers: list[JobState]) -> bool:
    """Reclaim's no-op proof (``memo.py``): when every job the action would try fails the
    reclaimer check (its queue would exceed its fair share), nothing is evicted, no signature is
    recorded, and queue figures stay as they are; each job then gets exactly the note the full
    walk would give it, in any order. Writes those notes and returns True; returns False (and
    writes nothing) when some job passes the check, so the full walk must run."""
    notes: list[tuple[JobState, m.Reason]] = []
    seen: dict[Key, m.Reason] = {}  # the note per (queue, batch request, preemptible)
    # a batch of one pod: the note per (queue, pod shape, preemptible) (the shape fixes the request)
    by_shape: dict[Key, m.Reason] = {}
    for job in triggers:
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue  # the walk skips it without a note
        one = (job.queue, job.one_shape, job.preemptible) if job.one_shape >= 0 else None
        why = by_shape.get(one) if one is not None else None
        if why is None:
            req = batch_request(tasks)
            k = (job.queue, req[0], req[1], req[2], job.preemptible)
            why = seen.get(k)
            if why is None:
                verdict = _can_reclaim(s, job, req)
                if verdict.ok:
                    return False
                why = seen[k] = m.Reason(reasons.RECLAIM_PREFIX + verdict.code, "reclaim: " + verdict.reason,
                                         dict(verdict.numbers))
            if one is not None:
                by_shape[one] = why
        notes.append((job, why))
    note_attempts(s, notes)
    return True

class VictimPool:
    """What reclaim keeps about its candidate victims across the attempts of one session.

    The pool is the jobs that may lose pods (valid, preemptible, with an evictable task), in job
    order, and how many of them each queue has. Alongside it: the GPUs each job holds (`held`, a
    cache dropped for the jobs a commit touches), per leaf queue the sum of those GPUs and how many
    jobs hold each amount (exact in any order while every amount is whole; `fractional` counts the
    jobs holding a fraction), and the victim order's leaf heaps as sorted lists, made when a search
    first needs them. `after_commit` brings all of it up to date for the jobs a commit changed, so
    an attempt costs what changed, not the size of the cluster.
    """

    def __init__(self, s: Session) -> None:
        self.s = s
        self.evictable = [j.valid and j.preemptible and has_evictable(j) for j in s.jobs]
        self.jobs = [j for j in s.jobs if self.evictable[j.index]]
        self.queues: dict[str, int] = {}
        self.held: dict[int, float] = {}
        self.leaf_sum: dict[str, float] = {}
        self.leaf_vals: dict[str, dict[float, int]] = {}
        self.in_sum: dict[int, float] = {}
        self.fractional = 0
        self.leaf_heaps: dict[str, list[tuple[Key, int, JobState, list[TaskState]]]] = {}
        self.heaps_made = False
        self.entry_of: dict[int, tuple[Key, int, JobState, list[TaskState]]] = {}
        for j in self.jobs:
            self.queues[j.queue] = self.queues.get(j.queue, 0) + 1
            self._count_held(j, +1)

    def _count_held(self, j: JobState, sign: int) -> None:
        if sign > 0:
            g = self.in_sum[j.index] = held_gpus(j, self.held)
        else:
            g = self.in_sum.pop(j.index)
        if g != math.floor(g) or g > 2.0**40:
            self.fractional += sign
        self.leaf_sum[j.queue] = self.leaf_sum.get(j.queue, 0.0) + sign * g
        vals = self.leaf_vals.setdefault(j.queue, {})
        vals[g] = vals.get(g, 0) + sign
        if not vals[g]:
            del vals[g]

    def totals_without(self, own: str) -> dict[str, tuple[float, float]] | None:
        """Per other leaf queue: the GPUs its pool jobs hold and the most one of them holds (None
        while some job holds a fraction, when sums could depend on their order)."""
        if self.fractional:
            return None
        return {q: (self.leaf_sum[q], max(vals)) for q, vals in self.leaf_vals.items() if q != own and vals}

    def heaps_without(self, own: str) -> dict[str, list[tuple[Key, int, JobState, list[TaskState]]]]:
        """The victim order's leaf heaps of every queue but `own` (made on first use)."""
        if not self.heaps_made:
            self.heaps_made = True
            for j in self.jobs:
                e = victim_entry(self.s, j)
                if e is not None:
                    self.entry_of[j.index] = e
                    self.leaf_heaps.setdefault(j.queue, []).append(e)
            for h in self.leaf_heaps.values():
                h.sort()
        return {leaf: h for leaf, h in self.leaf_heaps.items() if leaf != own}

    def after_commit(self, touched: set[int], changed_jobs: set[int]) -> None:
        """Bring the pool, the held sums and the heaps up to date for the jobs a commit changed."""
        s = self.s
        dropped: list[JobState] = []
        for ji in sorted(touched):
            self.held.pop(ji, None)
            j = s.jobs[ji]
            if ji in self.in_sum:
                self._count_held(j, -1)
            now_ok = j.valid and j.preemptible and has_evictable(j)
            if now_ok:
                self._count_held(j, +1)
            if now_ok == self.evictable[ji]:
                continue
            self.evictable[ji] = now_ok
            # the pool stays in job order (a job's index is its place in s.jobs)
            if now_ok:
                bisect.insort(self.jobs, j, key=job_index)
                self.queues[j.queue] = self.queues.get(j.queue, 0) + 1
            else:
                dropped.append(j)
                self.queues[j.queue] -= 1
                if not self.queues[j.queue]:
                    del self.queues[j.queue]
        # a few jobs leave by search, many (a large gang's victims) by one filtering pass
        if len(dropped) <= 8:
            for j in dropped:
                self.jobs.remove(j)
        elif dropped:
            self.jobs = [j for j in self.jobs if self.evictable[j.index]]
        redo = sorted(changed_jobs | touched)
        gone: dict[str, dict[int, Key]] = {}  # per leaf: job index -> (key, index) of its old entry
        for ji in redo:
            old_e = self.entry_of.pop(ji, None)
            if old_e is not None:
                gone.setdefault(s.jobs[ji].queue, {})[ji] = old_e[:2]
        for leaf_name, olds in gone.items():
            h = self.leaf_heaps[leaf_name]
            if len(olds) <= 8:
                for head in olds.values():
                    del h[bisect.bisect_left(h, head)]
            else:
                h[:] = [e for e in h if e[1] not in olds]
        for ji in redo if self.heaps_made else ():
            j = s.jobs[ji]
            e = victim_entry(s, j) if self.evictable[ji] else None
            if e is not None:
                self.entry_of[ji] = e
                bisect.insort(self.leaf_heaps.setdefault(j.queue, []), e)


def run_reclaim(s: Session, placer: Placer) -> None:
    """Cross-queue eviction for pending jobs whose queue is below its fair share."""
    sigs = Signatures()
    triggers, _ = within_queue_depth(trigger_jobs(s), s.config.queue_depth(m.RECLAIM))
    if not triggers:
        return  # no pending job may reclaim: skip building the victim pool
    if s.config.shortcuts and _reclaim_hopeless(s, triggers):
        return
    order = JobsOrder(s, triggers)
    mult = s.config.saturation_multiplier
    vp = VictimPool(s)
    while True:
        popped = order.pop()
        if popped is None:
            break
        job = popped
        if job.gang_satisfied() and not tasks_to_allocate(job):
            continue
        if sigs.skip(job.queue, job):
            note_attempt(s, job, m.Reason(reasons.RECLAIM_SKIPPED, "an identical job of this queue could not reclaim", {}))
            continue
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue
        req = batch_request(tasks)
        verdict = _can_reclaim(s, job, req)
        if not verdict.ok:
            note_attempt(s, job, m.Reason(reasons.RECLAIM_PREFIX + verdict.code, "reclaim: " + verdict.reason, dict(verdict.numbers)))
            continue
        start_queues = {k: copy.copy(q) for k, q in s.queues.items()}
        for q in start_queues.values():
            q.allocated, q.allocated_np = list(q.allocated), list(q.allocated_np)
        victims: list[JobState] = []
        refused = ""
        verdicts: dict[str, rc.Verdict] = {}
        minrts: dict[str, rc.MinRuntime] = {}
        # Both checks are per victim queue and pure: when every other queue passes the filter and
        # has no minimum runtime, the candidates are simply the pool minus the job's own queue.
        everyone = True
        for vq_name in vp.queues:
            if vq_name == job.queue:
                continue
            f = verdicts[vq_name] = rc.filter_victim_queue(s.queues, job.queue, vq_name, req)
            if not f.ok:
                everyone = False
                break
            minrt = minrts[vq_name] = rc.reclaim_min_runtime(s.queues, job.queue, vq_name,
                                                             s.config.default_reclaim_min_runtime_s)
            if minrt.seconds > 0:
                everyone = False
                break
        own = job.queue
        for v in (() if everyone else vp.jobs):
            if v.queue == job.queue:
                continue
            known = verdicts.get(v.queue)
            if known is None:
                known = verdicts[v.queue] = rc.filter_victim_queue(s.queues, job.queue, v.queue, req)
            if not known.ok:
                refused = known.reason
                continue
            runtime = minrts.get(v.queue)
            if runtime is None:
                runtime = minrts[v.queue] = rc.reclaim_min_runtime(s.queues, job.queue, v.queue,
                                                                   s.config.default_reclaim_min_runtime_s)
            if runtime.seconds > 0 and not v.is_elastic() and is_protected(s, v, runtime.seconds):
                refused = f"job {v.uid} is within its minimum runtime of {number(runtime.seconds)}s"
                continue
            victims.append(v)
        if everyone:
            victims = PoolMinusQueue(vp.jobs, own, any(q != own for q in vp.queues))  # type: ignore[assignment]  # a list view of the pool
            if vp.fractional:
                victims = list(victims)
        if not victims:
            note_attempt(s, job, m.Reason(reasons.RECLAIM_NO_VICTIMS,
                                   "reclaim: no other queue has evictable jobs above its share"
                                   + (f" ({refused})" if refused else ""), {}))
            sigs.fail(job.queue, job)
            continue
        totals = vp.totals_without(own) if everyone else None
        cannot = _reclaim_bound(s, job, req, victims, vp.held, totals)
        if cannot:
            note_attempt(s, job, m.Reason(reasons.RECLAIM_CANNOT, "reclaim: " + cannot, {}))
            sigs.fail(job.queue, job)
            continue
        checks: dict[int, str] = {}

        def validate(chunks: list[list[TaskState]], attempt: Attempt, job: JobState = job, req: list[float] = req,
                     start_queues: dict[str, QueueAttrs] = start_queues, checks: dict[int, str] = checks) -> bool:
            pairs = []
            for c in chunks:
                core = [t for t in c]
                pairs.append((c[0].job.queue, demand_vector(core)))
            verdict, outcome = rc.validate_reclaim(start_queues, job.queue, req, pairs, mult, job.preemptible)
            if not verdict.ok:
                attempt.verdict = verdict.reason
                return False
            why = min_runtime_violation(s, chunks, lambda vj: rc.reclaim_min_runtime(
                s.queues, job.queue, vj.queue, s.config.default_reclaim_min_runtime_s).seconds)
            if why:
                attempt.verdict = why
                return False
            for c, chk in zip(chunks, outcome.chunks):
                for t in c:
                    checks[t.index] = chk.verdict.reason
            return True

        stmt = Statement(s)
        heaps = vp.heaps_without(own) if everyone else None
        attempt = solve(s, placer, stmt, job, victims, validate,
                        replace_victims=s.config.allow_consolidating_reclaim, victim_heaps=heaps)
        changed_jobs = {op[0].job.index for op in stmt.ops}
        if attempt.ok:
            rq = s.queues[job.queue]

            def reason(t: TaskState, job: JobState = job, rq: QueueAttrs = rq, checks: dict[int, str] = checks,
                       start_queues: dict[str, QueueAttrs] = start_queues) -> m.Reason:
                vq = start_queues[t.job.queue]
                return m.Reason(
                    reasons.RECLAIM,
                    f"reclaimed for job {job.uid} of queue {rq.name} (allocated {number(rq.allocated[2])} of fair share "
                    f"{number(rq.fair[2])} GPUs, quota {number(rq.deserved[2])}): {checks.get(t.index, '')}".rstrip(": "),
                    {"reclaimer": queue_numbers(rq), "victim": queue_numbers(vq),
                     "preemptor_priority": job.priority, "victim_priority": t.job.priority})

            # one attempt per job and cycle (KAI does not re-queue after a reclaim); an elastic job
            # grows further in later cycles, when its pipelined pods count as allocated
            if commit_attempt(s, stmt, job, attempt, m.RECLAIM, reason):
                touched = {job.index} | {t.job.index for t in attempt.evicted} | {t.job.index for t in attempt.moved}
                vp.after_commit(touched, changed_jobs)
        else:
            stmt.discard()
            note_attempt(s, job, m.Reason(reasons.RECLAIM_FAILED, "reclaim: " + attempt.verdict, {"scenarios": attempt.scenarios}))
            sigs.fail(job.queue, job)
