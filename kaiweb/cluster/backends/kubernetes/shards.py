"""SchedulingShard objects (KAI's ``spec``: args, placement, queue depth, minimum run times, the usage
database, actions and plugins) read into `ObservedShard`: what kaiweb applies, and each field it does
not apply with the reason, as KAI's operator and scheduler read them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kaiweb.cluster.backends.kubernetes.parsing import (
    _MAX_DURATION_S,
    _Bad,
    _duration,
    _meta,
    _never_raises,
    _read_duration,
    _unreadable,
)
from kaiweb.cluster.backends.types import (
    EVICT_BY_DELETE,
    EVICTION_MODE_RULE,
    EVICTION_MODES,
    ObservedShard,
    Unreadable,
    UsageDbConfig,
)
from kaiweb.core.cron import parse_cron
from scheduler_core.model import ACTIONS

# How the shard's evictions are carried out, read from SchedulingShard spec.args. KAI's operator
# passes on to its scheduler only the keys that are its scheduler's flags (`buildArgsList` in
# pkg/operator/operands/scheduler), so kaiweb's own key stays in the object when moving back to KAI.
EVICTION_MODE_ARG = "kaiweb-eviction-mode"  # delete (KAI's behaviour, when absent) or evict
UPDATE_POD_EVICTION_CONDITION_ARG = "update-pod-eviction-condition"  # KAI's flag, a Go bool
_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
             **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


# The spec.args keys kaiweb reads (the rest are KAI scheduler flags it does not apply): its own
# eviction mode and KAI's flags for the DisruptionTarget condition (both above),
# max-consolidation-preemptees (scheduling.cycle) and restrict-node-scheduling (scheduling.adapters).
SHARD_ARGS_READ = (EVICTION_MODE_ARG, UPDATE_POD_EVICTION_CONDITION_ARG, "max-consolidation-preemptees",
                   "restrict-node-scheduling")
# Every field of KAI's SchedulingShardSpec (kai.scheduler/v1, up to v0.18). Those applied are read by
# `parse_shard`; `_shard_unsupported` validates the others and says why each is not applied.
SHARD_SPEC_FIELDS = ("args", "placementStrategy", "partitionLabelValue", "queueDepthPerAction", "minRuntime",
                     "kValue", "usageDBConfig", "scenarioSearchBudgets", "plugins", "actions", "goMemLimitRatio",
                     "goMemLimit")
# KAI's actions and their priorities when the object overrides none (kai.scheduler/v1
# `defaultActionPriorities`): a higher priority runs first; consolidation is off by default when
# either placement strategy is spread.
KAI_ACTION_PRIORITIES = {"allocate": 500, "consolidation": 400, "reclaim": 300, "preempt": 200,
                         "stalegangeviction": 100}
# KAI's scenario search budgets when the object sets none (pkg/common/constants); 0s = unlimited
SEARCH_BUDGET_DEFAULTS: dict[str, Any] = {"maxActionSearchDuration": {"default": "5m"}, "maxJobSearchDuration": "4m",
                          "minJobSearchDuration": "0s",
                          "maxGeneratorSearchDuration": {"default": "2m", "NodeLocalGreedy": "30s",
                                                         "MultiNodeGang": "2m"}}
SEARCH_BUDGET_ACTIONS = ("default", "reclaim", "preempt", "consolidation")
USAGE_WINDOW_TYPES = ("sliding", "tumbling", "cron")
_PROM_DURATION_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_PROM_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0,
                        "y": 365 * 86400.0}


def _prom_duration(value: Any, field: str) -> float | None:
    """A Prometheus duration ("1w", "7d", "12h30m") in seconds; None when unset."""
    seconds = _read_duration(value, field, _PROM_DURATION_PART, _PROM_DURATION_UNITS,
                             "a Prometheus duration such as 1w, 7d or 12h")
    if seconds is None:
        return None
    if seconds <= 0 or seconds > _MAX_DURATION_S:
        raise _Bad(field, "must be more than 0 and at most ten years", value)
    return seconds


def _is_rfc3339(value: Any) -> bool:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def _mapping(value: Any, field: str, rule: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Bad(field, rule, value)
    return value


def _queue_depths(value: Any) -> tuple[tuple[str, int], ...]:
    """spec.queueDepthPerAction: KAI's action names → jobs per queue the action tries (≥ 0)."""
    depths = _mapping(value, "spec.queueDepthPerAction", "must map action names to whole numbers")
    out = []
    for action, depth in sorted(depths.items()):
        field = f"spec.queueDepthPerAction[{action}]"
        if action not in ACTIONS:
            raise _Bad(field, f"must name one of KAI's actions: {', '.join(ACTIONS)}", action)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise _Bad(field, "must be a whole number, at least 0 (the jobs of each queue the action tries)", depth)
        out.append((str(action), depth))
    return tuple(out)


def _search_budgets(value: Any) -> str:
    """spec.scenarioSearchBudgets validated as KAI's operator does; the budgets in effect (KAI's
    defaults where unset), as text for the report."""
    budgets = _mapping(value, "spec.scenarioSearchBudgets", "must be an object of search durations")
    known = tuple(SEARCH_BUDGET_DEFAULTS)
    for key in budgets:
        if key not in known:
            raise _Bad(f"spec.scenarioSearchBudgets.{key}", f"is not a budget; known: {', '.join(known)}", key)
    effective: dict[str, Any] = {}
    for key in ("maxActionSearchDuration", "maxGeneratorSearchDuration"):
        given = _mapping(budgets.get(key), f"spec.scenarioSearchBudgets.{key}", "must map names to durations")
        for name, duration in given.items():
            field = f"spec.scenarioSearchBudgets.{key}[{name}]"
            if key == "maxActionSearchDuration" and name not in SEARCH_BUDGET_ACTIONS:
                raise _Bad(field, f"must be one of {', '.join(SEARCH_BUDGET_ACTIONS)}", name)
            _duration(duration, field)
        effective[key] = {**SEARCH_BUDGET_DEFAULTS[key], **{str(k): str(v) for k, v in given.items()}}
    seconds = {}
    for key in ("maxJobSearchDuration", "minJobSearchDuration"):
        given_text = budgets.get(key)
        seconds[key] = _duration(given_text, f"spec.scenarioSearchBudgets.{key}")
        effective[key] = str(given_text) if given_text not in (None, "") else SEARCH_BUDGET_DEFAULTS[key]
    low, high = seconds["minJobSearchDuration"], seconds["maxJobSearchDuration"]
    if low is not None and high is not None and high > 0 and low >= high:
        raise _Bad("spec.scenarioSearchBudgets.minJobSearchDuration",
                   "must be less than maxJobSearchDuration (unless that is 0s, unlimited)",
                   budgets.get("minJobSearchDuration"))
    return json.dumps(effective, sort_keys=True)


# KAI's usage database client (pkg/scheduler/cache/usagedb/prometheus): the metric (or PromQL) each
# resource's allocation and capacity is read from, by its extraParams key, and KAI's default.
USAGE_DB_ALLOCATION_METRICS = {"gpu": ("gpuAllocationMetric", "kai_queue_allocated_gpus"),
                               "cpu": ("cpuAllocationMetric", "kai_queue_allocated_cpu_cores"),
                               "memory": ("memoryAllocationMetric", "kai_queue_allocated_memory_bytes")}
USAGE_DB_CAPACITY_METRICS = {
    "gpu": ("gpuCapacityMetric", 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})'),
    "cpu": ("cpuCapacityMetric", 'sum(kube_node_status_capacity{resource="cpu"})'),
    "memory": ("memoryCapacityMetric", 'sum(kube_node_status_capacity{resource="memory"})')}
USAGE_DB_EXTRA_DURATIONS = {"usageQueryTimeout": 10.0, "queryResolution": 60.0}
USAGE_DB_MAX_QUERY_TIMEOUT_S = 60.0
USAGE_DB_MAX_STEPS = 100_000  # window / queryResolution: the samples one query sums per series


def _usage_db(value: Any) -> tuple[float | None, float | None, UsageDbConfig | None, list[tuple[str, str]]]:
    """spec.usageDBConfig validated: (window seconds, half-life seconds, the Prometheus source kaiweb
    reads or None, what is not applied)."""
    config = _mapping(value, "spec.usageDBConfig", "must be an object with clientType and usageParams")
    if not config:
        return None, None, None, []
    client_type = config.get("clientType")
    if not isinstance(client_type, str) or not client_type:
        raise _Bad("spec.usageDBConfig.clientType", "is required: the usage database's client, e.g. prometheus",
                   client_type)
    for key in ("connectionString", "connectionStringEnvVar"):
        if not isinstance(config.get(key) or "", str):
            raise _Bad(f"spec.usageDBConfig.{key}", "must be a string", config.get(key))
    url = str(config.get("connectionString") or "").strip()
    if url and not url.startswith(("http://", "https://")):
        raise _Bad("spec.usageDBConfig.connectionString", "must be a URL starting with http:// or https://", url)
    unsupported: list[tuple[str, str]] = []
    if client_type != "prometheus":
        unsupported.append(("spec.usageDBConfig.clientType",
                            f"kaiweb reads a usage database of client type prometheus only; time-based fair "
                            f"share reads kaiweb's own usage accounting, not the {client_type} one"))
    params = _mapping(config.get("usageParams"), "spec.usageDBConfig.usageParams", "must be an object")
    field = "spec.usageDBConfig.usageParams"
    window = _prom_duration(params.get("windowSize"), f"{field}.windowSize")
    half_life = _duration(params.get("halfLifePeriod"), f"{field}.halfLifePeriod")
    window_type = params.get("windowType") or "sliding"
    if window_type not in USAGE_WINDOW_TYPES:
        raise _Bad(f"{field}.windowType", f"must be one of {', '.join(USAGE_WINDOW_TYPES)}", window_type)
    start = params.get("tumblingWindowStartTime")
    if start not in (None, "") and not _is_rfc3339(start):
        raise _Bad(f"{field}.tumblingWindowStartTime", "must be an RFC 3339 time", start)
    if window_type == "tumbling" and start in (None, ""):
        raise _Bad(f"{field}.tumblingWindowStartTime", "is required with windowType tumbling (KAI's rule)", start)
    cron = str(params.get("cronString") or "")
    if window_type == "cron":
        try:
            parse_cron(cron)
        except ValueError as exc:
            raise _Bad(f"{field}.cronString", f"must be a cron string of five fields ({exc})", cron) from exc
    durations = {}
    for key in ("fetchInterval", "stalenessPeriod", "waitTimeout"):
        durations[key] = _duration(params.get(key), f"{field}.{key}")
        if durations[key] == 0:
            raise _Bad(f"{field}.{key}", "must be more than 0s", params.get(key))
    extra = _mapping(params.get("extraParams"), f"{field}.extraParams", "must be a map of strings")
    metrics: dict[str, dict[str, str]] = {"allocation": {}, "capacity": {}}
    known = {key for key, _ in (*USAGE_DB_ALLOCATION_METRICS.values(), *USAGE_DB_CAPACITY_METRICS.values())}
    for kind, table in (("allocation", USAGE_DB_ALLOCATION_METRICS), ("capacity", USAGE_DB_CAPACITY_METRICS)):
        for resource, (key, default) in table.items():
            text = extra.get(key, default)
            if not isinstance(text, str) or not text.strip() or len(text) > 1000:
                raise _Bad(f"{field}.extraParams[{key}]", "must be a metric name or PromQL expression "
                           "(at most 1000 characters)", text)
            metrics[kind][resource] = text.strip()
    extra_seconds = {}
    for key, default in USAGE_DB_EXTRA_DURATIONS.items():
        extra_seconds[key] = _duration(extra.get(key), f"{field}.extraParams[{key}]") or default
    if extra_seconds["queryResolution"] < 1.0:
        raise _Bad(f"{field}.extraParams[queryResolution]", "must be at least 1s", extra.get("queryResolution"))
    if extra_seconds["usageQueryTimeout"] > USAGE_DB_MAX_QUERY_TIMEOUT_S:
        raise _Bad(f"{field}.extraParams[usageQueryTimeout]",
                   f"must be at most {USAGE_DB_MAX_QUERY_TIMEOUT_S:.0f}s (kaiweb's bound)", extra.get("usageQueryTimeout"))
    if (window or 7 * 86400.0) / extra_seconds["queryResolution"] > USAGE_DB_MAX_STEPS:
        raise _Bad(f"{field}.extraParams[queryResolution]",
                   f"must leave at most {USAGE_DB_MAX_STEPS} steps in windowSize (kaiweb's bound)",
                   extra.get("queryResolution"))
    for key in sorted(set(extra) - known - set(USAGE_DB_EXTRA_DURATIONS)):
        unsupported.append((f"{field}.extraParams[{key}]", "not a parameter of KAI's Prometheus client that "
                            "kaiweb knows"))
    if window_type != "tumbling" and start not in (None, ""):
        unsupported.append((f"{field}.tumblingWindowStartTime", f"read only with windowType tumbling, not {window_type}"))
    if window_type != "cron" and cron:
        unsupported.append((f"{field}.cronString", f"read only with windowType cron, not {window_type}"))
    if durations["waitTimeout"] is not None:
        unsupported.append((f"{field}.waitTimeout", "a cycle never waits for the usage database: until its first "
                            "answer (or when it fails) time-based fair share reads kaiweb's own usage accounting"))
    if client_type != "prometheus":
        reported = {f for f, _ in unsupported}
        unsupported += [(f"{field}.{key}", "a setting of the usage database, which kaiweb does not read")
                        for key in ("windowType", "tumblingWindowStartTime", "cronString", "fetchInterval",
                                    "stalenessPeriod", "extraParams")
                        if params.get(key) not in (None, "", {}) and f"{field}.{key}" not in reported]
        return window, half_life, None, unsupported
    fetch = durations["fetchInterval"] or 60.0
    source = UsageDbConfig(
        client_type=client_type, connection_string=url,
        connection_string_env_var=str(config.get("connectionStringEnvVar") or ""), window_type=window_type,
        tumbling_start=str(start or "") if window_type == "tumbling" else "",
        cron=cron if window_type == "cron" else "", fetch_interval_s=fetch,
        staleness_s=max(fetch, durations["stalenessPeriod"] or 300.0),  # KAI: never less than the interval
        query_timeout_s=extra_seconds["usageQueryTimeout"], query_resolution_s=extra_seconds["queryResolution"],
        allocation_metrics=tuple(sorted(metrics["allocation"].items())),
        capacity_metrics=tuple(sorted(metrics["capacity"].items())))
    return window, half_life, source, unsupported


def _overrides(value: Any, field: str, with_arguments: bool) -> list[str]:
    """spec.plugins / spec.actions: name → {enabled, priority[, arguments]}, validated; the names."""
    entries = _mapping(value, field, "must map names to objects with enabled and priority")
    for name, entry in entries.items():
        entry = _mapping(entry, f"{field}[{name}]", "must be an object with enabled and priority")
        if not isinstance(entry.get("enabled", True), bool):
            raise _Bad(f"{field}[{name}].enabled", "must be true or false", entry.get("enabled"))
        priority = entry.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise _Bad(f"{field}[{name}].priority", "must be a whole number", priority)
        if with_arguments:
            _mapping(entry.get("arguments"), f"{field}[{name}].arguments", "must be a map of strings")
    return sorted(str(n) for n in entries)


def _shard_actions(spec: Mapping[str, Any], gpu: str, cpu: str) -> tuple[tuple[str, ...] | None, list[tuple[str, str]]]:
    """spec.actions as KAI's operator resolves it: its default actions (consolidation off with a
    spread placement), each override's ``enabled`` and ``priority`` merged in, the enabled ones run by
    descending priority, then by name. None when the object overrides no action (the engine's own
    order, which is KAI's default). An action kaiweb does not have is reported and left out, and so is
    consolidation enabled with a spread placement (kaiweb never consolidates then)."""
    raw = spec.get("actions")
    names = _overrides(raw, "spec.actions", False)
    if not names:
        return None, []
    spread = "spread" in (gpu, cpu)
    merged = {name: {"enabled": not (name == "consolidation" and spread), "priority": priority}
              for name, priority in KAI_ACTION_PRIORITIES.items()}
    unsupported: list[tuple[str, str]] = []
    for name in names:
        entry = raw[name] or {}
        merged.setdefault(name, {"enabled": True, "priority": 0})
        merged[name].update({k: entry[k] for k in ("enabled", "priority") if entry.get(k) is not None})
        if name not in KAI_ACTION_PRIORITIES:
            unsupported.append((f"spec.actions[{name}]", f"kaiweb has no action {name}; its actions are "
                                f"{', '.join(KAI_ACTION_PRIORITIES)}"))
        elif name == "consolidation" and spread and merged[name]["enabled"]:
            unsupported.append((f"spec.actions[{name}]", "kaiweb never consolidates with a spread placement"))
    order = sorted((n for n, e in merged.items() if e["enabled"] and n in KAI_ACTION_PRIORITIES
                    and not (n == "consolidation" and spread)),
                   key=lambda n: (-int(merged[n]["priority"]), n))
    return tuple(order), unsupported


def _shard_unsupported(spec: Mapping[str, Any], args: Mapping[str, str]) -> list[tuple[str, str]]:
    """The fields the object sets that kaiweb validates but does not apply, each with the reason."""
    out: list[tuple[str, str]] = []
    out += [(f"spec.args[{key}]", "a flag of KAI's scheduler that kaiweb does not read")
            for key in sorted(args) if key not in SHARD_ARGS_READ]
    if spec.get("scenarioSearchBudgets") is not None:
        effective = _search_budgets(spec.get("scenarioSearchBudgets"))
        out.append(("spec.scenarioSearchBudgets",
                    f"KAI's wall-clock limits on its victim search ({effective}; 0s is unlimited); kaiweb's victim "
                    "search is deterministic, bounded by a number of scenarios per job and never by time, so "
                    "every budget acts as unlimited"))
    for name in _overrides(spec.get("plugins"), "spec.plugins", True):
        out.append((f"spec.plugins[{name}]", "kaiweb runs KAI's default plugins in their default order; a "
                    "shard's plugin overrides are not applied"))
    ratio = spec.get("goMemLimitRatio")
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            raise _Bad("spec.goMemLimitRatio", "must be a number more than 0 and at most 1", ratio)
    for key in ("goMemLimitRatio", "goMemLimit"):
        if spec.get(key) is not None:
            out.append((f"spec.{key}", "the Go runtime's memory limit of KAI's scheduler process; kaiweb's "
                        "processes take theirs from the chart's resources"))
    out += [(f"spec.{key}", "not a field of KAI's SchedulingShard (kai.scheduler/v1) that kaiweb knows")
            for key in sorted(spec) if key not in SHARD_SPEC_FIELDS]
    return out


@_never_raises("SchedulingShard")
def parse_shard(raw: Mapping[str, Any]) -> ObservedShard | Unreadable:
    try:
        spec = raw.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise _Bad("spec", "must be an object", spec)
        strategy = spec.get("placementStrategy") or {}
        if not isinstance(strategy, Mapping):
            raise _Bad("spec.placementStrategy", "must be an object with gpu and cpu", strategy)
        if strategy.get("gpu") not in (None, "", "binpack", "spread", "fragmentation-aware"):
            raise _Bad("spec.placementStrategy.gpu", "must be binpack, spread or fragmentation-aware", strategy.get("gpu"))
        if strategy.get("cpu") not in (None, "", "binpack", "spread"):
            raise _Bad("spec.placementStrategy.cpu", "must be binpack or spread", strategy.get("cpu"))
        args = spec.get("args") or {}
        if not isinstance(args, Mapping):
            raise _Bad("spec.args", "must be a map of strings", args)
        k_value = spec.get("kValue")
        if k_value is not None and (isinstance(k_value, bool) or not isinstance(k_value, int | float) or k_value < 0):
            raise _Bad("spec.kValue", "must be a number, at least 0", k_value)
        args = {str(k): str(v) for k, v in args.items()}
        mode = args.get(EVICTION_MODE_ARG, EVICT_BY_DELETE)
        if mode not in EVICTION_MODES:
            raise _Bad(f"spec.args[{EVICTION_MODE_ARG}]", EVICTION_MODE_RULE, mode)
        condition = args.get(UPDATE_POD_EVICTION_CONDITION_ARG, "false")
        if condition not in _GO_BOOLS:
            raise _Bad(f"spec.args[{UPDATE_POD_EVICTION_CONDITION_ARG}]",
                       "must be true or false (as KAI's flag reads it: 1, t, T, TRUE, true, True, 0, f, F, FALSE, "
                       "false, False)", condition)
        runtime = _mapping(spec.get("minRuntime"), "spec.minRuntime",
                           "must be an object with preemptMinRuntime and reclaimMinRuntime")
        depths = _queue_depths(spec.get("queueDepthPerAction"))
        window, half_life, usage_db, usage_unsupported = _usage_db(spec.get("usageDBConfig"))
        actions, actions_unsupported = _shard_actions(spec, strategy.get("gpu") or "binpack",
                                                      strategy.get("cpu") or "binpack")
        if actions is not None:
            actions_unsupported += [(f"spec.queueDepthPerAction[{a}]", "names an action the object turns off (KAI's "
                                     "operator refuses such an object); nothing to bound")
                                    for a, _ in depths if a not in actions]
        unsupported = [*usage_unsupported, *actions_unsupported, *_shard_unsupported(spec, args)]
        return ObservedShard(
            name=_meta(raw).get("name", ""), partition_label_value=str(spec.get("partitionLabelValue") or ""),
            gpu_placement=strategy.get("gpu") or None, cpu_placement=strategy.get("cpu") or None,
            args=args,
            k_value=float(k_value) if k_value is not None else None,
            preempt_min_runtime_s=_duration(runtime.get("preemptMinRuntime"), "spec.minRuntime.preemptMinRuntime"),
            reclaim_min_runtime_s=_duration(runtime.get("reclaimMinRuntime"), "spec.minRuntime.reclaimMinRuntime"),
            eviction_mode=mode, update_pod_eviction_condition=_GO_BOOLS[condition],
            queue_depth_per_action=depths, usage_window_s=window, usage_half_life_s=half_life, usage_db=usage_db,
            actions=actions, unsupported=tuple(sorted(unsupported)),
        )
    except _Bad as bad:
        return _unreadable("SchedulingShard", raw, bad)
