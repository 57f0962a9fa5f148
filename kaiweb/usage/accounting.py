"""Usage accounting: what each queue has allocated, integrated over time into usage buckets,
and the historical-usage input of time-based fair share (KAI-SEMANTICS §3.8) computed from them.

Accounting samples, once per raw bucket (a minute by default), the resources every queue holds
(its running pods, summed up the tree) and stores `allocated × bucket width` as that bucket's
value (queue units × seconds: GPU-seconds, millicore-seconds, MB-seconds). Writing a bucket is
an upsert of a value, not an increment, so a retried or duplicated accounting task is harmless.

Roll-up keeps history affordable: minute buckets older than the raw retention are summed into
hour buckets, hours past their retention into days, and days past theirs are dropped.

The engine's input is KAI's decayed sum `U[q][r] = Σ a·0.5^(age/h) / Σ C·0.5^(age/h)` over the
shard's window, computed vectorised by `scheduler_core.usage`; `usage_explanation(queue)` keeps
the intermediate numbers for the UI.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce

from kaiweb.cluster.models import Node, SchedulingShard
from kaiweb.core.choices import RESOURCES
from kaiweb.queues.models import Queue
from kaiweb.usage.models import PodUtilization, UsageBucket, UsageSettings
from kaiweb.usage.utilization import (
    PodGpuReading,
    PodRef,
    UtilizationError,
    UtilizationSource,
    configured_source,
)
from kaiweb.workloads.choices import ALLOCATED_POD_STATES
from kaiweb.workloads.models import Pod
from scheduler_core.units import bytes_to_mb

log = logging.getLogger(__name__)

HOUR = 3600
DAY = 86400


def _floor(at: datetime, width: int) -> datetime:
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % width, tz=UTC)


def user_of(namespace: str, user: str | None) -> str:
    """The submitting user a usage breakdown names: the user label's value, else the namespace's."""
    return user if user else f"ns/{namespace}"


def gpu_model_of(product: str | None) -> str:
    """The GPU model usage is charged to: the node's nvidia.com/gpu.product, else "unknown"."""
    return product if product else "unknown"


Split = dict[str, dict[str, dict[str, float]]]


def allocated_now(cluster_id: int | None = None) -> tuple[dict[int, dict[str, float]], dict[int, Split]]:
    """What every queue holds now, in queue units, from one aggregate over the allocated pods (plus
    one query for the tree).

    Returns the totals per queue, leaves summed into their ancestors, and per leaf queue the same
    amounts split by namespace, by submitting user and by the GPU model of the pods' nodes
    ({"namespace": {ns: {resource: amount}}, "user": {user: {...}}, "model": {model: {...}}}; the user
    is the workload's settings.KAI_USER_LABEL label, see `user_of`; the model, see `gpu_model_of`).
    """
    from django.db.models.fields.json import KeyTextTransform

    pods = Pod.objects.filter(state__in=ALLOCATED_POD_STATES)
    if cluster_id is not None:
        pods = pods.filter(workload__cluster_id=cluster_id)
    rows = pods.values("workload__queue_id", "workload__namespace").annotate(
        user=KeyTextTransform(settings.KAI_USER_LABEL, "workload__labels"),
    ).values("workload__queue_id", "workload__namespace", "user", "node__gpu_product").annotate(
        cpu=Coalesce(Sum("cpu"), 0.0),
        memory=Coalesce(Sum("memory"), 0),
        gpu=Coalesce(Sum("gpu"), 0.0),
        fraction=Coalesce(Sum(F("gpu_fraction") * F("gpu_devices")), 0.0),
    ).order_by()
    parents = dict(Queue.objects.values_list("pk", "parent_id"))
    totals: dict[int, dict[str, float]] = {pk: dict.fromkeys(RESOURCES, 0.0) for pk in parents}
    split: dict[int, Split] = {}
    for row in rows:
        amounts = {"cpu": float(row["cpu"]), "memory": bytes_to_mb(row["memory"]),
                   "gpu": float(row["gpu"]) + float(row["fraction"])}
        leaf: int = row["workload__queue_id"]
        queue = split.setdefault(leaf, {"namespace": {}, "user": {}, "model": {}})
        namespace = row["workload__namespace"]
        for kind, key in (("namespace", namespace), ("user", user_of(namespace, row["user"])),
                          ("model", gpu_model_of(row["node__gpu_product"]))):
            acc = queue[kind].setdefault(key, dict.fromkeys(RESOURCES, 0.0))
            for r in RESOURCES:
                acc[r] += amounts[r]
        cur: int | None = leaf
        seen: set[int] = set()
        while cur is not None and cur not in seen:  # the tree has no cycles, but never loop
            seen.add(cur)
            for r in RESOURCES:
                totals.setdefault(cur, dict.fromkeys(RESOURCES, 0.0))[r] += amounts[r]
            cur = parents.get(cur)
    return totals, split


def _gpu_pods(cluster_id: int | None = None) -> list[dict[str, Any]]:
    """Every allocated pod holding GPUs, with its queue, namespace, labels and node's GPU model (1 query)."""
    pods = Pod.objects.filter(state__in=ALLOCATED_POD_STATES).filter(Q(gpu__gt=0) | Q(gpu_fraction__isnull=False))
    if cluster_id is not None:
        pods = pods.filter(workload__cluster_id=cluster_id)
    rows = pods.values("pk", "name", "uid", "gpu", "gpu_fraction", "gpu_devices", "workload__queue_id",
                       "workload__namespace", "workload__labels", "node__gpu_product").order_by("pk")
    out = []
    for row in rows:
        fraction = row["gpu_fraction"]
        amount = float(fraction) * row["gpu_devices"] if fraction is not None else float(row["gpu"])
        devices = row["gpu_devices"] if fraction is not None else max(1, math.ceil(float(row["gpu"])))
        out.append({**row, "amount": amount, "devices": devices,
                    "model": gpu_model_of(row["node__gpu_product"]),
                    "labels": row["workload__labels"] if isinstance(row["workload__labels"], dict) else {}})
    return out


def gpu_details_by_queue(pods: list[dict[str, Any]], readings: dict[tuple[str, str], PodGpuReading] | None,
                         ) -> dict[int, dict[str, Any]]:
    """Per queue (leaves summed into ancestors): GPUs by model, and, where a pod has a reading, the
    GPUs measured, the GPUs' worth used (amount × utilization) and GPU memory used (MiB)."""
    parents = dict(Queue.objects.values_list("pk", "parent_id"))
    out: dict[int, dict[str, Any]] = {}
    for pod in pods:
        reading = readings.get((pod["workload__namespace"], pod["name"])) if readings else None
        cur: int | None = pod["workload__queue_id"]
        seen: set[int] = set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            d = out.setdefault(cur, {"models": defaultdict(float), "measured": 0.0, "used": 0.0, "memory": 0.0,
                                     "memory_known": False})
            d["models"][pod["model"]] += pod["amount"]
            if reading is not None:
                d["measured"] += pod["amount"]
                d["used"] += pod["amount"] * reading.utilization / 100.0
                if reading.memory_used_mib is not None:
                    d["memory"] += reading.memory_used_mib
                    d["memory_known"] = True
            cur = parents.get(cur)
    return out


def read_utilization(at: datetime, pods: list[dict[str, Any]],
                     source: UtilizationSource | None = None) -> dict[tuple[str, str], PodGpuReading] | None:
    """The configured source's readings for the allocated GPU pods (None: no source, or it failed)."""
    source = source if source is not None else configured_source()
    if source is None:
        return None
    refs = [PodRef(namespace=p["workload__namespace"], pod=p["name"], uid=p["uid"], labels=p["labels"],
                   devices=p["devices"]) for p in pods]
    try:
        readings = source.read(at, refs)
    except UtilizationError as exc:
        log.warning("utilization: %s; usage is accounted without it", exc)
        return None
    wanted = {(r.namespace, r.pod) for r in refs}
    return {k: v for k, v in readings.items() if k in wanted}


def record_pod_utilization(at: datetime, pods: list[dict[str, Any]],
                           readings: dict[tuple[str, str], PodGpuReading], source: str) -> int:
    """Keep each pod's latest reading and since when it has stayed under the idle threshold."""
    threshold = float(getattr(settings, "KAI_IDLE_GPU_UTILIZATION_PERCENT", 5.0))
    by_key = {(p["workload__namespace"], p["name"]): p["pk"] for p in pods}
    current = {u.pod_id: u for u in PodUtilization.objects.filter(pod_id__in=list(by_key.values()))}
    new, changed = [], []
    for key, reading in sorted(readings.items()):
        pod_id = by_key.get(key)
        if pod_id is None:
            continue
        row = current.get(pod_id)
        if row is None:
            row = PodUtilization(pod_id=pod_id)
            new.append(row)
        elif row.sampled_at and row.sampled_at >= at:
            continue  # an older or repeated tick never rewinds the record
        else:
            changed.append(row)
        row.source, row.sampled_at, row.utilization, row.devices = source, at, reading.utilization, reading.devices
        row.memory_used_mib, row.memory_total_mib = reading.memory_used_mib, reading.memory_total_mib
        if reading.utilization < threshold:
            if row.low_since is None:
                row.low_since, row.low_samples, row.low_utilization_sum = at, 0, 0.0
            row.low_samples += 1
            row.low_utilization_sum += reading.utilization
        else:
            row.low_since, row.low_samples, row.low_utilization_sum = None, 0, 0.0
    PodUtilization.objects.bulk_create(new, batch_size=500)
    PodUtilization.objects.bulk_update(
        changed, ["source", "sampled_at", "utilization", "devices", "memory_used_mib", "memory_total_mib",
                  "low_since", "low_samples", "low_utilization_sum"], batch_size=500)
    return len(new) + len(changed)


def account_usage(at: datetime | None = None, source: UtilizationSource | None = None) -> int:
    """Write the current raw bucket of every queue and resource; returns the buckets written.

    Every row gets the allocation by GPU model of the pods' nodes (a leaf's CPU and memory rows too: what
    they held on each GPU type); GPU rows also get, when a utilization source answers, the
    GPU-seconds measured and used and the GPU memory used; pods' idle records are updated too.
    """
    conf = UsageSettings.load()
    width = conf.raw_width_seconds
    at = at or datetime.now(tz=UTC)
    start = _floor(at, width)
    totals, owners = allocated_now()
    pods = _gpu_pods()
    source = source if source is not None else configured_source()
    readings = read_utilization(at, pods, source) if pods else None
    details = gpu_details_by_queue(pods, readings)
    rows = []
    for q, amounts in sorted(totals.items()):
        for r in RESOURCES:
            bucket = UsageBucket(queue_id=q, resource=r, start=start, width_seconds=width, value=amounts[r] * width)
            split = owners.get(q)
            if split is not None:
                bucket.by_namespace = {k: v[r] * width for k, v in sorted(split["namespace"].items()) if v[r]}
                bucket.by_user = {k: v[r] * width for k, v in sorted(split["user"].items()) if v[r]}
                if r != "gpu":  # GPU rows take theirs from the GPU pods below, ancestors' rows included
                    bucket.by_gpu_model = {k: v[r] * width for k, v in sorted(split["model"].items()) if v[r]}
            d = details.get(q)
            if r == "gpu" and d is not None:
                bucket.by_gpu_model = {m: v * width for m, v in sorted(d["models"].items())}
                if readings is not None:
                    bucket.measured_value = d["measured"] * width
                    bucket.used_value = d["used"] * width
                    bucket.gpu_memory_used_value = d["memory"] * width if d["memory_known"] else None
            elif r == "gpu" and readings is not None:
                bucket.used_value = 0.0
            rows.append(bucket)
    with transaction.atomic():
        UsageBucket.objects.bulk_create(
            rows, update_conflicts=True,
            update_fields=["value", "by_gpu_model", "measured_value", "used_value", "gpu_memory_used_value",
                           "by_namespace", "by_user"],
            unique_fields=["queue", "resource", "start", "width_seconds"],
        )
        if readings and source is not None:
            record_pod_utilization(at, pods, readings, source.name)
    return len(rows)


def roll_up_and_expire(now: datetime | None = None) -> dict[str, int]:
    """Sum raw buckets past retention into hours, hours into days; drop days past retention."""
    conf = UsageSettings.load()
    now = now or datetime.now(tz=UTC)
    report = {}
    with transaction.atomic():
        report["hourly"] = _roll(conf.raw_width_seconds, HOUR, now - timedelta(days=conf.raw_retention_days))
        report["daily"] = _roll(HOUR, DAY, now - timedelta(days=conf.hourly_retention_days))
        report["expired"], _ = UsageBucket.objects.filter(
            width_seconds=DAY, start__lt=now - timedelta(days=conf.daily_retention_days)).delete()
    return report


def _roll(from_width: int, to_width: int, before: datetime) -> int:
    # Only whole target buckets are rolled, so a bucket is never summed twice.
    cutoff = _floor(before, to_width)
    old = UsageBucket.objects.filter(width_seconds=from_width, start__lt=cutoff)
    sums: dict[tuple[int, str, datetime], dict[str, Any]] = {}
    for queue_id, resource, start, value, models_, measured, used, memory, spaces, users in old.values_list(
            "queue_id", "resource", "start", "value", "by_gpu_model", "measured_value", "used_value",
            "gpu_memory_used_value", "by_namespace", "by_user").iterator():
        acc = sums.setdefault((queue_id, resource, _floor(start, to_width)), _empty_sum())
        _add(acc, value, models_, measured, used, memory, spaces, users)
    if not sums:
        return 0
    existing = {
        (b.queue_id, b.resource, b.start): b
        for b in UsageBucket.objects.filter(width_seconds=to_width, start__in={k[2] for k in sums})
    }
    new, updated = [], []
    for (queue_id, resource, start), acc in sums.items():
        bucket = existing.get((queue_id, resource, start))
        if bucket is None:
            bucket = UsageBucket(queue_id=queue_id, resource=resource, start=start, width_seconds=to_width)
            new.append(bucket)
            _store(bucket, acc)
        else:
            _add(acc, bucket.value, bucket.by_gpu_model, bucket.measured_value, bucket.used_value,
                 bucket.gpu_memory_used_value, bucket.by_namespace, bucket.by_user)
            _store(bucket, acc)
            updated.append(bucket)
    UsageBucket.objects.bulk_create(new, batch_size=1000)
    UsageBucket.objects.bulk_update(
        updated, ["value", "by_gpu_model", "measured_value", "used_value", "gpu_memory_used_value", "by_namespace",
                  "by_user"], batch_size=1000)
    old.delete()
    return len(sums)


def _empty_sum() -> dict[str, Any]:
    return {"value": 0.0, "models": defaultdict(float), "measured": 0.0, "used": None, "memory": None,
            "namespace": defaultdict(float), "user": defaultdict(float)}


def _add(acc: dict[str, Any], value: float, models_: Any, measured: float, used: float | None,
         memory: float | None, spaces: Any = None, users: Any = None) -> None:
    acc["value"] += value
    for key, split in (("models", models_), ("namespace", spaces), ("user", users)):
        for name, seconds in split.items() if isinstance(split, dict) else ():
            acc[key][name] += float(seconds)
    acc["measured"] += measured or 0.0
    if used is not None:
        acc["used"] = (acc["used"] or 0.0) + used
    if memory is not None:
        acc["memory"] = (acc["memory"] or 0.0) + memory


def _store(bucket: UsageBucket, acc: dict[str, Any]) -> None:
    bucket.value = acc["value"]
    bucket.by_gpu_model = {m: v for m, v in sorted(acc["models"].items())}
    bucket.by_namespace = {m: v for m, v in sorted(acc["namespace"].items())}
    bucket.by_user = {m: v for m, v in sorted(acc["user"].items())}
    bucket.measured_value = acc["measured"]
    bucket.used_value = acc["used"]
    bucket.gpu_memory_used_value = acc["memory"]


# ------------------------------------------------------------------------- time-based fair share


def usage_params(shard: SchedulingShard) -> dict[str, Any]:
    """The shard's usage window: size, half-life, type (sliding | tumbling) and tumbling start."""
    extra = ((shard.cluster.settings or {}).get("usage") or {}) if shard.cluster_id else {}
    window_type = extra.get("window_type", "sliding")
    if window_type not in ("sliding", "tumbling"):
        raise ValueError(f"usage.window_type: must be 'sliding' or 'tumbling', not {window_type!r}")
    return {
        "window_seconds": float(shard.usage_window_seconds),
        "half_life_seconds": float(shard.usage_half_life_seconds) or None,
        "window_type": window_type,
        "tumbling_start": float(extra.get("tumbling_start", 0.0)),
        "k": shard.k_value,
    }


def cluster_capacity(cluster_id: int) -> dict[str, float]:
    """Allocatable capacity of the cluster's nodes, in queue units (MB for memory)."""
    agg = Node.objects.filter(cluster_id=cluster_id, ready=True).aggregate(
        cpu=Coalesce(Sum("allocatable_cpu"), 0.0), memory=Coalesce(Sum("allocatable_memory"), 0),
        gpu=Coalesce(Sum("allocatable_gpu"), 0.0))
    return {"cpu": float(agg["cpu"]), "memory": bytes_to_mb(agg["memory"]), "gpu": float(agg["gpu"])}


def _samples(shard: SchedulingShard, now: datetime, window: float, queue_ids: list[int] | None = None):
    """Per-queue allocated samples (amount, not amount×seconds) on the union grid of bucket starts."""
    since = now - timedelta(seconds=window)
    qs = UsageBucket.objects.filter(start__gte=since, start__lte=now)
    if queue_ids is not None:
        qs = qs.filter(queue_id__in=queue_ids)
    rows = list(qs.values_list("queue__name", "resource", "start", "width_seconds", "value"))
    times = sorted({start.timestamp() for _, _, start, _, _ in rows})
    col = {t: i for i, t in enumerate(times)}
    names = sorted({name for name, *_ in rows})
    row_of = {n: i for i, n in enumerate(names)}
    allocated = np.zeros((len(names), len(RESOURCES), len(times)))
    widths = np.zeros(len(times))
    for name, resource, start, width, value in rows:
        t = col[start.timestamp()]
        allocated[row_of[name], RESOURCES.index(resource), t] = value / width
        widths[t] = max(widths[t], width)
    return names, np.asarray(times, dtype=float), widths, allocated


def usage_for_engine(shard: SchedulingShard, now: datetime | None = None) -> dict[str, tuple[float, float, float]]:
    """Normalised historical usage per queue ([cpu, memory, gpu] in 0..1) for the engine.

    From the shard's usage database (a Prometheus its SchedulingShard names) while that has a fresh
    answer (`SchedulingShard.usage_db_answer`), else from kaiweb's own accounting. Empty (the feature
    is off, as in KAI without a usage database) when k is 0 or there is no history yet.
    """
    if shard.k_value <= 0:
        return {}
    usage, _ = shard.usage_db_answer()
    if usage is not None:
        return usage
    explanation = compute_usage(shard, now=now)
    return {q: tuple(v) for q, v in explanation["usage"].items()}  # type: ignore[misc]  # three numbers per queue (cpu, memory, gpu)


def compute_usage(shard: SchedulingShard, now: datetime | None = None,
                  queue_ids: list[int] | None = None) -> dict[str, Any]:
    """KAI's decayed-sum usage from the buckets, with every intermediate number."""
    now = now or datetime.now(tz=UTC)
    params = usage_params(shard)
    names, times, widths, allocated = _samples(shard, now, params["window_seconds"], queue_ids)
    capacity = cluster_capacity(shard.cluster_id)
    cap = np.array([capacity[r] for r in RESOURCES], dtype=float)
    # Capacity is taken as the current allocatable at every sample time (the cluster's history of
    # capacity is not recorded); KAI reads node capacity samples from Prometheus instead.
    capacity_samples = np.repeat(cap[:, None], len(times), axis=1)
    out = _decayed_usage(allocated, capacity_samples, times, now.timestamp(), params, names)
    usage = {name: [float(x) for x in out["usage"][i]] for i, name in enumerate(names)}
    return {
        "params": params,
        "now": now.isoformat(),
        "capacity": capacity,
        "sample_times": [datetime.fromtimestamp(t, tz=UTC).isoformat() for t in times],
        "weights": [float(w) for w in out["weights"]],
        "queue_decayed": {name: [float(x) for x in out["decayed"][i]] for i, name in enumerate(names)},
        "capacity_decayed": [float(x) for x in out["capacity_decayed"]],
        "usage": usage,
    }


def _decayed_usage(allocated: np.ndarray, capacity: np.ndarray, times: np.ndarray, now: float,
                   params: dict[str, Any], names: list[str]) -> dict[str, np.ndarray]:
    """KAI's decayed sum over the window, by the engine's vectorised `scheduler_core.usage`.

    `allocated` is [queue, resource, time] and `capacity` [resource, time] here; the engine takes
    [queue, time, resource] and [time, resource]."""
    from scheduler_core.usage import compute_usage as core_compute_usage

    result = core_compute_usage(
        times, np.transpose(allocated, (0, 2, 1)) if allocated.size else np.zeros((0, len(times), len(RESOURCES))),
        capacity.T, now=now, half_life=params["half_life_seconds"], window=params["window_seconds"],
        window_type=params["window_type"],
        tumbling_start=params["tumbling_start"] if params["window_type"] == "tumbling" else None,
        queues=names,
    )
    return {"weights": result.weights, "decayed": result.decayed_allocated,
            "capacity_decayed": result.decayed_capacity, "usage": result.usage}


def usage_explanation(queue: Queue, shard: SchedulingShard | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The arithmetic behind a queue's historical usage, for the UI ("why is my fair share X").

    Returns the window parameters, the sample times and their decay weights, the queue's decayed
    allocation sum per resource, the cluster's decayed capacity sum, and the resulting usage
    (their ratio), plus k and what it does to the queue's over-quota weight.
    """
    if shard is None:
        shard = SchedulingShard.objects.default()
    if shard is None:
        raise LookupError("shard: no enabled scheduling shard to read usage settings from")
    full = compute_usage(shard, now=now)
    usage = full["usage"].get(queue.name, [0.0, 0.0, 0.0])
    weights = {r: getattr(queue, f"{r}_over_quota_weight") for r in RESOURCES}
    return {
        "queue": queue.name,
        "params": full["params"],
        "sample_times": full["sample_times"],
        "weights": full["weights"],
        "queue_decayed": dict(zip(RESOURCES, full["queue_decayed"].get(queue.name, [0.0, 0.0, 0.0]))),
        "capacity_decayed": dict(zip(RESOURCES, full["capacity_decayed"])),
        "usage": dict(zip(RESOURCES, usage)),
        "over_quota_weight": weights,
        "k": full["params"]["k"],
        "formula": "usage = Σ allocated·0.5^(age/half-life) / Σ capacity·0.5^(age/half-life); "
                   "KAI adjusts the over-quota weight W to max(0, W + k·(W_norm − usage))",
    }
