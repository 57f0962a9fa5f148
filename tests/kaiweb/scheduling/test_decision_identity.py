"""A decision names the pod incarnation it is for; nothing is parsed back from its key."""

from __future__ import annotations

import pytest

from kaiweb.cluster.models import Cluster
from kaiweb.scheduling import cycle
from kaiweb.scheduling.choices import DecisionKind
from kaiweb.scheduling.models import Decision
from kaiweb.workloads import services
from kaiweb.workloads.choices import PodState
from kaiweb.workloads.models import Pod
from tests.celery.builders import small_cluster

pytestmark = pytest.mark.django_db


def test_two_workloads_with_pods_of_the_same_name_are_both_bound():
    sc = small_cluster(nodes=2)
    for name in ("a", "b"):
        services.create_workload({"cluster": sc.cluster, "namespace": "ns", "name": name, "queue": "team-a"},
                                 [{"name": "worker-0", "gpu": 4}])
    pods = list(Pod.objects.filter(workload__cluster=sc.cluster).order_by("workload__name"))
    assert all(p.uid for p in pods)
    assert pods[0].uid != pods[1].uid

    outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)

    assert outcome.binds == 2
    assert sorted(Pod.objects.filter(workload__cluster=sc.cluster).values_list("state", flat=True)) == [
        PodState.RUNNING, PodState.RUNNING]
    binds = Decision.objects.filter(kind=DecisionKind.BIND).order_by("workload_ref")
    assert [(d.namespace, d.pod_name, d.pod_uid) for d in binds] == [
        ("ns", "worker-0", pods[0].uid), ("ns", "worker-0", pods[1].uid)]


def test_without_a_shard_the_kubernetes_backend_schedules_the_mirrored_cluster(settings):
    small_cluster(nodes=1)  # a simulated cluster exists, and sorts first by name
    settings.KAI_CLUSTER_BACKEND = "kubernetes"

    shard = cycle.resolve_shard(None)

    assert shard.cluster.backend == "kubernetes"
    assert Cluster.objects.filter(backend="kubernetes").count() == 1


def test_without_a_shard_the_simulated_backend_schedules_a_simulated_cluster(settings):
    sc = small_cluster(nodes=1)
    settings.KAI_CLUSTER_BACKEND = "simulated"

    assert cycle.resolve_shard(None) == sc.shard


def test_a_shard_keeps_one_engine_memo_across_its_cycles():
    sc = small_cluster(nodes=1)
    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    memo = cycle._MEMOS[sc.shard.pk]
    cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
    assert cycle._MEMOS[sc.shard.pk] is memo
