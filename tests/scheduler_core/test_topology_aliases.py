"""Engine: a topology constraint names a level by its node label or by its alias (KAI's
``spec.levels[].alias``); a topology or level that does not exist keeps the constrained pods
pending with a reason naming it, never as if there were no constraint (KAI fails such a placement,
a preferred level too)."""

from __future__ import annotations

import pytest

from scheduler_core import model as m
from scheduler_core import reasons, run_cycle
from tests.scheduler_core.engine_builders import ALLOCATE_ONLY, NOW, gpu_task, job, node, queue, status_of

ZONE, RACK, HOST = "example.com/zone", "example.com/rack", "kubernetes.io/hostname"
TOPO = m.TopologySpec("dc", (ZONE, RACK, HOST), ("zone", "rack", ""))
RACKS = {"a1": "r1", "a2": "r1", "b1": "r2", "b2": "r2"}


def _nodes() -> list[m.NodeSpec]:
    return [node(n, 2, labels={ZONE: "z1", RACK: r, HOST: n}) for n, r in RACKS.items()]


def _gang(tc: m.TopologyConstraint, pods: int = 3) -> m.JobSpec:
    return m.JobSpec("g", "q", tasks=tuple(gpu_task(f"g-{i}", 1) for i in range(pods)),
                     subgroups=m.SubGroupSpec("", None, tc, (m.PodSetSpec("default", pods),)))


def _cycle(*jobs: m.JobSpec, topologies: tuple[m.TopologySpec, ...] = (TOPO,)) -> m.CycleResult:
    # rack r1 keeps only 2 free GPUs: a1 runs a 2-GPU pod; packing alone would start there
    running = job("r", "q", pods=1, gpus=2, running_on=["a1"])
    snap = m.ClusterSnapshot(nodes=tuple(_nodes()), queues=(queue("q", gpu_quota=8),), jobs=(running, *jobs),
                             topologies=topologies, now=NOW)
    return run_cycle(snap, ALLOCATE_ONLY)


def _racks(result: m.CycleResult, prefix: str) -> set[str]:
    return {RACKS[node] for task, (_, node) in status_of(result).items() if task.startswith(prefix) and node}


def test_a_level_is_found_by_its_alias_or_its_node_label():
    assert TOPO.level_label("rack") == RACK
    assert TOPO.level_label(RACK) == RACK
    assert TOPO.level_label(HOST) == HOST
    assert TOPO.level_label("host") is None
    assert TOPO.describe_levels() == f"{ZONE} (alias zone), {RACK} (alias rack), {HOST}"


@pytest.mark.parametrize("level", ["rack", RACK])
def test_a_required_level_named_by_alias_keeps_the_gang_in_one_domain(level):
    result = _cycle(_gang(m.TopologyConstraint("dc", required_level=level)))
    assert len([b for b in result.binds if b.job == "g"]) == 3
    assert _racks(result, "g-") == {"r2"}


def test_a_preferred_level_named_by_alias_is_honoured_under_a_required_one():
    result = _cycle(_gang(m.TopologyConstraint("dc", required_level="zone", preferred_level="rack")))
    assert len([b for b in result.binds if b.job == "g"]) == 3
    assert _racks(result, "g-") == {"r2"}


@pytest.mark.parametrize("on", ["pod set", "subgroup set"])
def test_a_subgroup_constraint_named_by_alias_keeps_its_pods_in_one_domain(on):
    tc = m.TopologyConstraint("dc", required_level="rack")
    tasks = tuple(gpu_task(f"w-{i}", 1, subgroup="workers") for i in range(3))
    if on == "pod set":
        tree = m.SubGroupSpec("", None, None, (m.PodSetSpec("workers", 3, tc),))
    else:
        tree = m.SubGroupSpec("", None, None, (), (m.SubGroupSpec("train", None, tc, (m.PodSetSpec("workers", 3),)),))
    result = _cycle(m.JobSpec("g", "q", tasks=tasks, subgroups=tree))
    assert len([b for b in result.binds if b.job == "g"]) == 3
    assert _racks(result, "w-") == {"r2"}


@pytest.mark.parametrize("placement", ["required", "preferred"])
def test_an_unknown_level_keeps_the_gang_pending_with_a_reason_naming_it_and_the_levels(placement):
    tc = m.TopologyConstraint("dc", **{f"{placement}_level": "rakc"})
    result = _cycle(_gang(tc, pods=1))
    assert [b for b in result.binds if b.job == "g"] == []
    why = result.pending["g"]
    assert why.code == reasons.TOPOLOGY_UNKNOWN
    assert f"'rakc' is its {placement} topology level" in why.message
    assert f"(levels: {ZONE} (alias zone), {RACK} (alias rack), {HOST})" in why.message
    assert why.details["level"] == "rakc"
    assert why.details["levels"] == [ZONE, RACK, HOST]


def test_an_unknown_level_of_a_subgroup_names_the_subgroup():
    tc = m.TopologyConstraint("dc", required_level="row")
    spec = m.JobSpec("g", "q", tasks=(gpu_task("w-0", 1, subgroup="workers"),),
                     subgroups=m.SubGroupSpec("", None, None, (m.PodSetSpec("workers", 1, tc),)))
    result = _cycle(spec)
    assert result.binds == ()
    assert result.pending["g"].code == reasons.TOPOLOGY_UNKNOWN
    assert "sub-group workers" in result.pending["g"].message


def test_a_topology_that_does_not_exist_keeps_the_gang_pending():
    result = _cycle(_gang(m.TopologyConstraint("nope", required_level="rack"), pods=1))
    assert result.binds == ()
    why = result.pending["g"]
    assert why.code == reasons.TOPOLOGY_UNKNOWN
    assert "names topology 'nope', which does not exist (topologies: dc)" in why.message


def test_the_snapshot_keeps_aliases_through_its_json_form():
    snap = m.ClusterSnapshot(topologies=(TOPO,))
    assert m.ClusterSnapshot.from_dict(snap.to_dict()).topologies == (TOPO,)


def test_a_zone_gang_named_by_alias_reclaims_one_zone_only():
    # 8 nodes × 8 GPUs, their zones alternating, full of one-GPU pods of a queue without quota; a
    # gang of 4 pods × 8 GPUs, required zone by its alias, in a queue whose quota is half the cluster
    nodes = [node(f"n{i}", 8, labels={ZONE: f"z{i % 2}", RACK: f"r{i}", HOST: f"n{i}"}) for i in range(8)]
    qs = [queue("filler", gpu_quota=0), queue("team", gpu_quota=32, creation=1)]
    jobs = [job(f"f-{i}", "filler", running_on=[nodes[i % 8].name], age=1000 - i, priority=40) for i in range(64)]
    tc = m.TopologyConstraint("dc", required_level="zone")
    jobs.append(m.JobSpec("hero", "team", tasks=tuple(gpu_task(f"hero-{i}", 8) for i in range(4)), priority=50,
                          creation=NOW, subgroups=m.SubGroupSpec("", None, tc, (m.PodSetSpec("default", 4),))))
    snap = m.ClusterSnapshot(nodes=tuple(nodes), queues=tuple(qs), jobs=tuple(jobs), topologies=(TOPO,), now=NOW)
    result = run_cycle(snap, m.CycleConfig(actions=("reclaim",)))
    zone_of = {n.name: n.labels[ZONE] for n in nodes}
    hero = [p for p in result.pipelined if p.job == "hero"]
    assert len(hero) == 4
    assert {zone_of[p.node] for p in hero} == {zone_of[e.node] for e in result.evictions}
    assert len({zone_of[p.node] for p in hero}) == 1
    assert len(result.evictions) == 32
