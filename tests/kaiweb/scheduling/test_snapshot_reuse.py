"""The snapshot keeps the objects of rows that did not change (adapters._Built): every build equals a
plain one, whatever changed in between."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kaiweb.cluster.models import Node
from kaiweb.queues.models import PriorityClass
from kaiweb.scheduling import adapters
from kaiweb.workloads.choices import PodState, WorkloadState
from kaiweb.workloads.models import Pod, Workload
from tests.celery.builders import T0, small_cluster, submit

pytestmark = pytest.mark.django_db

CHANGES = ("bind", "constraints", "class", "class-value", "rename-node", "resubmit", "new", "finish",
           "started", "restrict", "nothing")


def _cluster():
    sc = small_cluster(nodes=3)
    for name in ("train", "build"):
        PriorityClass.objects.get_or_create(name=name, defaults={"value": 50 if name == "train" else 100})
    for i in range(6):
        submit(sc, "team-a" if i % 2 else "team-b", f"job-{i}", pods=1 + i % 3, fraction=0.5 if i == 4 else None)
    return sc


def _apply(sc, change: str, k: int) -> None:
    workloads = list(Workload.objects.filter(cluster=sc.cluster).order_by("name"))
    w = workloads[k % len(workloads)]
    pod = Pod.objects.filter(workload=w).order_by("name").first()
    if change == "bind" and pod is not None:
        Pod.objects.filter(pk=pod.pk).update(state=PodState.RUNNING, node=sc.nodes[k % len(sc.nodes)])
    elif change == "constraints" and pod is not None:
        Pod.objects.filter(pk=pod.pk).update(constraints={"nodeSelector": {"zone": f"z{k % 2}"}})
    elif change == "class":
        Workload.objects.filter(pk=w.pk).update(priority_class=PriorityClass.objects.get(name="build"))
    elif change == "class-value":
        PriorityClass.objects.filter(name="train").update(value=50 + k)
    elif change == "rename-node":
        Node.objects.filter(pk=sc.nodes[k % len(sc.nodes)].pk).update(name=f"renamed-{k}")
    elif change == "resubmit":
        Workload.objects.filter(pk=w.pk).update(submitted_at=T0 - dt.timedelta(seconds=k + 1))
    elif change == "new":
        submit(sc, "team-a", f"new-{k}-{Workload.objects.count()}", pods=2)
    elif change == "finish":
        Workload.objects.filter(pk=w.pk).update(state=WorkloadState.COMPLETED)
    elif change == "started":
        Workload.objects.filter(pk=w.pk).update(last_start_at=T0 + dt.timedelta(seconds=k))
    elif change == "restrict":
        on = "false" if (sc.shard.args or {}).get(adapters.RESTRICT_NODE_SCHEDULING_ARG) == "true" else "true"
        sc.shard.args = {adapters.RESTRICT_NODE_SCHEDULING_ARG: on}
        sc.shard.save(update_fields=["args"])
        if on == "true":
            Node.objects.filter(pk=sc.nodes[0].pk).update(labels={adapters.GPU_WORKER_LABEL: "true"})


@hypothesis_settings(max_examples=30, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 20)), min_size=1, max_size=6))
def test_a_build_that_keeps_unchanged_rows_equals_a_plain_build(db, steps):
    with transaction.atomic():
        _check_steps(steps, again=False)
        transaction.set_rollback(True)


def _check_steps(steps: list[tuple[str, int]], again: bool) -> None:
    """Apply each change; after it a build equals a plain build, and (``again``) so does the next
    build with nothing changed in between, which returns the same objects."""
    adapters.forget_built_snapshots()
    sc = _cluster()
    adapters.build_snapshot(sc.shard, now=T0.timestamp())
    for change, k in steps:
        _apply(sc, change, k)
        sc.shard.refresh_from_db()
        kept, kept_index = adapters.build_snapshot(sc.shard, now=T0.timestamp())
        plain, plain_index = adapters.build_snapshot(sc.shard, now=T0.timestamp(), reuse=False)
        assert kept == plain
        assert kept_index == plain_index
        if again:
            repeat, repeat_index = adapters.build_snapshot(sc.shard, now=T0.timestamp())
            assert repeat == plain
            assert repeat_index == plain_index
            assert all(a is b for a, b in zip(repeat.jobs, kept.jobs))


def test_only_what_changed_is_made_anew():
    adapters.forget_built_snapshots()
    sc = _cluster()
    first, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp())
    changed = Workload.objects.get(name="job-2")
    Pod.objects.filter(workload=changed).update(state=PodState.RUNNING, node=sc.nodes[0])

    second, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp() + 60)

    before = {j.name: j for j in first.jobs}
    for job in second.jobs:
        assert (job is before[job.name]) == (job.name != "job-2"), job.name
    assert {t.state for t in next(j for j in second.jobs if j.name == "job-2").tasks} == {"Running"}


def test_a_plain_build_neither_uses_nor_leaves_anything():
    adapters.forget_built_snapshots()
    sc = _cluster()
    first, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp(), reuse=False)
    second, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp())
    assert first == second
    assert not any(a is b for a, b in zip(first.jobs, second.jobs))


def test_a_changed_context_makes_every_object_anew():
    adapters.forget_built_snapshots()
    sc = _cluster()
    first, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp())
    PriorityClass.objects.filter(name="train").update(value=7)

    second, _ = adapters.build_snapshot(sc.shard, now=T0.timestamp())

    assert not any(a is b for a, b in zip(first.jobs, second.jobs))
    assert {j.priority for j in second.jobs} == {7}


def _wipe() -> None:
    """Remove what ``_cluster`` and the changes made (a test whose writes are committed)."""
    from kaiweb.cluster.models import Cluster, SchedulingShard
    from kaiweb.queues.models import Queue

    Pod.objects.all().delete()
    Workload.objects.all().delete()
    Node.objects.all().delete()
    Queue.objects.filter(parent__isnull=False).delete()
    Queue.objects.all().delete()
    PriorityClass.objects.all().delete()
    SchedulingShard.objects.all().delete()
    Cluster.objects.all().delete()


def _pod_or_workload_reads(build) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        build()
    return sum(1 for q in queries.captured_queries if '"workloads_pod"' in q["sql"] or '"workloads_workload"' in q["sql"])


@pytest.mark.django_db(transaction=True)
@hypothesis_settings(max_examples=12, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 20)), min_size=1, max_size=5))
def test_with_every_change_committed_a_build_equals_a_plain_build(transactional_db, steps):
    """Each change commits, so the change counter moves; a build right after one equals a plain
    build, and a build with nothing committed since returns the same objects without reading."""
    try:
        _check_steps(steps, again=True)
    finally:
        adapters.forget_built_snapshots()
        _wipe()


@pytest.mark.django_db(transaction=True)
def test_a_build_reads_no_workload_row_until_a_change_is_committed():
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the change counter is kept by Postgres triggers; elsewhere every build reads every row")
    try:
        adapters.forget_built_snapshots()
        sc = _cluster()

        def build():
            return adapters.build_snapshot(sc.shard, now=T0.timestamp())

        assert _pod_or_workload_reads(build) == 2
        assert _pod_or_workload_reads(build) == 0
        first, _ = build()
        Pod.objects.filter(workload__name="job-2").update(state=PodState.RUNNING, node=sc.nodes[0])
        assert _pod_or_workload_reads(build) == 2
        second, _ = build()
        assert {t.state for t in next(j for j in second.jobs if j.name == "job-2").tasks} == {"Running"}
        assert [a is b for a, b in zip(first.jobs, second.jobs)] == [j.name != "job-2" for j in first.jobs]
        assert _pod_or_workload_reads(lambda: adapters.build_snapshot(sc.shard, now=T0.timestamp(), reuse=False)) == 2
    finally:
        adapters.forget_built_snapshots()
        _wipe()
