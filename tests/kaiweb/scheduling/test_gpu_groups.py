"""A bind's shared-GPU groups, one per device, from the engine to the gateway and back: every group
kept whole (none cut, none joined into one name), and what the cycle reads back the next time."""

from __future__ import annotations

import pytest

from kaiweb.cluster.backends import gpu_sharing
from kaiweb.cluster.backends.simulated import SimulatedGateway
from kaiweb.cluster.backends.types import ActionOutcome, ActionResult, BindAction
from kaiweb.scheduling import adapters, cycle
from kaiweb.scheduling.choices import DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod
from tests.celery.builders import SmallCluster, small_cluster, submit

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

    decisions = adapters.persist_result(row, result, snapshot, index)
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

