"""Fragmentation-aware placement: the scorer (scheduler_core.placement) and the scheduler using it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import model as m
from scheduler_core import placement as fa
from scheduler_core.cycle import run_cycle
from scheduler_core.sim import fgd
from tests.scheduler_core.engine_builders import (
    GIB,
    fraction_task,
    job,
    node,
    queue,
    snapshot,
    status_of,
)

# --------------------------------------------------------------------------- the scorer


def test_typical_pods_from_requests_merges_equal_requests_and_normalises_weights():
    typical = fa.typical_pods_from_requests(((1, 2.0), (0.5, 1.0), (1.0, 1.0), (4, 0)))
    assert typical.gpu_milli.tolist() == [500, 1000]  # the zero-weight 4-GPU pod is left out
    assert typical.num_gpu.tolist() == [1, 1]
    assert typical.prob.tolist() == pytest.approx([0.25, 0.75])
    assert fa.typical_pods_from_requests(((8, 1),)).num_gpu.tolist() == [8]


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        (((1.5, 1),), r"typical_pods\[0\]: GPUs per pod must be a fraction in \(0, 1\) or a whole number"),
        (((0, 1),), r"typical_pods\[0\]: GPUs per pod"),
        (((1, -1),), r"typical_pods\[0\]: weight must be 0 or more"),
        (((1, 0),), r"typical_pods: give at least one pod with a positive weight"),
        (((1,),), r"typical_pods\[0\]: expected a pair"),
    ],
)
def test_bad_typical_pods_name_the_field_and_the_rule(pods, message):
    with pytest.raises(ValueError, match=message):
        fa.typical_pods_from_requests(pods)


def test_stranded_gpus_are_free_shares_no_typical_pod_can_use():
    typical = fa.typical_pods_from_requests(((0.5, 1), (2, 1)))
    gpu = np.array([[1000, 400, 300, 0], [1000, 1000, 600, 0], [0, 0, 0, 0]])
    cpu = np.zeros(3, dtype=np.int64)
    model = np.zeros(3, dtype=np.int64)
    # node 0: the whole GPU takes a 0.5 pod; 400 + 300 milli are too small for any typical pod
    # node 1: every GPU takes a 0.5 pod; nothing is stranded
    assert fa.stranded_gpu_milli(cpu, gpu, model, typical).tolist() == [700, 0, 0]
    # a model the typical pods may not use strands everything free on it
    only_model_1 = fa.TypicalPods(np.zeros(1, dtype=np.int64), np.array([1000]), np.array([1]), np.array([0b10]),
                                  np.array([1.0]))
    assert fa.stranded_gpu_milli(cpu, gpu, model, only_model_1).tolist() == [1700, 2600, 0]


def test_stranded_never_exceeds_the_expected_fragment_of_a_single_typical_pod():
    typical = fa.typical_pods_from_requests(((0.5, 1),))
    rng = np.random.default_rng(3)
    gpu = np.sort(rng.integers(0, 11, size=(50, 8)) * 100, axis=1)[:, ::-1]
    cpu, model = np.zeros(50, dtype=np.int64), np.zeros(50, dtype=np.int64)
    # with one typical pod, "stranded" and FGD's fragment are the same thing
    assert fa.stranded_gpu_milli(cpu, gpu, model, typical).tolist() == \
        fa.node_fragmentation(cpu, gpu, model, typical).astype(int).tolist()


def test_the_fgd_score_saturates_and_is_monotone_in_the_growth():
    assert fa.fgd_score(np.array([-1e9, 0.0, 1e9])).tolist() == [100.0, 50.0, 0.0]
    d = np.linspace(-5000, 5000, 101)
    assert (np.diff(fa.fgd_score(d)) <= 0).all()


def test_a_fractional_pod_takes_the_gpu_that_grows_the_fragment_least_then_the_fullest():
    typical = fa.typical_pods_from_requests(((0.5, 1),))
    gpu = np.array([[1000, 600, 400, 0]])
    z = np.zeros(1, dtype=np.int64)
    before = fa.node_fragmentation(z, gpu, z, typical)
    delta, chosen = fa.placement_deltas(z, gpu, z, 0, 300, 1, typical, before)
    # on the 400 GPU the stranded 400 becomes 100: the fragment shrinks by 300
    assert chosen.tolist() == [400]
    assert delta.tolist() == [-300.0]
    # 100 milli: on 1000 (-> 900) or 600 (-> 500) nothing changes; best fit takes 600, FGD's artifact 1000
    d2, c2 = fa.placement_deltas(z, gpu, z, 0, 100, 1, typical, before)
    assert (d2.tolist(), c2.tolist()) == ([-100.0], [400])  # 400 -> 300 still stranded, less of it
    d3, c3 = fa.placement_deltas(z, np.array([[1000, 600, 0, 0]]), z, 0, 100, 1, typical,
                                 fa.node_fragmentation(z, np.array([[1000, 600, 0, 0]]), z, typical))
    assert (d3.tolist(), c3.tolist()) == ([0.0], [600])
    _, c4 = fa.placement_deltas(z, np.array([[1000, 600, 0, 0]]), z, 0, 100, 1, typical,
                                fa.node_fragmentation(z, np.array([[1000, 600, 0, 0]]), z, typical),
                                prefer_fuller_gpu=False)
    assert c4.tolist() == [1000]


def test_tie_breaks_follow_pod_kind():
    score = np.array([90.0, 100.0, 100.0, 100.0])
    cpu_left = np.array([0.0, 5000.0, 1000.0, 3000.0])
    gpu_left = np.array([0.0, 1000.0, 3000.0, 1000.0])
    sliver = np.array([0.0, 500.0, 100.0, 100.0])
    pressure = np.zeros(4)
    kw = {"cpu_scale": 10000.0, "gpu_scale": 8000.0}
    # whole-GPU pod: least leftover CPU + GPU among the top bucket (node 3: 0.3 + 0.125)
    assert fa.pick(score, cpu_left, gpu_left, sliver, pressure, fractional=False, **kw) == 3
    # fractional pod: the least sliver, then node order (nodes 2 and 3 tie: node 2)
    assert fa.pick(score, cpu_left, gpu_left, sliver, pressure, fractional=True, **kw) == 2
    # heavy model pressure somewhere: whole-GPU pods keep node order within the bucket
    assert fa.pick(score, cpu_left, gpu_left, sliver, np.array([0, 0, 0, 5.0]), fractional=False, **kw) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 4), st.integers(0, 3)),
                min_size=1, max_size=12),
       st.booleans())
def test_pick_is_the_head_of_rank(rows, fractional):
    score = np.array([r[0] * 10.0 for r in rows])
    cpu_left = np.array([r[1] * 1000.0 for r in rows])
    gpu_left = np.array([r[2] * 1000.0 for r in rows])
    sliver = np.array([r[3] * 100.0 for r in rows])
    pressure = np.array([float(r[3]) * 2 for r in rows])
    kw = {"fractional": fractional, "cpu_scale": 4000.0, "gpu_scale": 4000.0}
    order = fa.rank(score, cpu_left, gpu_left, sliver, pressure, **kw)
    assert sorted(order.tolist()) == list(range(len(rows)))
    assert fa.pick(score, cpu_left, gpu_left, sliver, pressure, **kw) == int(order[0])


def test_the_simulator_has_no_copy_of_the_scorer():
    # the FGD experiment's kaiweb policy and fragmentation measure are the engine's
    assert fgd.node_fragmentation is fa.node_fragmentation
    assert fgd.TypicalPods is fa.TypicalPods
    for name in ("_kaiweb_pick", "_fgd_int_score", "model_pressure", "KAIWEB_PRESSURE_WEIGHT"):
        assert not hasattr(fgd, name), name


# --------------------------------------------------------------------------- the scheduler


def _cfg(placement: str, typical=()) -> m.CycleConfig:
    return m.CycleConfig(gpu_placement=placement, typical_pods=typical)


def _whole_gpu_case():
    # a: 5 free GPUs, b: 6 free; the typical pod takes 4 GPUs
    nodes = [node("a"), node("b")]
    jobs = [job("ra", "q", pods=3, running_on=["a"] * 3), job("rb", "q", pods=2, running_on=["b"] * 2),
            job("new", "q", gpus=2)]
    return snapshot(nodes, [queue("q", gpu_quota=100)], jobs)


def test_binpack_fills_the_fuller_node_but_fragmentation_aware_keeps_room_for_the_typical_pod():
    snap = _whole_gpu_case()
    assert status_of(run_cycle(snap, _cfg("binpack", ((4, 1),))))["new-0"] == ("Binding", "a")
    # on a, 3 GPUs would be left: no 4-GPU pod fits; on b, 4 are left
    assert status_of(run_cycle(snap, _cfg("fragmentation-aware", ((4, 1),))))["new-0"] == ("Binding", "b")


def test_spread_is_still_spread_when_typical_pods_are_set():
    snap = _whole_gpu_case()
    assert status_of(run_cycle(snap, _cfg("spread", ((4, 1),))))["new-0"] == ("Binding", "b")
    nodes = [node("a"), node("b")]
    jobs = [job("ra", "q", pods=2, running_on=["a"] * 2), job("rb", "q", pods=1, running_on=["b"]),
            job("new", "q", gpus=2)]
    snap2 = snapshot(nodes, [queue("q", gpu_quota=100)], jobs)
    assert status_of(run_cycle(snap2, _cfg("spread", ((4, 1),))))["new-0"] == ("Binding", "b")
    assert status_of(run_cycle(snap2, _cfg("binpack", ((4, 1),))))["new-0"] == ("Binding", "a")


def _fraction_case(new_fraction: float = 0.3):
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    jobs = [job("ra", "q", tasks=[fraction_task("ra-0", 0.4, m.RUNNING, "a", ("ga",))]),
            job("rb", "q", tasks=[fraction_task("rb-0", 0.6, m.RUNNING, "b", ("gb",))]),
            job("new", "q", tasks=[fraction_task("new-0", new_fraction)])]
    return snapshot(nodes, [queue("q", gpu_quota=100)], jobs)


def test_a_fractional_pod_fills_the_stranded_sliver_instead_of_breaking_a_usable_share():
    snap = _fraction_case()
    binpack = run_cycle(snap, _cfg("binpack", ((0.5, 1),)))
    aware = run_cycle(snap, _cfg("fragmentation-aware", ((0.5, 1),)))
    # a has 0.6 free (fits the typical 0.5 pod), b has 0.4 free (stranded): 0.3 belongs on b
    assert [(b.node, b.gpu_groups) for b in binpack.binds] == [("a", ("ga",))]
    assert [(b.node, b.gpu_groups) for b in aware.binds] == [("b", ("gb",))]


def test_a_gpu_memory_pod_is_placed_by_the_same_rule():
    nodes = [node("a", gpus=1, gpu_memory_mib=10000), node("b", gpus=1, gpu_memory_mib=10000)]
    mem_req = m.TaskRequest(cpu_millis=500, memory_bytes=GIB, gpu_kind=m.GPU_MEMORY, gpu_memory_mib=3000)
    jobs = [job("ra", "q", tasks=[fraction_task("ra-0", 0.4, m.RUNNING, "a", ("ga",))]),
            job("rb", "q", tasks=[fraction_task("rb-0", 0.6, m.RUNNING, "b", ("gb",))]),
            job("new", "q", tasks=[m.TaskSpec(name="new-0", request=mem_req)])]
    snap = snapshot(nodes, [queue("q", gpu_quota=100)], jobs)
    aware = run_cycle(snap, _cfg("fragmentation-aware", ((0.5, 1),)))
    assert [(b.node, b.gpu_groups) for b in aware.binds] == [("b", ("gb",))]


def test_on_one_node_the_fractional_pod_takes_the_gpu_it_strands_least():
    # one node, two shared GPUs: g1 with 0.6 free, g2 with 0.4 free, and a whole free GPU
    nodes = [node("a", gpus=3)]
    jobs = [job("r1", "q", tasks=[fraction_task("r1-0", 0.4, m.RUNNING, "a", ("g1",))]),
            job("r2", "q", tasks=[fraction_task("r2-0", 0.6, m.RUNNING, "a", ("g2",))]),
            job("new", "q", tasks=[fraction_task("new-0", 0.3)])]
    snap = snapshot(nodes, [queue("q", gpu_quota=100)], jobs)
    binpack = run_cycle(snap, _cfg("binpack", ((0.5, 1),)))
    aware = run_cycle(snap, _cfg("fragmentation-aware", ((0.5, 1),)))
    assert [b.gpu_groups for b in binpack.binds] == [("g2",)]  # gpupack: the most used group
    assert [b.gpu_groups for b in aware.binds] == [("g2",)]
    # a 0.5 pod: on g1 it leaves 0.1 (stranded) — best is g1 anyway (0.4 on g2 does not fit)
    # a 0.1 pod: g2 (0.4 stranded -> 0.3) shrinks the fragment; g1 (0.6 -> 0.5) changes nothing
    snap2 = _replace_new(snap, fraction_task("new-0", 0.1))
    assert [b.gpu_groups for b in run_cycle(snap2, _cfg("fragmentation-aware", ((0.5, 1),))).binds] == [("g2",)]


def _replace_new(snap: m.ClusterSnapshot, task: m.TaskSpec) -> m.ClusterSnapshot:
    jobs = tuple(job("new", "q", tasks=[task]) if j.name == "new" else j for j in snap.jobs)
    return snapshot(snap.nodes, snap.queues, jobs)


def test_a_gang_is_placed_whole_and_away_from_what_it_would_fragment():
    # a: 5 free, b: 6 free, c: 8 free; the typical pod takes 4 GPUs. Each 2-GPU pod goes where no
    # node is left unable to take a 4-GPU pod: b (6 -> 4), then c (8 -> 6); binpack fills a and b.
    nodes = [node("a"), node("b"), node("c")]
    jobs = [job("ra", "q", pods=3, running_on=["a"] * 3), job("rb", "q", pods=2, running_on=["b"] * 2),
            job("gang", "q", pods=2, gpus=2, min_available=2)]
    snap = snapshot(nodes, [queue("q", gpu_quota=100)], jobs)
    for placement, expected in (("fragmentation-aware", ["b", "c"]), ("binpack", ["a", "a"])):
        st_ = status_of(run_cycle(snap, _cfg(placement, ((4, 1),))))
        assert st_["gang-0"][0] == st_["gang-1"][0] == "Binding", placement
        assert sorted(st_[f"gang-{k}"][1] for k in range(2)) == expected, placement


def test_fragmentation_aware_cycles_are_deterministic_and_never_overcommit():
    nodes = [node(f"n{i}", gpus=4) for i in range(6)]
    jobs = []
    rng = np.random.default_rng(7)
    for k in range(30):
        f = float(rng.choice([0.25, 0.5, 0.75]))
        if k % 3 == 0:
            jobs.append(job(f"w{k}", "q", gpus=int(rng.integers(1, 4))))
        else:
            jobs.append(job(f"f{k}", "q", tasks=[fraction_task(f"f{k}-0", f)]))
    snap = snapshot(nodes, [queue("q", gpu_quota=100)], jobs)
    a = run_cycle(snap, _cfg("fragmentation-aware"))
    b = run_cycle(snap, _cfg("fragmentation-aware"))
    assert a.binds == b.binds
    assert len(a.binds) > 10
    gpus_of = {t.name: t.request.gpus for j in jobs for t in j.tasks}
    per_group: dict[tuple[str, str], float] = {}
    whole: dict[str, float] = {}
    groups: dict[str, set[str]] = {}
    for bd in a.binds:
        for g in bd.gpu_groups:
            per_group[(bd.node, g)] = per_group.get((bd.node, g), 0.0) + bd.gpu_portion
            groups.setdefault(bd.node, set()).add(g)
        if not bd.gpu_groups:
            whole[bd.node] = whole.get(bd.node, 0.0) + gpus_of[bd.task]
    assert all(v <= 1.0 + 1e-9 for v in per_group.values())
    for n in {bd.node for bd in a.binds}:
        assert whole.get(n, 0.0) + len(groups.get(n, ())) <= 4, n


def test_bad_typical_pods_in_the_cycle_config_are_named():
    with pytest.raises(ValueError, match=r"typical_pods\[0\]"):
        run_cycle(_whole_gpu_case(), _cfg("fragmentation-aware", ((1.5, 1),)))


def test_typical_pods_round_trip_through_the_config_dict():
    cfg = _cfg("fragmentation-aware", ((1.0, 0.5), (0.25, 0.5)))
    assert m.CycleConfig.from_dict(cfg.to_dict()) == cfg
