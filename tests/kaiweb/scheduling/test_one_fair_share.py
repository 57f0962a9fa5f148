"""One fair-share arithmetic: the queue page's division, the API's tree and the queue statuses a cycle
records give every queue the same fair share, on random clusters (cordoned and unready nodes, MIG
instances, whole and shared GPUs, gangs running and pending, quotas, limits and weights)."""

from __future__ import annotations

import uuid

import pytest
from django.core.cache import cache
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kaiweb.cluster.models import Node
from kaiweb.queues.models import Queue
from kaiweb.scheduling import cycle, fairshare
from kaiweb.scheduling.selectors import latest_statuses
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from scheduler_core.units import recorded_queue_units
from tests.celery.builders import GIB, T0, small_cluster

from .test_two_workers import _wipe

RESOURCES = ("cpu", "memory", "gpu")

nodes = st.lists(st.fixed_dictionaries({
    "gpus": st.integers(0, 8),
    "ready": st.booleans(),
    "cordoned": st.booleans(),
    "mig": st.sampled_from([{}, {"nvidia.com/mig-1g.10gb": 2}, {"nvidia.com/mig-3g.40gb": 1}]),
}), min_size=1, max_size=4)

queues = st.fixed_dictionaries({
    "gpu_quota": st.sampled_from([0, 1, 2, 4]),
    "gpu_limit": st.sampled_from([-1, 4, 8]),
    "gpu_over_quota_weight": st.sampled_from([0, 1, 3]),
    "cpu_quota": st.sampled_from([-1, 0, 4000]),
    "memory_quota": st.sampled_from([-1, 0, 8000]),
    "priority": st.sampled_from([100, 200]),
})

jobs = st.lists(st.tuples(
    st.sampled_from(["team-a", "team-b"]),
    st.integers(1, 3),  # pods
    st.sampled_from([1.0, 2.0, 0.5]),  # GPUs per pod (0.5: a shared GPU)
    st.booleans(),  # running already (placed by a first cycle)
), max_size=6)


def _cluster(node_rows: list[dict], queue_rows: dict[str, dict], k: float, job_rows: list[tuple]) -> object:
    sc = small_cluster(nodes=len(node_rows), gpus=4)
    sc.shard.k_value = k
    sc.shard.save()
    for node, row in zip(sc.nodes, node_rows, strict=True):
        Node.objects.filter(pk=node.pk).update(allocatable_gpu=row["gpus"], ready=row["ready"],
                                               unschedulable=row["cordoned"], extended_resources=row["mig"])
    for name, values in queue_rows.items():
        Queue.objects.filter(pk=sc.queues[name].pk).update(**values)
    for i, (queue, pods, per_pod, _running) in enumerate(job_rows):
        w = Workload.objects.create(cluster=sc.cluster, namespace="ns", name=f"job-{i}", uid=uuid.uuid4().hex,
                                    queue=sc.queues[queue], min_member=pods, state=WorkloadState.PENDING,
                                    submitted_at=T0)
        Pod.objects.bulk_create([
            Pod(workload=w, name=f"job-{i}-{p}", uid=uuid.uuid4().hex, gpu=0 if per_pod < 1 else per_pod,
                gpu_fraction=per_pod if per_pod < 1 else None, cpu=1000, memory=GIB, state=PodState.PENDING,
                duration_seconds=3600)
            for p in range(pods)
        ])
    return sc


@pytest.mark.django_db(transaction=True)
@hypothesis_settings(max_examples=8, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(node_rows=nodes, team_a=queues, team_b=queues, k=st.sampled_from([0.0, 1.0]), job_rows=jobs)
def test_the_page_the_api_and_the_recorded_status_show_one_fair_share(
    transactional_db: None, admin_api, node_rows: list[dict], team_a: dict, team_b: dict, k: float,
    job_rows: list[tuple],
) -> None:
    try:
        cache.clear()
        sc = _cluster(node_rows, {"team-a": team_a, "team-b": team_b}, k, job_rows)
        if any(running for *_, running in job_rows):
            # a first cycle places what fits, so the next divides a cluster with running gangs
            late = [f"job-{i}" for i, (*_, running) in enumerate(job_rows) if not running]
            Workload.objects.filter(name__in=late).update(state=WorkloadState.COMPLETED)
            cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
            Workload.objects.filter(name__in=late).update(state=WorkloadState.PENDING)

        page = fairshare.divide()
        assert page.errors == []
        outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=False)
        assert outcome.status == "succeeded"

        recorded = {q.name: latest_statuses([q.pk])[q.pk].fair_share for q in Queue.objects.all()}
        response = admin_api.get("/api/v1/queues/tree/")
        assert response.status_code == 200
        api: dict[str, dict[str, float]] = {}
        stack = list(response.json())
        while stack:
            node = stack.pop()
            api[node["name"]] = {r: node["resources"][r]["fair_share"] for r in RESOURCES}
            stack.extend(node["children"])

        shown = {name: recorded_queue_units(attrs.fair) for name, attrs in page.queues.items()}
        assert shown == recorded
        assert api == recorded
    finally:
        _wipe()
