"""Hypothesis properties: the engine's exact shortcuts (``CycleConfig.shortcuts``) never change a
decision. Each random snapshot runs twice, with the shortcuts and with the plain full evaluation,
and every decision, reason and queue figure must be the same."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.b6_steady_state import decisions
from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.scheduler_core.engine_builders import GIB, NOW, fraction_task, gpu_task, node, queue
from tests.scheduler_core.test_invariants import clusters

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PLAIN = m.CycleConfig(shortcuts=False)


@st.composite
def crowded(draw, fractions: bool = True):
    """A nearly full cluster (whole and fractional pods, some releasing) and pending jobs of all
    sizes, so consolidation is tried often and often cannot succeed. ``fractions=False``: whole
    GPUs only (the charges the memo keeps from cycle to cycle, memo.py layer 5)."""
    n_nodes = draw(st.integers(1, 5))
    sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(n_nodes)]
    nodes = [node(f"n{i}", g) for i, g in enumerate(sizes)]
    n_queues = draw(st.integers(1, 3))
    queues = [queue(f"q{k}", gpu_quota=draw(st.integers(0, 12)), creation=k) for k in range(n_queues)]
    jobs: list[m.JobSpec] = []
    k = 0
    for i, g in enumerate(sizes):
        left = g - draw(st.integers(0, min(2, g)))  # leave 0–2 GPUs free
        while left > 0:
            take = draw(st.sampled_from([1, 1, 2, 4]))
            take = min(take, left)
            left -= take
            state = draw(st.sampled_from([m.RUNNING, m.RUNNING, m.RUNNING, m.RELEASING]))
            jobs.append(m.JobSpec(f"r{k}", f"q{k % n_queues}", tasks=(gpu_task(f"r{k}-0", take, state, f"n{i}"),),
                                  priority=draw(st.sampled_from([50, 100])), preemptible=draw(st.booleans()),
                                  creation=NOW - 1000 + k, last_start=NOW - 3600))
            k += 1
        if fractions and draw(st.booleans()):
            grp = (f"n{i}-shared",)
            jobs.append(m.JobSpec(f"f{i}", f"q{i % n_queues}", creation=NOW - 900 + i, last_start=NOW - 3600,
                                  tasks=(fraction_task(f"f{i}-0", draw(st.sampled_from([0.25, 0.5])), m.RUNNING,
                                                       f"n{i}", grp),)))
    for j in range(draw(st.integers(1, 12))):
        if fractions and draw(st.integers(0, 5)) == 0:
            tasks: tuple[m.TaskSpec, ...] = (fraction_task(f"p{j}-0", draw(st.sampled_from([0.25, 0.5]))),)
        else:
            pods = draw(st.integers(1, 3))
            gpus = draw(st.sampled_from([1, 2, 4, 8]))
            tasks = tuple(gpu_task(f"p{j}-{p}", gpus) for p in range(pods))
        jobs.append(m.JobSpec(f"p{j}", f"q{draw(st.integers(0, n_queues - 1))}", tasks=tasks,
                              priority=draw(st.sampled_from([50, 100, 125])), creation=NOW - 100 + j))
    return m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=NOW)


@st.composite
def sharers(draw):
    """Nodes whose devices (of different memory sizes) already hold shared groups, some of them
    releasing, and a fill of pending fractional, GPU-memory, whole-GPU and CPU-only pods: the
    placement's shortcuts for shared pods (the sharing-order bonus and the device counts from
    ``Session.group_room``) against scoring every candidate's groups one by one."""
    n_nodes = draw(st.integers(1, 6))
    nodes = [node(f"n{i}", draw(st.sampled_from([1, 2, 4, 8])),
                  gpu_memory_mib=draw(st.sampled_from([100, 16384, 40960, 81920]))) for i in range(n_nodes)]
    queues = [queue("q0", gpu_quota=-1), queue("q1", gpu_quota=draw(st.integers(0, 6)))]
    jobs: list[m.JobSpec] = []
    for i, nd in enumerate(nodes):
        for d in range(draw(st.integers(0, nd.gpus))):
            for k in range(draw(st.integers(1, 3))):
                state = draw(st.sampled_from([m.RUNNING, m.RUNNING, m.RELEASING]))
                name = f"s{i}-{d}-{k}"
                jobs.append(m.JobSpec(name, "q0", creation=NOW - 900, last_start=NOW - 3600, tasks=(
                    fraction_task(f"{name}-0", draw(st.sampled_from([0.125, 0.25, 0.3, 0.5])), state, nd.name,
                                  (f"n{i}-dev{d}",)),)))
    for j in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["fraction", "fraction", "memory", "whole", "cpu"]))
        if kind == "fraction":
            task = fraction_task(f"p{j}-0", draw(st.sampled_from([0.125, 0.25, 0.3, 0.5, 0.75])))
        elif kind == "memory":
            task = m.TaskSpec(f"p{j}-0", m.TaskRequest(cpu_millis=500, memory_bytes=GIB, gpu_kind=m.GPU_MEMORY,
                                                       gpu_memory_mib=draw(st.sampled_from([50, 4096, 20000]))))
        elif kind == "whole":
            task = gpu_task(f"p{j}-0", draw(st.sampled_from([1, 2])))
        else:
            task = m.TaskSpec(f"p{j}-0", m.TaskRequest(cpu_millis=1000, memory_bytes=GIB))
        jobs.append(m.JobSpec(f"p{j}", f"q{j % 2}", tasks=(task,), creation=NOW - 100 + j))
    return m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=NOW)


@SETTINGS
@given(sharers(), st.sampled_from(["binpack", "spread"]))
def test_shared_gpu_placement_shortcuts_change_no_decision(snap, placement):
    fast = m.CycleConfig(gpu_placement=placement)
    plain = m.CycleConfig(gpu_placement=placement, shortcuts=False)
    assert decisions(run_cycle(snap, fast)) == decisions(run_cycle(snap, plain))


@SETTINGS
@given(crowded())
def test_consolidation_shortcuts_change_no_decision_on_crowded_clusters(snap):
    assert decisions(run_cycle(snap)) == decisions(run_cycle(snap, PLAIN))


@SETTINGS
@given(clusters())
def test_shortcuts_change_no_decision_on_random_clusters(snap):
    assert decisions(run_cycle(snap)) == decisions(run_cycle(snap, PLAIN))


@SETTINGS
@given(crowded(), st.sampled_from([0, 1, 2, -1]))
def test_consolidation_alone_decides_the_same_with_and_without_its_early_exit(snap, cap):
    fast = m.CycleConfig(actions=("consolidation",), max_consolidation_preemptees=cap)
    plain = m.CycleConfig(actions=("consolidation",), max_consolidation_preemptees=cap, shortcuts=False)
    assert decisions(run_cycle(snap, fast)) == decisions(run_cycle(snap, plain))


def test_a_hopeless_consolidation_is_skipped_and_a_possible_one_still_moves_pods():
    # n0 has 1 free GPU and n1 has 1 free GPU: a 2-GPU job fits only if consolidation moves a pod
    nodes = [node("n0", 2), node("n1", 2)]
    run = [m.JobSpec("a", "q", (gpu_task("a-0", 1, m.RUNNING, "n0"),), priority=50, creation=NOW - 10),
           m.JobSpec("b", "q", (gpu_task("b-0", 1, m.RUNNING, "n1"),), priority=50, creation=NOW - 9)]
    want = m.JobSpec("w", "q", (gpu_task("w-0", 2),), priority=50, creation=NOW - 1)
    snap = m.ClusterSnapshot(nodes=tuple(nodes), queues=(queue("q", gpu_quota=4),), jobs=(*run, want), now=NOW)
    cfg = m.CycleConfig(actions=("consolidation",))
    moved = run_cycle(snap, cfg)
    assert [e.action for e in moved.evictions] == ["consolidation"]
    assert {p.task for p in moved.pipelined} >= {"w-0"}
    # the same job needing 3 GPUs cannot be helped (2 free in the whole cluster): nothing moves
    big = m.JobSpec("w", "q", (gpu_task("w-0", 3),), priority=50, creation=NOW - 1)
    stuck_snap = m.ClusterSnapshot(nodes=tuple(nodes), queues=(queue("q", gpu_quota=4),), jobs=(*run, big), now=NOW)
    stuck = run_cycle(stuck_snap, cfg)
    assert stuck.evictions == ()
    assert stuck.pipelined == ()
    plain = run_cycle(stuck_snap, m.CycleConfig(actions=("consolidation",), shortcuts=False))
    assert decisions(stuck) == decisions(plain)


def _outcome(result: m.CycleResult) -> tuple:
    return decisions(result), result.last_start, result.stale_since


#: what happens to the cluster between two cycles besides churn: nothing, a node leaves (its pods'
#: jobs turn invalid), a queue leaves (its jobs turn invalid), or what left comes back
EVENTS = st.sampled_from(["none", "none", "none", "drop_node", "drop_queue", "restore"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(crowded(), crowded(fractions=False), clusters()), st.integers(0, 2**16),
       st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.3, 0.6]), st.sampled_from([0, 0, 0, -2, -1, 1, 2]), EVENTS),
                min_size=2, max_size=6))
def test_a_memo_kept_across_a_sequence_of_cycles_changes_no_decision(snap, seed, steps):
    """One memo through a sequence of snapshots that keep their unchanged job objects (so job
    states are kept and reset, memo.py layer 4, and with whole GPUs only and the same nodes and
    queues also stay charged, layer 5) while jobs come and go, quotas move and nodes and queues
    leave and come back: every cycle decides and explains what the plain cycle does."""
    from benchmarks.b6_steady_state import advance
    from scheduler_core import CycleMemo

    memo = CycleMemo()
    rng = random.Random(seed)
    leaves = tuple(q.name for q in snap.queues if not any(c.parent == q.name for c in snap.queues))
    gone_nodes: list[m.NodeSpec] = []
    gone_queues: list[m.QueueSpec] = []
    for i, (churn, quota_delta, event) in enumerate(steps):
        with_memo = run_cycle(snap, memo=memo)
        plain = run_cycle(snap, PLAIN)
        assert _outcome(with_memo) == _outcome(plain)
        # the next snapshot: the decisions applied, some jobs finish and others arrive, a quota moves
        snap = advance(snap, plain, rng, i, churn=churn, leaves=leaves)
        k = rng.randrange(len(snap.queues))
        q = snap.queues[k]
        queues = list(snap.queues)
        if quota_delta:
            queues[k] = dataclasses.replace(q, gpu=dataclasses.replace(q.gpu, quota=max(0.0, q.gpu.quota + quota_delta)))
        nodes = list(snap.nodes)
        if event == "drop_node" and len(nodes) > 1:
            gone_nodes.append(nodes.pop(rng.randrange(len(nodes))))
        elif event == "drop_queue":
            leaf = [q for q in queues if q.name in leaves]
            if len(leaf) > 1:
                gone = leaf[rng.randrange(len(leaf))]
                queues.remove(gone)
                gone_queues.append(gone)
        elif event == "restore":
            nodes.extend(gone_nodes)
            queues.extend(gone_queues)
            gone_nodes, gone_queues = [], []
        snap = dataclasses.replace(snap, nodes=tuple(nodes), queues=tuple(queues))


def test_job_states_are_kept_for_the_next_cycle_and_reset_before_use():
    """The second cycle on the same job objects builds no job again: it takes the states the
    first one handed over, reset to what the snapshot says (a bind of the first cycle is undone
    in them), and a job whose node left turns invalid there as in a fresh build."""
    from scheduler_core import CycleMemo
    from scheduler_core.cycle import open_session

    run = m.JobSpec("run", "q", (gpu_task("run-0", 2, m.RUNNING, "n1"),), last_start=NOW - 60)
    wait = m.JobSpec("wait", "q", (gpu_task("wait-0", 2),), creation=NOW - 5)
    snap = m.ClusterSnapshot(nodes=(node("n0", 2), node("n1", 2)), queues=(queue("q", gpu_quota=4),),
                             jobs=(run, wait), now=NOW)
    memo = CycleMemo()
    first = run_cycle(snap, memo=memo)
    assert [(b.job, b.node) for b in first.binds] == [("wait", "n0")]
    kept = memo.take_jobs()
    assert kept is not None
    assert set(kept.jobs) == {id(run), id(wait)}
    states = dict(kept.jobs)
    memo.keep_jobs(kept)

    s, _ = open_session(snap, m.CycleConfig(), memo)
    assert [id(j) for j in s.jobs] == [id(states[id(run)]), id(states[id(wait)])]
    assert s.job_by_uid["wait"].tasks[0].status == m.PENDING
    assert s.job_by_uid["wait"].has_pending()
    assert float(s.idle[s.node_index["n0"], 2]) == 2.0  # nothing charged from the last cycle
    assert memo.take_jobs() is None  # taken by the session: no two sessions share a state

    memo.keep_jobs(s.hand_over(memo.max_entries))
    without_n1 = dataclasses.replace(snap, nodes=(node("n0", 2),))
    again = run_cycle(without_n1, memo=memo)
    assert again == dataclasses.replace(run_cycle(without_n1, PLAIN), timings_ms=again.timings_ms,
                                        counts=again.counts)
    assert [(e.kind, e.name, e.field) for e in again.errors] == [("job", "run", "tasks.node")]


def test_charges_of_unchanged_jobs_are_kept_and_patched_by_what_changed():
    """Layer 5: with whole GPUs only and the same nodes and queues, the next build charges only
    the jobs that are new or changed (a bind, a finished job, a new one); the rest come charged
    in the node tables and queue accounts, which end as a full build makes them. A fractional
    pod or a changed node list makes the build charge everything again."""
    from scheduler_core import CycleMemo
    from scheduler_core.cycle import open_session

    run = [m.JobSpec(f"r{i}", "q", (gpu_task(f"r{i}-0", 1, m.RUNNING, f"n{i % 2}"),), last_start=NOW - 600)
           for i in range(3)]
    wait = [m.JobSpec(f"w{i}", "q", (gpu_task(f"w{i}-0", 8),), creation=NOW - 50 + i) for i in range(3)]
    snap = m.ClusterSnapshot(nodes=(node("n0", 4), node("n1", 4)), queues=(queue("q", gpu_quota=8),),
                             jobs=(*run, *wait, m.JobSpec("new", "q", (gpu_task("new-0", 1),), creation=NOW - 60)),
                             now=NOW)
    memo = CycleMemo()
    first = run_cycle(snap, memo=memo)
    assert first.counts["charged_jobs"] == 7  # nothing kept yet
    assert [(b.job, b.node) for b in first.binds] == [("new", "n0")]

    def check(nxt: m.ClusterSnapshot, charged: int) -> m.CycleResult:
        got = run_cycle(nxt, memo=memo)
        assert got.counts["charged_jobs"] == charged
        assert _outcome(got) == _outcome(run_cycle(nxt, PLAIN))
        return got

    # the bind is applied (a new spec), r1 finishes, one job arrives: two builds, five kept
    bound = m.JobSpec("new", "q", (gpu_task("new-0", 1, m.RUNNING, "n0"),), creation=NOW - 60, last_start=NOW)
    arrived = m.JobSpec("w9", "q", (gpu_task("w9-0", 1),), creation=NOW)
    second = dataclasses.replace(snap, jobs=(run[0], run[2], *wait, bound, arrived), now=NOW + 5)
    got = check(second, 2)
    assert [(b.job, b.node) for b in got.binds] == [("w9", "n0")]  # bin-packing
    # the tables a fresh build makes, from the kept ones: the same node usage and queue figures
    third = dataclasses.replace(second, now=NOW + 10, jobs=second.jobs[:-1])  # w9 (bound) is gone
    kept = memo.take_jobs()
    memo.keep_jobs(kept)
    s, _ = open_session(third, m.CycleConfig(), memo)
    fresh, _ = open_session(third, m.CycleConfig())
    assert s.charged_jobs == 0  # all came charged; w9, changed by its bind, left none behind
    assert s.idle.tolist() == fresh.idle.tolist()
    assert s.rel.tolist() == fresh.rel.tolist()
    assert {n: (q.allocated, q.request) for n, q in s.queues.items()} == {
        n: (q.allocated, q.request) for n, q in fresh.queues.items()}
    assert [j.uid for j in s.jobs] == [j.uid for j in fresh.jobs]
    assert [(t.index, t.status, t.node) for t in s.tasks] == [(t.index, t.status, t.node) for t in fresh.tasks]
    memo.keep_jobs(s.hand_over(memo.max_entries))
    # a fractional pod: nothing can be kept charged
    frac = m.JobSpec("f", "q", (fraction_task("f-0", 0.5),), creation=NOW)
    fourth = dataclasses.replace(third, jobs=(*third.jobs, frac), now=NOW + 15)
    check(fourth, 1)  # the tables still came charged (from the whole-GPU cycle before)
    check(dataclasses.replace(fourth, now=NOW + 20), 7)  # the cycle with a fraction kept nothing
    check(dataclasses.replace(third, now=NOW + 22), 6)
    # a node leaves (its pods' jobs turn invalid): the tables are built again
    fewer = dataclasses.replace(third, nodes=(node("n1", 4),), now=NOW + 25)
    assert check(fewer, 6).errors


def test_the_memo_remembers_verdicts_and_reports_its_hits():
    from benchmarks.b6_steady_state import build
    from scheduler_core import CycleMemo

    snap = build(4, 64)
    memo = CycleMemo()
    first = run_cycle(snap, memo=memo)
    # one pending job renamed: the cycle runs in full (no quiet result to reuse) and looks verdicts up
    last = snap.jobs[-1]
    snap = dataclasses.replace(snap, jobs=(*snap.jobs[:-1], dataclasses.replace(last, name=last.name + "-b")))
    second = run_cycle(snap, memo=memo)
    # four leaf queues, one request shape each: four verdicts computed once, then only looked up
    assert first.counts["memo_misses"] == 4
    assert "reused" not in second.counts
    assert second.counts["memo_misses"] == 0
    assert second.counts["memo_hits"] == 4
    assert decisions(second) == decisions(run_cycle(snap, PLAIN))
    assert len(second.pending) == 64


def test_a_memo_refuses_a_size_that_cannot_hold_anything():
    from scheduler_core import CycleMemo

    with pytest.raises(ValueError, match="max_entries"):
        CycleMemo(max_entries=0)


@st.composite
def clocked(draw):
    """A crowded cluster whose outcome depends on the clock: running jobs that started recently
    (minimum runtimes of 60–600 s protect them for a while), pending jobs with preemption delays,
    and gangs below their minimum with staleness grace periods."""
    snap = draw(crowded())
    queues = tuple(dataclasses.replace(q, reclaim_min_runtime_s=draw(st.sampled_from([None, 60.0, 600.0])),
                                       preempt_min_runtime_s=draw(st.sampled_from([None, 60.0, 600.0])))
                   for q in snap.queues)
    jobs = []
    for j in snap.jobs:
        if j.last_start is not None:
            j = dataclasses.replace(j, last_start=NOW - draw(st.sampled_from([10.0, 100.0, 400.0, 3600.0])),
                                    min_available=draw(st.sampled_from([None, None, len(j.tasks) + 1])),
                                    staleness_grace_s=draw(st.sampled_from([None, 30.0])),
                                    stale_since=draw(st.sampled_from([None, NOW - 20.0])))
        else:
            j = dataclasses.replace(j, preemption_delay_s=draw(st.sampled_from([None, None, 30.0, 300.0])))
        jobs.append(j)
    return dataclasses.replace(snap, queues=queues, jobs=tuple(jobs))


@SETTINGS
@given(clocked(), st.lists(st.sampled_from([0.0, 1.0, 15.0, 45.0, 200.0, 700.0, 4000.0]), min_size=2, max_size=6))
def test_a_reused_quiet_result_is_what_the_full_cycle_decides_as_the_clock_moves(snap, steps):
    from benchmarks.b6_steady_state import advance
    from scheduler_core import CycleMemo

    memo = CycleMemo()
    for i, dt in enumerate(steps):
        snap = dataclasses.replace(snap, now=snap.now + dt)
        with_memo = run_cycle(snap, memo=memo)
        plain = run_cycle(snap, PLAIN)
        assert decisions(with_memo) == decisions(plain)
        assert with_memo.stale_since == plain.stale_since
        assert with_memo.last_start == plain.last_start
        if i % 2:  # every other step the decisions are applied (binds run, evicted pods wait), so
            # the cluster settles into quiet cycles; in between only the clock moves
            snap = advance(snap, plain, random.Random(i), i, churn=0.0, leaves=tuple(q.name for q in snap.queues))


def test_a_quiet_result_is_reused_until_the_clock_or_the_cluster_changes_what_it_would_say():
    from benchmarks.b6_steady_state import build
    from scheduler_core import CycleMemo

    snap = build(4, 64)
    # every running job started a minute ago: a backlog of higher priority may preempt them once
    # their minimum runtime of 120 s has passed, which is when the quiet result stops holding
    queues = tuple(dataclasses.replace(q, preempt_min_runtime_s=120.0) for q in snap.queues)
    jobs = tuple(dataclasses.replace(j, last_start=snap.now - 60.0, priority=10) if j.name.startswith("run-")
                 else dataclasses.replace(j, priority=200) for j in snap.jobs)
    snap = dataclasses.replace(snap, queues=queues, jobs=jobs)
    memo = CycleMemo()
    first = run_cycle(snap, memo=memo)
    assert "reused" not in first.counts
    assert (first.binds, first.evictions) == ((), ())
    later = dataclasses.replace(snap, now=snap.now + 30.0)
    again = run_cycle(later, memo=memo)
    assert again.counts["reused"] == 1
    assert decisions(again) == decisions(run_cycle(later, PLAIN))
    # a change of one job, or a clock past the protection, runs the cycle in full
    changed = dataclasses.replace(later, jobs=later.jobs[:-1])
    assert "reused" not in run_cycle(changed, memo=memo).counts
    run_cycle(later, memo=memo)
    past = dataclasses.replace(snap, now=snap.now + 61.0)
    full = run_cycle(past, memo=memo)
    assert "reused" not in full.counts
    assert decisions(full) == decisions(run_cycle(past, PLAIN))
    assert full.evictions, "past the minimum runtime, the high-priority backlog preempts"


@st.composite
def filling(draw):
    """A cluster that the allocate action fills part way through its walk: a few free GPUs and
    many pending jobs of every kind behind them (whole-GPU pods and gangs, CPU-only and
    fractional pods, pods that still name a node, non-preemptible jobs, queue limits, a tainted
    node and pods that tolerate it), so the walk reaches the point where no job left can be
    placed, or never reaches it."""
    n_nodes = draw(st.integers(1, 4))
    taint = m.Taint("gpu", "true", "NoSchedule")
    nodes = [node(f"n{i}", draw(st.sampled_from([2, 4, 8])),
                  taints=(taint,) if i == 0 and draw(st.booleans()) else ()) for i in range(n_nodes)]
    queues = [queue(f"q{k}", gpu_quota=draw(st.integers(0, 8)), gpu_limit=draw(st.sampled_from([-1, -1, 6, 12])),
                    creation=k) for k in range(draw(st.integers(1, 3)))]
    jobs: list[m.JobSpec] = []
    for i, n in enumerate(nodes):
        busy = max(0, n.gpus - draw(st.integers(0, 3)))
        for g in range(busy):
            jobs.append(m.JobSpec(f"r{i}-{g}", queues[g % len(queues)].name, creation=NOW - 500 + g,
                                  last_start=NOW - 3600, tasks=(gpu_task(f"r{i}-{g}-0", 1, m.RUNNING, n.name),)))
    tolerate = (m.Toleration("gpu", "Equal", "true", "NoSchedule"),)
    for j in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["whole", "whole", "whole", "gang", "cpu", "fraction", "hinted", "tolerating"]))
        if kind == "cpu":
            req = m.TaskRequest(cpu_millis=draw(st.sampled_from([1000, 200000])), memory_bytes=GIB)
            tasks: tuple[m.TaskSpec, ...] = (m.TaskSpec(f"p{j}-0", req),)
        elif kind == "fraction":
            tasks = (fraction_task(f"p{j}-0", 0.5),)
        elif kind == "gang":
            tasks = tuple(gpu_task(f"p{j}-{p}", draw(st.sampled_from([1, 2]))) for p in range(draw(st.integers(2, 3))))
        else:
            tasks = (gpu_task(f"p{j}-0", draw(st.sampled_from([1, 1, 2, 4, 8])),
                              node_name=f"n{draw(st.integers(0, n_nodes - 1))}" if kind == "hinted" else None,
                              tolerations=tolerate if kind == "tolerating" else ()),)
        jobs.append(m.JobSpec(f"p{j}", f"q{draw(st.integers(0, len(queues) - 1))}", tasks=tasks,
                              priority=draw(st.sampled_from([50, 100, 125])), preemptible=draw(st.booleans()),
                              creation=NOW - 100 + j))
    return m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=NOW)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filling())
def test_allocation_that_stops_walking_once_nothing_fits_decides_and_explains_the_same(snap):
    for config in (m.CycleConfig(), m.CycleConfig(actions=("allocate",))):
        fast = run_cycle(snap, config)
        plain = run_cycle(snap, dataclasses.replace(config, shortcuts=False))
        assert decisions(fast) == decisions(plain)


def test_allocation_stops_walking_when_no_job_left_can_be_placed(monkeypatch):
    """Two free GPUs and twenty one-GPU jobs: the walk places two, fails on the third (the
    first failure is where it looks for the proof) and explains the other seventeen without
    trying them one by one; a CPU-only job among them keeps the walk going."""
    from scheduler_core import allocate

    nodes = [node("n0", 4)]
    jobs = [m.JobSpec(f"r{g}", "q0", tasks=(gpu_task(f"r{g}-0", 1, m.RUNNING, "n0"),), last_start=NOW - 60)
            for g in range(2)]
    jobs += [m.JobSpec(f"p{j:02d}", "q0", tasks=(gpu_task(f"p{j:02d}-0", 1),), creation=NOW - 100 + j) for j in range(20)]
    snap = m.ClusterSnapshot(nodes=tuple(nodes), queues=(queue("q0", gpu_quota=4),), jobs=tuple(jobs), now=NOW)
    config = m.CycleConfig(actions=("allocate",))
    popped: list[str] = []  # the jobs allocate attempts, in turn (the jobs left are still put in order)
    original = allocate.allocate_job

    def counting(s, placer, stmt, job, *args, **kwargs):
        popped.append(job.uid)
        return original(s, placer, stmt, job, *args, **kwargs)

    monkeypatch.setattr(allocate, "allocate_job", counting)

    def pops(snapshot, cfg):
        popped.clear()
        return run_cycle(snapshot, cfg), list(popped)

    fast, fast_pops = pops(snap, config)
    plain, plain_pops = pops(snap, dataclasses.replace(config, shortcuts=False))
    cpu = m.JobSpec("cpu", "q0", tasks=(m.TaskSpec("cpu-0", m.TaskRequest(cpu_millis=1000, memory_bytes=GIB)),),
                    creation=NOW)
    _, with_cpu_pops = pops(dataclasses.replace(snap, jobs=snap.jobs + (cpu,)), config)
    assert [b.job for b in fast.binds] == ["p00", "p01"]
    assert decisions(fast) == decisions(plain)
    assert fast.pending["p19"].code == "no-node-fits"
    assert fast_pops == ["p00", "p01", "p02"]
    assert len(plain_pops) == 20
    assert len(with_cpu_pops) == 21
    # every job left has its place all the same, the one the full walk gives it
    assert fast.positions == plain.positions
    assert len(fast.positions) == 18


@st.composite
def shared_heavy(draw):
    """`crowded` clusters with more fractional pods pending (some of them several devices' worth)."""
    snap = draw(crowded())
    extra = []
    for j in range(draw(st.integers(1, 8))):
        task = fraction_task(f"x{j}-0", draw(st.sampled_from([0.125, 0.25, 0.5, 0.75])))
        devices = draw(st.sampled_from([1, 1, 1, 2, 3]))
        task = dataclasses.replace(task, request=dataclasses.replace(task.request, gpu_devices=devices))
        extra.append(m.JobSpec(f"x{j}", snap.queues[0].name, creation=NOW - 50 + j, tasks=(task,)))
    return dataclasses.replace(snap, jobs=snap.jobs + tuple(extra))


@SETTINGS
@given(shared_heavy())
def test_the_shared_device_counts_are_those_of_the_listed_options(snap):
    """`Placer._shared_counts` (the fit test of a node for a fractional task) counts what
    `Placer._shared_options` lists, at every node and task a cycle tests."""
    from scheduler_core.allocate import Placer

    counted = Placer._shared_counts
    seen = []

    def checked(self, t, i):
        n_any, n_idle = counted(self, t, i)
        opts, _, _ = self._shared_options(t, i)
        assert (n_any, n_idle) == (len(opts), sum(1 for o in opts if o[2]))
        seen.append(i)
        return n_any, n_idle

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Placer, "_shared_counts", checked)
        run_cycle(snap, PLAIN)  # without the shortcuts, every fitting node is counted
    assume(seen)  # a cycle that placed no fractional pod anywhere (its queue at its limit) tells nothing


@SETTINGS
@given(shared_heavy())
def test_leaving_out_nodes_with_whole_devices_free_changes_no_shared_decision(snap):
    """`Placer._shared_to_count` (nodes with enough whole devices free on idle are not counted, nor
    nodes with neither a whole device free nor a group with room, by ``Session.group_room``) and the
    sharing-order bonus read only for the nodes in ``Session.grouped``: the same decisions as
    counting every node, and ``grouped`` and ``group_room`` are exactly what the nodes hold whenever
    they are read."""
    from scheduler_core.allocate import Placer

    scores = Placer.scores

    def checked(self, t, cand, *args, **kwargs):
        assert self.s.grouped == {ns.index for ns in self.s.nodes if ns.groups}
        assert self.s.group_room.tolist() == [
            max((float(self.s.gpu_mem[ns.index]) - g.mem_active for g in ns.groups.values() if not g.fully_releasing),
                default=-math.inf) for ns in self.s.nodes]
        return scores(self, t, cand, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Placer, "scores", checked)
        fast = run_cycle(snap)
    assert decisions(fast) == decisions(run_cycle(snap, PLAIN))
