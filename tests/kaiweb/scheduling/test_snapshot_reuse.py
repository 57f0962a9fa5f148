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
        transaction.set_rollback(True)


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
