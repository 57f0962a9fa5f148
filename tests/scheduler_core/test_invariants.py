"""Hypothesis properties for the invariants of KAI-SEMANTICS §8 over random small clusters."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.scheduler_core.engine_builders import NOW, gpu_task, node, queue

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw):
    """A random cluster: nodes, a two-level queue tree, running jobs that fit, pending jobs."""
    n_nodes = draw(st.integers(1, 4))
    sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(n_nodes)]
    nodes = [node(f"n{i}", g) for i, g in enumerate(sizes)]
    n_queues = draw(st.integers(1, 3))
    queues = [queue("dept", gpu_quota=-1, gpu_limit=draw(st.sampled_from([-1, 6, 12])))]
    for i in range(n_queues):
        queues.append(queue(f"q{i}", "dept", gpu_quota=draw(st.integers(0, 8)),
                            gpu_limit=draw(st.sampled_from([-1, -1, 4, 8])), weight=draw(st.integers(0, 2)),
                            creation=i))
    free = list(sizes)
    jobs: list[m.JobSpec] = []
    for j in range(draw(st.integers(1, 8))):
        q = f"q{draw(st.integers(0, n_queues - 1))}"
        pods = draw(st.integers(1, 3))
        gpus = draw(st.sampled_from([1, 1, 2, 4]))
        priority = draw(st.sampled_from([50, 75, 100, 125]))
        preemptible = draw(st.booleans()) if priority >= 100 else True
        running = draw(st.booleans())
        tasks = []
        placed = running
        where = []
        if running:
            for _ in range(pods):
                k = next((i for i in range(n_nodes) if free[i] >= gpus), None)
                if k is None:
                    placed = False
                    break
                free[k] -= gpus
                where.append(k)
            if not placed:
                for k in where:
                    free[k] += gpus
        for i in range(pods):
            if placed:
                tasks.append(gpu_task(f"j{j}-{i}", gpus, m.RUNNING, f"n{where[i]}"))
            else:
                tasks.append(gpu_task(f"j{j}-{i}", gpus))
        min_av = draw(st.integers(1, pods))
        jobs.append(m.JobSpec(f"j{j}", q, tasks=tuple(tasks), priority=priority, preemptible=preemptible,
                              creation=NOW - 100 + j, min_available=min_av,
                              last_start=NOW - 3600 if placed else None))
    return m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=NOW)


def _tasks(snap: m.ClusterSnapshot) -> dict[str, tuple[m.JobSpec, m.TaskSpec]]:
    return {t.name: (j, t) for j in snap.jobs for t in j.tasks}


@SETTINGS
@given(clusters())
def test_node_capacity_is_never_exceeded(snap):
    result = run_cycle(snap)
    tasks = _tasks(snap)
    held = defaultdict(float)  # running, bound, releasing: what the node holds now
    promised = defaultdict(float)  # what stays or arrives: not releasing, incl. pipelined
    for o in result.tasks:
        gpus = tasks[o.task][1].request.gpus
        if o.status in (m.RUNNING, m.BINDING, m.RELEASING):
            held[o.node] += gpus
        if o.status in (m.RUNNING, m.BINDING, m.PIPELINED):
            promised[o.node] += gpus
    for n in snap.nodes:
        assert held[n.name] <= n.gpus
        assert promised[n.name] <= n.gpus


@SETTINGS
@given(clusters())
def test_a_queue_that_gets_new_binds_stays_within_its_limits(snap):
    result = run_cycle(snap, m.CycleConfig(actions=("allocate",)))
    tasks = _tasks(snap)
    parents = {q.name: q.parent for q in snap.queues}
    limits = {q.name: q.gpu.limit for q in snap.queues}
    grew = set()
    for b in result.binds:
        q = tasks[b.task][0].queue
        while q is not None:
            grew.add(q)
            q = parents[q]
    for q in grew:
        if limits[q] != -1:
            assert result.queues[q].allocated[2] <= limits[q] + 1e-9


@SETTINGS
@given(clusters())
def test_a_gang_is_never_partly_bound_and_allocate_never_evicts(snap):
    result = run_cycle(snap, m.CycleConfig(actions=("allocate",)))
    assert result.evictions == ()
    jobs = {j.name: j for j in snap.jobs}
    by_job = defaultdict(list)
    for o in result.tasks:
        by_job[o.job].append(o)
    for name, outs in by_job.items():
        if any(o.status == m.BINDING for o in outs):
            active = sum(1 for o in outs if o.status in (m.BINDING, m.RUNNING))
            assert active >= (jobs[name].min_available or len(outs))


@SETTINGS
@given(clusters())
def test_the_same_snapshot_always_gives_the_same_decisions(snap):
    a, b = run_cycle(snap), run_cycle(snap)
    assert (a.binds, a.pipelined, a.evictions, a.pending) == (b.binds, b.pipelined, b.evictions, b.pending)


@SETTINGS
@given(clusters())
def test_evictions_respect_preemptibility_queues_and_priorities(snap):
    result = run_cycle(snap)
    jobs = {j.name: j for j in snap.jobs}
    for e in result.evictions:
        victim = jobs[e.job]
        assert victim.preemptible, f"non-preemptible {e.job} evicted by {e.action}"
        if e.action == "preempt":
            preemptor = jobs[e.preemptor]
            assert preemptor.queue == victim.queue
            assert victim.priority < preemptor.priority
        if e.action == "reclaim":
            assert jobs[e.preemptor].queue != victim.queue


@SETTINGS
@given(clusters())
def test_reclaim_never_leaves_the_reclaimer_above_its_fair_share(snap):
    # allocate then reclaim: a queue's allocation counts what reclaim pipelined for it this cycle
    result = run_cycle(snap, m.CycleConfig(actions=("allocate", "reclaim")))
    reclaimers = {e.preemptor for e in result.evictions if e.action == "reclaim"}
    for name in reclaimers:
        job = next(j for j in snap.jobs if j.name == name)
        q = result.queues[job.queue]
        assert q.allocated[2] <= q.fair_share[2] + 1e-9


@st.composite
def bursts(draw):
    """Nodes with random usage and a burst of equal pending jobs in a few queues."""
    n_nodes = draw(st.integers(1, 6))
    nodes = [node(f"n{i}", draw(st.sampled_from([2, 4, 8]))) for i in range(n_nodes)]
    jobs = []
    for i, nd in enumerate(nodes):
        used = draw(st.integers(0, nd.gpus))
        if used:
            # some pods are releasing, so later pods get pipelined onto them
            state = draw(st.sampled_from([m.RUNNING, m.RUNNING, m.RELEASING]))
            jobs.append(m.JobSpec(f"r{i}", "q0", tasks=(gpu_task(f"r{i}-0", used, state, nd.name),),
                                  creation=NOW - 500))
    gpus = draw(st.sampled_from([1, 2, 4]))
    n_queues = draw(st.integers(1, 3))
    queues = [queue(f"q{k}", gpu_quota=draw(st.integers(0, 8)), creation=k) for k in range(n_queues)]
    for j in range(draw(st.integers(1, 20))):
        jobs.append(m.JobSpec(f"p{j}", f"q{j % n_queues}", tasks=(gpu_task(f"p{j}-0", gpus),), creation=NOW - 100 + j))
    return m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(queues), jobs=tuple(jobs), now=NOW)


@SETTINGS
@given(bursts())
def test_the_placement_fast_path_makes_the_same_decisions_as_full_scoring(snap):
    from scheduler_core.allocate import Placer

    fast = run_cycle(snap, m.CycleConfig(actions=("allocate",)))
    Placer.fast_paths = False
    try:
        slow = run_cycle(snap, m.CycleConfig(actions=("allocate",)))
    finally:
        Placer.fast_paths = True
    assert fast.binds == slow.binds
    assert fast.pipelined == slow.pipelined
