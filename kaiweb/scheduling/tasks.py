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


@shared_task(name="scheduling.estimate_starts", ignore_result=True)
def estimate_starts_task(shard_id: int) -> int | None:
    """Refresh the start-time estimates of a shard's pending workloads (on the what-if queue, off the
    cycle's); the number estimated, None when the shard has no waiting line yet or another worker is at it."""
    from kaiweb.scheduling.estimates import refresh

    if not SchedulingShard.objects.filter(pk=shard_id).exists():
        return None
    return refresh(shard_id)


@shared_task(name="scheduling.dispatch_estimates", ignore_result=True)
def dispatch_estimates_task() -> list[int]:
    """Beat entry: one `scheduling.estimate_starts` per enabled shard."""
    shard_ids = list(
        SchedulingShard.objects.filter(enabled=True, cluster__enabled=True).order_by("pk").values_list("pk", flat=True)
    )
    for shard_id in shard_ids:
        estimate_starts_task.delay(shard_id)
    return shard_ids
