"""KAI's restrict-node-scheduling shard argument: GPU pods on GPU workers, the rest on CPU workers."""

from __future__ import annotations

import pytest

from kaiweb.scheduling import adapters
from scheduler_core import model as m
from tests.celery.builders import small_cluster, submit

pytestmark = pytest.mark.django_db


def _cluster_with_roles():
    sc = small_cluster(nodes=3)
    nodes = list(sc.cluster.nodes.order_by("name"))
    nodes[0].labels = {**nodes[0].labels, adapters.GPU_WORKER_LABEL: "true"}
    nodes[1].labels = {**nodes[1].labels, adapters.CPU_WORKER_LABEL: "true"}
    for n in nodes[:2]:
        n.save(update_fields=["labels"])
    return sc, [n.name for n in nodes]


def test_without_the_argument_every_node_is_used():
    sc, names = _cluster_with_roles()
    snapshot, _ = adapters.build_snapshot(sc.shard, now=0.0)
    assert [n.name for n in snapshot.nodes] == names


def test_with_the_argument_unmarked_nodes_are_left_out_and_pods_need_their_role():
    sc, names = _cluster_with_roles()
    sc.shard.args = {"restrict-node-scheduling": "true"}
    sc.shard.save(update_fields=["args"])
    submit(sc, "team-a", "gpu-job", pods=1, gpus_per_pod=1)

    snapshot, _ = adapters.build_snapshot(sc.shard, now=0.0)

    assert [n.name for n in snapshot.nodes] == names[:2]
    (task,) = snapshot.jobs[0].tasks
    assert task.required_node_affinity == (
        m.NodeSelectorTerm(match_expressions=(m.NodeSelectorRequirement(adapters.GPU_WORKER_LABEL, "Exists"),)),)


def test_a_cpu_pod_needs_a_cpu_worker_and_keeps_its_own_affinity():
    own = m.NodeSelectorTerm(match_expressions=(m.NodeSelectorRequirement("zone", "In", ("a",)),))
    out = adapters.worker_role_constraint({"required_node_affinity": (own,)}, m.TaskRequest(cpu_millis=100))
    (term,) = out["required_node_affinity"]
    assert term.match_expressions == (own.match_expressions[0],
                                      m.NodeSelectorRequirement(adapters.CPU_WORKER_LABEL, "Exists"))
