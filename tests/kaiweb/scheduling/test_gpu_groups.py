"""A bind's shared-GPU groups, one per device, from the engine to the gateway and back: every group
kept whole (none cut, none joined into one name), and what the cycle reads back the next time."""

from __future__ import annotations

import pytest

from kaiweb.cluster.backends.kubernetes import gpu_sharing
from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.backends.types import ActionOutcome, ActionResult, BindAction
from kaiweb.scheduling import adapters, cycle
from kaiweb.scheduling.choices import DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod
from tests.celery.builders import T0, SmallCluster, small_cluster, submit

pytestmark = pytest.mark.django_db


class RecordingGateway:
    """Takes every bind, remembers the action."""

    capabilities: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.binds: list[BindAction] = []

    def bind(self, action: BindAction) -> ActionResult:
        self.binds.append(action)
        return ActionResult(ActionOutcome.BOUND, "bound")


def _spread_pod(devices: int, fraction: float = 0.5) -> SmallCluster:
    sc = small_cluster(nodes=1, gpus=8)
    submit(sc, "team-a", "spread", pods=1, fraction=fraction)
    Pod.objects.filter(name="spread-0").update(gpu_devices=devices)
    return sc


def test_a_pod_on_four_shared_gpus_is_recorded_applied_and_read_back_with_its_four_groups():
    sc = _spread_pod(devices=4)

    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)

    assert outcome.binds == 1
    d = Decision.objects.get(kind=DecisionKind.BIND)
    assert d.status == DecisionStatus.APPLIED
    assert len(d.gpu_groups) == len(set(d.gpu_groups)) == 4
    assert len(",".join(d.gpu_groups)) > 64  # what one 64-character string used to cut
    assert all(gpu_sharing.GROUP_NAME.match(g) for g in d.gpu_groups)
    assert len(gpu_sharing.group_labels(d.gpu_groups)) == 4  # one label per device
    pod = Pod.objects.get(name="spread-0")
    assert pod.gpu_groups == d.gpu_groups

    snapshot, _ = adapters.build_snapshot(sc.shard, now=SimulatedGateway(sc.cluster).now(), reuse=False)
    (task,) = [t for j in snapshot.jobs for t in j.tasks]
    assert task.gpu_groups == tuple(d.gpu_groups)


def test_the_groups_a_cycle_records_are_the_groups_the_gateway_is_given_in_the_engine_order():
    sc = _spread_pod(devices=3)
    snapshot, index = adapters.build_snapshot(sc.shard, now=SimulatedGateway(sc.cluster).now(), reuse=False)
    result = cycle.engine_run_cycle(snapshot, cycle.cycle_config(sc.shard))
    (bind,) = result.binds
    row = SchedulingCycle.objects.create(shard=sc.shard, started_at=adapters.from_epoch(snapshot.now))

    decisions = adapters.persist_result(row, result, snapshot, index).decisions
    gateway = RecordingGateway()
    cycle.apply_decisions(gateway, decisions)

    named = [adapters.gpu_group_name(g, row.pk) for g in bind.gpu_groups]
    assert len(bind.gpu_groups) == 3
    assert Decision.objects.get(kind=DecisionKind.BIND).gpu_groups == named
    assert [a.gpu_groups for a in gateway.binds] == [tuple(named)]
    assert gateway.binds[0].gpu_portion == pytest.approx(0.5)


def test_a_group_read_from_the_cluster_keeps_its_name_and_the_next_cycle_shares_its_devices():
    sc = small_cluster(nodes=1, gpus=2)
    running = submit(sc, "team-a", "running", pods=1, fraction=0.5)
    node = sc.nodes[0]
    Pod.objects.filter(workload=running).update(state=PodState.RUNNING, node=node, gpu_devices=2,
                                                gpu_groups=["dev-a", "dev-b"])
    running.state = WorkloadState.RUNNING
    running.save(update_fields=["state"])
    submit(sc, "team-b", "late", pods=1, fraction=0.5)
    Pod.objects.filter(name="late-0").update(gpu_devices=2)

    snapshot, _ = adapters.build_snapshot(sc.shard, now=SimulatedGateway(sc.cluster).now(), reuse=False)
    held = {t.name: t.gpu_groups for j in snapshot.jobs for t in j.tasks}
    assert held["running-0"] == ("dev-a", "dev-b")

    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)

    # Two devices on the node, both half given: the late pod can only have the other halves.
    d = Decision.objects.get(kind=DecisionKind.BIND, pod_name="late-0")
    assert sorted(d.gpu_groups) == ["dev-a", "dev-b"]



@pytest.mark.django_db(transaction=True)
def test_the_migration_reads_the_joined_groups_back_as_a_list_and_drops_a_name_cut_short():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("workloads", "0010_gpu_groups_tuple"), ("scheduling", "0009_gpu_groups_tuple")]
    after = [("workloads", "0011_gpu_groups_tuple_copy"), ("scheduling", "0010_gpu_groups_tuple_copy")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    cut = ",".join(f"gpu-group-{i:020d}" for i in range(3))[:64]  # two whole names and a part
    cluster = old.get_model("cluster", "Cluster").objects.create(name="old", backend="simulated")
    queue = old.get_model("queues", "Queue").objects.create(name="q")
    workload = old.get_model("workloads", "Workload").objects.create(cluster=cluster, namespace="ns", name="w",
                                                                     queue=queue, submitted_at=T0)
    for name, group in (("one", "g-1"), ("cut", cut), ("none", "")):
        old.get_model("workloads", "Pod").objects.create(workload=workload, name=name, gpu_group=group)
    run = old.get_model("scheduling", "SchedulingCycle").objects.create(started_at=T0)
    old.get_model("scheduling", "Decision").objects.create(cycle=run, kind="bind", workload_ref="ns/w",
                                                           gpu_group=cut, reason="Allocated", idempotency_key="k")
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        pods = dict(new.get_model("workloads", "Pod").objects.values_list("name", "gpu_groups"))
        decided = list(new.get_model("scheduling", "Decision").objects.values_list("gpu_groups", flat=True))
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    whole = [f"gpu-group-{i:020d}" for i in range(2)]
    assert pods == {"one": ["g-1"], "cut": whole, "none": []}
    assert decided == [whole]


@pytest.mark.parametrize(("state", "on_node", "version", "given"), [
    (PodState.PENDING, False, "4711", "4711"),  # seen unbound at that version: the guard
    (PodState.PENDING, False, "", ""),  # no version known: the pod is read first
    (PodState.BINDING, True, "4711", ""),  # a bind recorded on the row: the version says nothing of it
])
def test_a_shared_gpu_bind_carries_the_version_the_mirror_saw_the_pod_unbound_at(state, on_node, version, given):
    sc = _spread_pod(devices=1)
    snapshot, index = adapters.build_snapshot(sc.shard, now=SimulatedGateway(sc.cluster).now(), reuse=False)
    result = cycle.engine_run_cycle(snapshot, cycle.cycle_config(sc.shard))
    row = SchedulingCycle.objects.create(shard=sc.shard, started_at=adapters.from_epoch(snapshot.now))
    decisions = adapters.persist_result(row, result, snapshot, index).decisions
    Pod.objects.filter(name="spread-0").update(state=state, node=sc.nodes[0] if on_node else None,
                                               resource_version=version)
    gateway = RecordingGateway()

    cycle.apply_decisions(gateway, decisions)

    assert [a.resource_version for a in gateway.binds] == [given]
