"""The typical GPU pods of a shard, learned from its recent workloads (fragmentation-aware placement).

A rolling window: the GPU pods of the workloads submitted to the shard in the last
``TYPICAL_PODS_WINDOW`` (at most ``TYPICAL_PODS_MAX_PODS``, newest first), counted by GPU request.
With no such pod the engine's default (``scheduler_core.placement.DEFAULT_TYPICAL_PODS``) applies.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

from kaiweb.cluster.models import Node, SchedulingShard
from kaiweb.core import clock
from kaiweb.workloads.models import Pod

TYPICAL_PODS_WINDOW = dt.timedelta(days=7)
TYPICAL_PODS_MAX_PODS = 5000
# Keep the most common requests until they cover this share of the pods (FGD's rule).
TYPICAL_PODS_COVERAGE = 0.95
# Fractions are counted in steps of 1/20 of a GPU, so near-equal requests make one typical pod.
FRACTION_STEP = 0.05


def _gpus_per_pod(gpu: float, fraction: float | None, memory_mib: int | None, device_mib: int) -> float | None:
    """A pod's GPU request as the engine's typical pods take it; None for a pod without GPUs."""
    if fraction is not None:
        share = fraction
    elif memory_mib:
        if device_mib <= 0:
            return None  # GPU memory of the shard's devices unknown: the share cannot be told
        share = memory_mib / device_mib
    elif gpu > 0:
        return float(max(1, round(gpu)))
    else:
        return None
    if share >= 1:
        return 1.0
    return max(FRACTION_STEP, round(round(share / FRACTION_STEP) * FRACTION_STEP, 4))


def shard_typical_pods(shard: SchedulingShard, now: dt.datetime | None = None,
                       window: dt.timedelta = TYPICAL_PODS_WINDOW) -> tuple[tuple[float, float], ...]:
    """``CycleConfig.typical_pods`` for a shard: ``learned_typical_pods`` when the shard uses
    fragmentation-aware placement, else empty (and nothing is read)."""
    if shard.gpu_placement != "fragmentation-aware":
        return ()
    return learned_typical_pods(shard, now, window)


def learned_typical_pods(shard: SchedulingShard, now: dt.datetime | None = None,
                         window: dt.timedelta = TYPICAL_PODS_WINDOW) -> tuple[tuple[float, float], ...]:
    """The shard's typical GPU pods: (GPUs per pod, share of pods), most common first, until they
    cover ``TYPICAL_PODS_COVERAGE`` of the window's GPU pods. Empty when the window has no GPU pod
    (the engine's default applies). Two queries."""
    return learned_typical_pods_by_shard([shard], now, window)[shard.pk]


def learned_typical_pods_by_shard(shards: list[SchedulingShard], now: dt.datetime | None = None,
                                  window: dt.timedelta = TYPICAL_PODS_WINDOW) -> dict[int, tuple[tuple[float, float], ...]]:
    """``learned_typical_pods`` of several shards, by shard id, in two queries."""
    if not shards:
        return {}
    since = (now or clock.now()) - window
    clusters = {s.cluster_id for s in shards}
    # a GPU-memory request is a share of the shard's most common GPU
    memories: dict[int, Counter[int]] = {s.pk: Counter() for s in shards}
    for cluster_id, labels, mib in Node.objects.filter(cluster_id__in=clusters, gpu_memory_mib__gt=0).values_list(
            "cluster_id", "labels", "gpu_memory_mib"):
        for s in shards:
            if s.holds(cluster_id, labels):
                memories[s.pk][mib] += 1
    device_mib = {pk: c.most_common(1)[0][0] if c else 0 for pk, c in memories.items()}
    rows = (Pod.objects.filter(workload__cluster_id__in=clusters, workload__submitted_at__gte=since)
            .order_by("-workload__submitted_at", "pk")
            .values_list("workload__cluster_id", "workload__labels", "gpu", "gpu_fraction", "gpu_memory_mib")
            [:TYPICAL_PODS_MAX_PODS * len(shards)])
    counts: dict[int, Counter[float]] = {s.pk: Counter() for s in shards}
    for cluster_id, labels, gpu, fraction, memory_mib in rows:
        shard = next((s for s in shards if s.holds(cluster_id, labels)), None)
        if shard is None or sum(counts[shard.pk].values()) >= TYPICAL_PODS_MAX_PODS:
            continue
        gpus = _gpus_per_pod(gpu, fraction, memory_mib, device_mib[shard.pk])
        if gpus is not None:
            counts[shard.pk][gpus] += 1
    return {pk: _most_common(c) for pk, c in counts.items()}


def _most_common(counts: Counter[float]) -> tuple[tuple[float, float], ...]:
    total = sum(counts.values())
    if not total:
        return ()
    kept: list[tuple[float, float]] = []
    covered = 0
    for gpus, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        kept.append((gpus, round(n / total, 6)))
        covered += n
        if covered >= TYPICAL_PODS_COVERAGE * total:
            break
    return tuple(kept)
