"""The product's parts of KAI's end-to-end scenarios: the cycle the runner (`devkube.e2e`) is
given to run after each step, and the invariants it is given to check after each cycle."""

from __future__ import annotations

from typing import Any

from kaiweb.cluster import mirror
from kaiweb.cluster.models import SchedulingShard
from kaiweb.scheduling.cycle import run_and_record_cycle
from kaiweb.scheduling.invariants import after_cycle
from kaiweb.scheduling.models import SchedulingCycle


def cycle_invariants(outcome: Any) -> list[str]:
    """The invariants after the cycle `product_cycle` ran (`kaiweb.scheduling.invariants`)."""
    cycle_id = getattr(outcome, "cycle_id", None)
    if cycle_id is None:
        return []
    return after_cycle(SchedulingCycle.objects.select_related("shard__cluster").get(pk=cycle_id))


def product_cycle() -> Any:
    """One scheduling cycle of the mirrored Kubernetes cluster's first shard, as a worker runs it."""
    cluster = mirror.kubernetes_cluster()
    shard = SchedulingShard.objects.filter(cluster=cluster, enabled=True).order_by("name").first()
    return run_and_record_cycle(shard, trigger="e2e")
