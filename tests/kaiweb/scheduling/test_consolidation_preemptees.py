"""KAI's max-consolidation-preemptees shard argument: how many victim jobs one consolidation may move."""

from __future__ import annotations

import dataclasses

import pytest

from kaiweb.scheduling.cycle import MAX_CONSOLIDATION_PREEMPTEES_ARG, cycle_config
from scheduler_core import model as m
from scheduler_core import run_cycle
from tests.celery.builders import small_cluster
from tests.scheduler_core.engine_builders import job, node, queue, snapshot

pytestmark = pytest.mark.django_db

KAI_DEFAULT = 16


def test_without_the_argument_kai_default_holds():
    sc = small_cluster(nodes=1)
    assert cycle_config(sc.shard).max_consolidation_preemptees == KAI_DEFAULT


@pytest.mark.parametrize(("value", "expected"), [("4000", 4000), (" 8 ", 8), ("0", 0), ("-1", KAI_DEFAULT),
                                                 ("many", KAI_DEFAULT), ("", KAI_DEFAULT), ("1.5", KAI_DEFAULT)])
def test_the_shard_argument_sets_the_cap(value, expected):
    sc = small_cluster(nodes=1)
    sc.shard.args = {MAX_CONSOLIDATION_PREEMPTEES_ARG: value}
    assert cycle_config(sc.shard).max_consolidation_preemptees == expected


def _three_busy_per_node(n: int = 10, gang_pods: int = 8) -> m.ClusterSnapshot:
    """KAI's scale scenario B9 at 10 nodes: 3 one-GPU pods on every node, a gang of 8 × 6 GPUs that
    fits only once pods are moved (more victim jobs than KAI's default cap of 16)."""
    nodes = [node(f"node-{i}", 8) for i in range(n)]
    qs = [queue("sanity", gpu_quota=0, weight=0), queue("team", gpu_quota=-1, creation=1)]
    jobs = [job(f"filler-{i}-{k}", "sanity", running_on=[f"node-{i}"], age=100) for i in range(n) for k in range(3)]
    jobs.append(job("gang", "team", pods=gang_pods, gpus=6, min_available=gang_pods, age=1))
    return snapshot(nodes, qs, jobs)


def test_a_raised_cap_lets_consolidation_move_what_the_default_cannot():
    sc = small_cluster(nodes=1)
    only_consolidation = ("allocate", "consolidation")
    default = dataclasses.replace(cycle_config(sc.shard), actions=only_consolidation)
    assert run_cycle(_three_busy_per_node(), default).evictions == ()

    sc.shard.args = {MAX_CONSOLIDATION_PREEMPTEES_ARG: "80"}
    raised = dataclasses.replace(cycle_config(sc.shard), actions=only_consolidation)
    result = run_cycle(_three_busy_per_node(), raised)
    assert result.evictions
    assert {e.action for e in result.evictions} == {"consolidation"}
    assert {p.task for p in result.pipelined} >= {f"gang-{i}" for i in range(8)}
