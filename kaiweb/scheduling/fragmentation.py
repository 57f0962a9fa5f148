"""Stranded GPUs: free GPU capacity that none of a shard's typical pods can use, per node and cluster.

The measure is the engine's (``scheduler_core.placement.stranded_gpu_milli``), fed with each node's
free share per GPU as the database sees it (whole-GPU pods take whole devices, each shared-GPU group
one device) and the typical pods of the node's shard (``typical_pods.learned_typical_pods``, or the
engine's default without history). Shown on the node map and exported on /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kaiweb.cluster.models import Node, SchedulingShard
from kaiweb.scheduling.typical_pods import learned_typical_pods_by_shard
from kaiweb.workloads.choices import ALLOCATED_POD_STATES
from scheduler_core import placement


def free_per_gpu(nodes: Iterable[Node]) -> dict[int, list[float]]:
    """Per node id, the free share (0..1) of each of its GPUs, from the pods placed on it, and each of its
    DRA GPU devices no claim holds as one free GPU (`Node.dra_gpus`, as the node map counts them). One query."""
    from kaiweb.workloads.models import Pod

    nodes = list(nodes)
    used_whole: dict[int, float] = {}
    groups: dict[int, dict[str, float]] = {}
    rows = (Pod.objects.filter(node_id__in=[n.pk for n in nodes], state__in=ALLOCATED_POD_STATES)
            .values_list("pk", "node_id", "gpu", "gpu_fraction", "gpu_devices", "gpu_groups"))
    for pk, node_id, gpu, fraction, devices, names in rows:
        if fraction:
            # one group per device; a pod not yet given its groups, one device of its own per request
            for key in names or [f"pod-{pk}/{k}" for k in range(max(1, devices or 1))]:
                shares = groups.setdefault(node_id, {})
                shares[key] = shares.get(key, 0.0) + fraction
        else:
            used_whole[node_id] = used_whole.get(node_id, 0.0) + float(gpu or 0)
    out: dict[int, list[float]] = {}
    for n in nodes:
        shared = groups.get(n.pk, {})
        whole = max(0, int(n.allocatable_gpu) - int(round(used_whole.get(n.pk, 0.0))) - len(shared))
        out[n.pk] = [1.0] * (whole + n.dra_gpus()[1]) + [max(0.0, 1.0 - used) for used in shared.values()]
    return out


def stranded_gpus(free: list[list[float]], typical_pods: tuple[tuple[float, float], ...]) -> list[float]:
    """Per node (a list of free GPU shares), the GPUs no typical pod can use (the engine's measure)."""
    typical = placement.typical_pods_from_requests(typical_pods or placement.DEFAULT_TYPICAL_PODS)
    width = max((len(x) for x in free), default=0)
    if not free or width == 0:
        return [0.0] * len(free)
    gpu = np.zeros((len(free), width), dtype=np.int64)
    for k, shares in enumerate(free):
        gpu[k, :len(shares)] = sorted((int(round(s * placement.MILLI)) for s in shares), reverse=True)
    zeros = np.zeros(len(free), dtype=np.int64)
    milli = placement.stranded_gpu_milli(zeros, gpu, zeros, typical)
    return [v / placement.MILLI for v in milli.tolist()]


def shard_fragmentation(shard: SchedulingShard) -> tuple[float, float]:
    """The shard's free GPUs and, of them, the stranded ones, as the database sees its nodes now
    (three queries: nodes, their pods, the shard's typical pods)."""
    nodes = [n for n in Node.objects.filter(cluster_id=shard.cluster_id).only(
        "pk", "labels", "allocatable_gpu", "dra_devices", "cluster_id") if shard is None or shard.matches(n.labels)]
    if not nodes:
        return 0.0, 0.0
    free = free_per_gpu(nodes)
    stranded = node_stranded(nodes, [shard], free)
    return float(sum(sum(v) for v in free.values())), float(sum(stranded.values()))


def shard_of(node: Node, shards: list[SchedulingShard]) -> SchedulingShard | None:
    return next((s for s in shards if s.holds(node.cluster_id, node.labels)), None)


def node_stranded(nodes: list[Node], shards: list[SchedulingShard] | None = None,
                  free: dict[int, list[float]] | None = None) -> dict[int, float]:
    """Stranded GPUs per node id, each node measured with its shard's typical pods. ``free``
    (per node id, see ``free_per_gpu``) saves its query when the caller has it."""
    if shards is None:
        shards = list(SchedulingShard.objects.filter(cluster_id__in={n.cluster_id for n in nodes}))
    if free is None:
        free = free_per_gpu(nodes)
    by_shard: dict[int | None, list[Node]] = {}
    for n in nodes:
        s = shard_of(n, shards)
        by_shard.setdefault(s.pk if s else None, []).append(n)
    typical_of = learned_typical_pods_by_shard([s for s in shards if s.pk in by_shard])
    out: dict[int, float] = {}
    for pk, members in by_shard.items():
        values = stranded_gpus([free[n.pk] for n in members], typical_of.get(pk, ()) if pk is not None else ())
        out.update({n.pk: v for n, v in zip(members, values)})
    return out


class FragmentationCollector(Collector):
    """``kai_node_stranded_gpus`` and ``kai_cluster_stranded_gpus``: free GPUs no typical pod fits."""

    def collect(self) -> Iterator[Metric]:
        nodes = list(Node.objects.select_related("cluster").only(
            "pk", "name", "labels", "allocatable_gpu", "dra_devices", "cluster_id", "cluster__name"))
        per_node = GaugeMetricFamily("kai_node_stranded_gpus",
                                     "Free GPU capacity on the node that none of its shard's typical pods can use.",
                                     labels=["cluster", "node"])
        per_cluster = GaugeMetricFamily("kai_cluster_stranded_gpus",
                                        "Free GPU capacity of the cluster that none of the typical pods can use.",
                                        labels=["cluster"])
        values = node_stranded(nodes) if nodes else {}
        totals: dict[str, float] = {}
        for n in nodes:
            v = values.get(n.pk, 0.0)
            per_node.add_metric([n.cluster.name, n.name], v)
            totals[n.cluster.name] = totals.get(n.cluster.name, 0.0) + v
        for name, v in sorted(totals.items()):
            per_cluster.add_metric([name], v)
        yield per_node
        yield per_cluster


def annotate_rows(rows: list[dict[str, Any]], shards: list[SchedulingShard]) -> float:
    """Set ``stranded`` (GPUs) on the node map's rows (``ui.nodes.build_map``: the free share of
    each healthy, non-MIG device is what its parts leave); return their total."""
    free = {r["node"].pk: [max(0.0, 1.0 - sum(p["fraction"] for p in d["parts"]))
                           for d in r["devices"] if d["healthy"] and not d["mig"]] for r in rows}
    values = node_stranded([r["node"] for r in rows], shards, free) if rows else {}
    for r in rows:
        r["stranded"] = values.get(r["node"].pk, 0.0)
    return sum(values.values())
