"""What a worker process remembers between cycles (the engine's memo and the last record per shard
in ``scheduling.cycle``, the last snapshot build per shard in ``scheduling.adapters``) never changes a
decision: two workers taking turns on one shard, each with its own memory, decide exactly what one
worker decides, cycle after cycle (why-pending included)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management.color import no_style
from django.db import connection
from hypothesis import HealthCheck, event, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kaiweb.cluster.models import Node
from kaiweb.scheduling import adapters, cycle
from kaiweb.scheduling.models import Decision, PendingReason, SchedulingCycle
from kaiweb.workloads.choices import WorkloadState
from kaiweb.workloads.models import Pod, Workload
from tests.celery.builders import SmallCluster, small_cluster, submit

# "cordon" turns a node's unschedulable over: twice, and the cluster is as it was.
CHANGES = ("whole", "gang", "shared", "shared-two", "short", "finish", "cordon", "cordon", "nothing", "nothing")


class Worker:
    """One worker process's memory: the three per-process tables, swapped in while it runs a cycle."""

    def __init__(self) -> None:
        self.memos: dict[Any, Any] = {}
        self.recorded: dict[Any, Any] = {}
        self.built: dict[Any, Any] = {}

    @contextmanager
    def running(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        with monkeypatch.context() as m:
            m.setattr(cycle, "_MEMOS", self.memos)
            m.setattr(cycle, "_RECORDED", self.recorded)
            m.setattr(adapters, "_BUILT", self.built)
            yield


def _change(sc: SmallCluster, change: str, k: int, n: int) -> None:
    queue = "team-a" if k % 2 else "team-b"
    name = f"{change}-{n}"
    if change == "whole":
        submit(sc, queue, name, pods=1, gpus_per_pod=1 + k % 4)
    elif change == "gang":
        submit(sc, queue, name, pods=2 + k % 3, gpus_per_pod=2)
    elif change in ("shared", "shared-two"):
        submit(sc, queue, name, pods=1 + k % 2, fraction=(0.25, 0.5, 0.75)[k % 3])
        if change == "shared-two":
            Pod.objects.filter(workload__name=name).update(gpu_devices=2)
    elif change == "short":
        submit(sc, queue, name, pods=1, gpus_per_pod=1 + k % 2, duration=60)
    elif change == "cordon":
        node = sc.nodes[k % len(sc.nodes)]
        node.refresh_from_db()
        Node.objects.filter(pk=node.pk).update(unschedulable=not node.unschedulable)
    elif change == "finish":
        running = list(Workload.objects.filter(state=WorkloadState.RUNNING).order_by("name"))
        if running:
            Workload.objects.filter(pk=running[k % len(running)].pk).update(state=WorkloadState.COMPLETED)


def _trace(steps: list[tuple[str, int, int, bool]], workers: list[Worker],
           monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Per cycle, what was decided and every workload's current why-pending. Cycle ids start again
    at 1 in each run: a new shared-GPU group is named from its cycle's id."""
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_by_name_sql(
                no_style(), [{"table": SchedulingCycle._meta.db_table, "column": "id"}]):
            cursor.execute(sql)
    sc = small_cluster(nodes=2, gpus=4)
    for i in range(3):
        submit(sc, "team-a" if i % 2 else "team-b", f"backlog-{i}", pods=2, gpus_per_pod=3)
    out = []
    for n, (change, k, who, advance) in enumerate(steps):
        _change(sc, change, k, n)
        with workers[who % len(workers)].running(monkeypatch):
            outcome = cycle.run_and_record_cycle(sc.shard, trigger="test", advance=advance)
        decided = sorted((d.kind, d.workload_ref, d.pod_name, d.node_name, d.status, d.reason, d.message,
                          tuple(d.gpu_groups), d.numbers)
                         for d in Decision.objects.filter(cycle_id=outcome.cycle_id))
        why = sorted(PendingReason.objects.filter(is_current=True)
                     .values_list("workload__name", "reason", "message"))
        out.append((outcome.cycle_id, outcome.status, decided, why))
        if outcome.result is not None:
            event(f"reused a quiet result: {bool(outcome.result.counts.get('reused'))}")
    return out


def _wipe() -> None:
    from kaiweb.cluster.models import Cluster, SchedulingShard
    from kaiweb.queues.models import Queue

    SchedulingCycle.objects.all().delete()
    Pod.objects.all().delete()
    Workload.objects.all().delete()
    Node.objects.all().delete()
    Queue.objects.filter(parent__isnull=False).delete()
    Queue.objects.all().delete()
    SchedulingShard.objects.all().delete()
    Cluster.objects.all().delete()


@pytest.mark.django_db(transaction=True)
@hypothesis_settings(max_examples=15, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# One worker's quiet cycle; the other cordons a node (different reasons) and the first, uncordoning
# it, sees its own quiet snapshot again: its memory is of a record that is no longer the latest.
@example(steps=[("nothing", 0, 0, False), ("nothing", 0, 0, False), ("cordon", 0, 1, False), ("cordon", 0, 0, False)])
@given(steps=st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 11), st.integers(0, 1), st.booleans()),
                      min_size=2, max_size=7))
def test_two_workers_taking_turns_on_a_shard_decide_what_one_worker_decides(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch, steps: list[tuple[str, int, int, bool]],
) -> None:
    """A step changes the cluster (or nothing), then one of the workers runs a cycle, the clock
    moving on or not (a cycle right after another: the engine may reuse a quiet result)."""
    try:
        alone = _trace(steps, [Worker()], monkeypatch)
        _wipe()
        together = _trace(steps, [Worker(), Worker()], monkeypatch)
    finally:
        _wipe()

    assert together == alone
