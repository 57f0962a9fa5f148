"""Celery tasks of the scheduling app: thin, id/str arguments, the work is in `cycle.py`."""

from __future__ import annotations

from celery import shared_task

from kaiweb.cluster.models import SchedulingShard


@shared_task(name="scheduling.run_cycle", acks_late=True, ignore_result=False)
def run_cycle_task(shard_id: int | None = None, trigger: str = "beat") -> int | None:
    """Run one scheduling cycle of a shard; return the SchedulingCycle id (None if another
    worker holds the shard's lock, in which case this one returns at once)."""
    from kaiweb.scheduling.cycle import run_and_record_cycle

    outcome = run_and_record_cycle(shard_id, trigger=trigger)
    return outcome.cycle_id


@shared_task(name="scheduling.dispatch_cycles", ignore_result=True)
def dispatch_cycles_task() -> list[int]:
    """Beat entry: one `scheduling.run_cycle` per enabled shard, so shards run in parallel on
    different workers (each under its own lock). With the kubernetes backend, the mirrored
    cluster (and its default shard) exists from the first beat on, before any watcher ran."""
    from django.conf import settings

    if settings.KAI_CLUSTER_BACKEND == "kubernetes":
        from kaiweb.cluster.mirror import kubernetes_cluster

        kubernetes_cluster()
    shard_ids = list(
        SchedulingShard.objects.filter(enabled=True, cluster__enabled=True).order_by("pk").values_list("pk", flat=True)
    )
    for shard_id in shard_ids:
        run_cycle_task.delay(shard_id, "beat")
    return shard_ids
