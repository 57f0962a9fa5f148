"""Time-based fair share from a Prometheus usage database, as KAI's scheduler reads one.

A SchedulingShard whose `spec.usageDBConfig` names a Prometheus (`SchedulingShard.usage_db`, set by
the cluster mirror) has the queues' past usage read from it instead of from kaiweb's own accounting.
The queries are KAI's (`pkg/scheduler/cache/usagedb/prometheus`): per resource, the allocation of each
queue (`kai_queue_allocated_gpus`, `…_cpu_cores`, `…_memory_bytes`, label `queue_name`; kaiweb's
`/metrics` writes them) and the cluster's capacity (kube-state-metrics' `kube_node_status_capacity`),
each decayed by `0.5^((now - time()) / halfLife)` and summed over the window at `queryResolution`:

    sum_over_time((((metric) * (0.5^((now - time()) / h))))[range:step])    at time now

usage[q][r] = the queue's sum / the capacity's sum. The window is `windowSize` back from now
(sliding), from the latest reset every `windowSize` after `tumblingWindowStartTime` (tumbling), or
from the latest tick of `cronString` (cron). KAI asks a range query for the last two and then reads
it as a vector (KAI-SEMANTICS §9 D15); kaiweb asks the same sum as an instant query over the range
since the reset, which is what those windows mean.

`refresh` runs in the usage app's Celery task (never in a request, never in a cycle) when the shard's
`fetchInterval` has passed, and stores the answer, or why there is none, on the shard
(`usage_db_reading`). The cycle reads the stored answer while it is younger than `stalenessPeriod`
and was fetched with the shard's current settings (`SchedulingShard.usage_db_answer`); otherwise it
reads kaiweb's own accounting, and the shard says why.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from kaiweb.cluster.models import USAGE_DB_FAILED, USAGE_DB_OK, SchedulingShard, redact_url
from kaiweb.core.choices import RESOURCES
from kaiweb.core.cron import previous_tick
from kaiweb.core.promapi import PrometheusAPI, PrometheusError

log = logging.getLogger(__name__)

QUEUE_LABEL = "queue_name"
OK, FAILED = USAGE_DB_OK, USAGE_DB_FAILED


# connectionStringEnvVar may name only a variable of kaiweb's worker with this prefix: an object in the
# cluster must not point the worker at another of its settings (a database URL, a secret key).
ENV_VAR_PREFIX = "KAI_USAGE_DB_"


def source_url(config: dict[str, Any]) -> tuple[str, str]:
    """The Prometheus of the shard and how to name it where it is shown: connectionString (shown
    without any user and password), else the variable connectionStringEnvVar names in kaiweb's worker
    (shown as `$NAME`), else KAI_PROMETHEUS_URL (shown by that name); PrometheusError naming the
    field when none is set."""
    if config.get("connection_string"):
        return str(config["connection_string"]), redact_url(str(config["connection_string"]))
    variable = str(config.get("connection_string_env_var") or "")
    if variable:
        if not variable.startswith(ENV_VAR_PREFIX):
            raise PrometheusError(f"spec.usageDBConfig.connectionStringEnvVar: must name a variable starting with "
                                  f"{ENV_VAR_PREFIX} (kaiweb reads no other of its settings for a cluster's object), "
                                  f"not {variable}")
        value = os.environ.get(variable, "")
        if not value:
            raise PrometheusError(f"spec.usageDBConfig.connectionStringEnvVar: the variable {variable} is not set "
                                  "in kaiweb's worker")
        return value, f"${variable}"
    if getattr(settings, "KAI_PROMETHEUS_URL", ""):
        return str(settings.KAI_PROMETHEUS_URL), "KAI_PROMETHEUS_URL"
    raise PrometheusError("spec.usageDBConfig.connectionString: not set, and kaiweb has no KAI_PROMETHEUS_URL "
                          "to use instead")


def window_seconds(shard: SchedulingShard, config: dict[str, Any], now: datetime) -> float:
    """How far back from `now` the shard's usage window reaches, by its window type."""
    size = float(shard.usage_window_seconds)
    kind = config.get("window_type", "sliding")
    if kind == "tumbling":
        start = datetime.fromisoformat(str(config["tumbling_start"]).replace("Z", "+00:00")).timestamp()
        if start > now.timestamp():  # KAI: a start in the future makes a window of size 0
            return 0.0
        from scheduler_core.usage import window_start

        return now.timestamp() - window_start(now.timestamp(), size, "tumbling", start)
    if kind == "cron":
        return now.timestamp() - previous_tick(str(config["cron"]), now).timestamp()
    return size


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def queries(shard: SchedulingShard, config: dict[str, Any], now: datetime) -> dict[tuple[str, str], str]:
    """KAI's PromQL per (allocation | capacity, resource) for the window ending at `now`; {} when the
    window is empty (a tumbling or cron window that has just reset)."""
    reach = window_seconds(shard, config, now)
    if reach < 1.0:
        return {}
    half_life = float(shard.usage_half_life_seconds or 0)
    out = {}
    for kind in ("allocation", "capacity"):
        for resource, metric in sorted(config[f"{kind}_metrics"].items()):
            expr = metric
            if half_life > 0:  # KAI's getExponentialDecayQuery, `now` in whole seconds as KAI writes it
                expr = f"(({metric}) * (0.5^(({int(now.timestamp())} - time()) / {half_life:f})))"
            out[(kind, resource)] = (f"sum_over_time(({expr})[{_ms(reach)}:"
                                     f"{_ms(float(config['query_resolution_s']))}])")
    return out


def fetch(shard: SchedulingShard, now: datetime, api: PrometheusAPI | None = None) -> dict[str, list[float]]:
    """Each queue's usage ([cpu, memory, gpu], each its share of the capacity) from the shard's
    Prometheus, bounded by the shard's query timeout over all queries; PrometheusError saying what
    is wrong with the answer otherwise."""
    config = shard.usage_db
    promql = queries(shard, config, now)
    if not promql:
        return {}
    budget = float(config.get("query_timeout_s", 10.0))
    if api is None:
        url, shown = source_url(config)
        api = PrometheusAPI(url, timeout=budget, field="spec.usageDBConfig.connectionString", shown=shown)
    deadline = time.monotonic() + budget

    def ask(query: str) -> list[Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"prometheus: the queries took longer than usageQueryTimeout ({budget:g}s)")
        return api.vector(query, at=now, timeout=left)

    capacity = {}
    for resource in RESOURCES:
        query = promql[("capacity", resource)]
        samples = ask(query)
        if len(samples) != 1:
            raise PrometheusError(f"prometheus: the capacity of {resource} ({query!r}) must be one series (a sum), "
                                  f"not {len(samples)}")
        if samples[0].value < 0:
            raise PrometheusError(f"prometheus: the capacity of {resource} is {samples[0].value}, less than 0")
        capacity[resource] = samples[0].value
    usage: dict[str, list[float]] = {}
    for index, resource in enumerate(RESOURCES):
        query = promql[("allocation", resource)]
        seen = set()
        for sample in ask(query):
            queue = sample.labels.get(QUEUE_LABEL, "")
            if not queue:
                raise PrometheusError(f"prometheus: a series of {query!r} has no {QUEUE_LABEL} label "
                                      f"({sample.labels})")
            if queue in seen:
                raise PrometheusError(f"prometheus: {query!r} has two series for queue {queue!r}")
            if sample.value < 0:
                raise PrometheusError(f"prometheus: queue {queue!r} has {resource} usage {sample.value}, less than 0")
            seen.add(queue)
            share = sample.value / capacity[resource] if capacity[resource] > 0 else 0.0
            usage.setdefault(queue, [0.0] * len(RESOURCES))[index] = share
    return usage


def is_due(shard: SchedulingShard, now: datetime) -> bool:
    """Whether the shard reads a usage database and its fetchInterval has passed since the last try
    (or the settings changed since)."""
    if not shard.usage_db:
        return False
    reading = shard.usage_db_reading or {}
    if reading.get("config") != shard.usage_db or not reading.get("attempted_at"):
        return True
    last = datetime.fromisoformat(reading["attempted_at"])
    return (now - last).total_seconds() >= float(shard.usage_db.get("fetch_interval_s", 60.0))


def refresh(shard: SchedulingShard, now: datetime | None = None, api: PrometheusAPI | None = None) -> dict[str, Any]:
    """Fetch the shard's usage now and store the reading on the shard; a failed fetch keeps the last
    good usage (the cycle uses it while it is not stale, as KAI does) and says why it failed."""
    now = now or datetime.now(tz=UTC)
    previous = shard.usage_db_reading or {}
    if previous.get("config") != shard.usage_db:
        previous = {}
    reading: dict[str, Any] = {"config": shard.usage_db, "attempted_at": now.isoformat()}
    try:
        reading["url"] = source_url(shard.usage_db)[1]  # as shown: never a value from the environment
        usage = fetch(shard, now, api)
    except (PrometheusError, ValueError) as exc:
        log.warning("shard %s: usage database not read: %s", shard, exc)
        reading.update(state=FAILED, reason=str(exc)[:2000],
                       **{k: previous[k] for k in ("succeeded_at", "usage") if k in previous})
    else:
        reading.update(state=OK, reason="", succeeded_at=now.isoformat(), usage=usage)
    SchedulingShard.objects.filter(pk=shard.pk).update(usage_db_reading=reading)
    shard.usage_db_reading = reading
    return reading


def refresh_due(now: datetime | None = None) -> dict[str, str]:
    """`refresh` every enabled shard whose fetch is due; shard → the state of its reading."""
    now = now or datetime.now(tz=UTC)
    out = {}
    for shard in SchedulingShard.objects.filter(enabled=True).exclude(usage_db={}).select_related("cluster"):
        if is_due(shard, now):
            out[str(shard)] = refresh(shard, now)["state"]
    return out
