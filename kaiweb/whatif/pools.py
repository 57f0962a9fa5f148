"""What if a department or a project had other numbers in some node pools? Each pool is its own shard, so the
change is replayed per pool: the owner's queue in that pool changed as its entry says, on the pool's shard,
with that shard's recorded workloads and nodes (`replay.run_whatif`).

The input names the owner and its entries as the org's pages and API write them, numbers given are changed,
the others kept: ``{"project": "vision", "entries": [{"pool": "h100", "gpu": {"deserved": 8}}]}``.

Invariants: read-only and deterministic as `replay.run_whatif` (pools in name order); bounded: the replayed
workloads × cycles of all the pools together stay within KAI_WHATIF_MAX_WORK, checked before any replay, so a
what-if over several pools costs no more than one over a single shard. Bad input raises ``WhatIfInputError``
keyed by the input's path (``org.entries[0].gpu.deserved``, ``org.project`` …).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kaiweb.core.choices import RESOURCES
from kaiweb.whatif import replay
from kaiweb.whatif.replay import WhatIfInputError

#: An entry's numbers per resource, as the org names them → the queue's field suffix.
ENTRY_FIELDS = {"deserved": "quota", "limit": "limit", "over_quota_weight": "over_quota_weight"}
OWNER_KINDS = ("department", "project")


def _owner(org: Mapping[str, Any]) -> tuple[str, Any]:
    from kaiweb.org.models import Department, Project

    given = [k for k in OWNER_KINDS if org.get(k)]
    if len(given) != 1:
        raise WhatIfInputError({"org": ["name exactly one owner: a department or a project, e.g. "
                                        "{\"project\": \"vision\", \"entries\": [{\"pool\": \"h100\", "
                                        "\"gpu\": {\"deserved\": 8}}]}"]})
    kind = given[0]
    name = org[kind]
    model = Department if kind == "department" else Project
    owner = model.objects.filter(name=name).first() if isinstance(name, str) else None
    if owner is None:
        raise WhatIfInputError({f"org.{kind}": [f"no {kind} is named {name!r}"]})
    return kind, owner


def _entry_changes(entry: Any, where: str) -> tuple[str, dict[str, Any], dict[str, str], list[tuple[str, str]]]:
    """An entry's pool, its queue field changes, each field's input path, and the problems found (path, rule)."""
    problems: list[tuple[str, str]] = []
    if not isinstance(entry, Mapping):
        return "", {}, {}, [(where, "must be an object with the pool and the numbers to change")]
    unknown = sorted(set(entry) - {"pool", "priority", *RESOURCES})
    if unknown:
        problems.append((where, f"unknown field(s) {', '.join(map(str, unknown))}; an entry takes pool, priority, "
                                f"{', '.join(RESOURCES)}"))
    pool = entry.get("pool")
    if not isinstance(pool, str) or not pool:
        problems.append((f"{where}.pool", "name the node pool"))
        pool = ""
    fields: dict[str, Any] = {}
    paths: dict[str, str] = {}
    if entry.get("priority") is not None:
        fields["priority"], paths["priority"] = entry["priority"], f"{where}.priority"
    for r in RESOURCES:
        numbers = entry.get(r)
        if numbers is None:
            continue
        if not isinstance(numbers, Mapping) or set(numbers) - set(ENTRY_FIELDS):
            problems.append((f"{where}.{r}", f"takes {', '.join(ENTRY_FIELDS)}"))
            continue
        for part, value in numbers.items():
            fields[f"{r}_{ENTRY_FIELDS[part]}"] = value
            paths[f"{r}_{ENTRY_FIELDS[part]}"] = f"{where}.{r}.{part}"
    if not problems and not fields:
        problems.append((where, "give at least one number to change (priority, or deserved, limit or "
                                "over_quota_weight of gpu, cpu or memory)"))
    return pool, fields, paths, problems


def plan(org: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """The owner's kind and name, and per pool (in name order) its shard, the owner's queue and the changes."""
    if not isinstance(org, Mapping):
        raise WhatIfInputError({"org": ["must be an object naming a department or a project and its entries"]})
    unknown = sorted(set(org) - {*OWNER_KINDS, "entries"})
    if unknown:
        raise WhatIfInputError({"org": [f"unknown field(s) {', '.join(map(str, unknown))}"]})
    kind, owner = _owner(org)
    entries = org.get("entries")
    if not isinstance(entries, list) or not entries:
        raise WhatIfInputError({"org.entries": ["give at least one entry: a node pool and the numbers to change"]})
    owned = {oq.node_pool.name: oq for oq in owner.owned_queues.select_related("queue", "node_pool__shard")}
    errors: dict[str, list[str]] = {}
    pools: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        where = f"org.entries[{i}]"
        pool, fields, paths, problems = _entry_changes(entry, where)
        for key, msg in problems:
            errors.setdefault(key, []).append(msg)
        if not pool:
            continue
        if pool in pools:
            errors.setdefault(f"{where}.pool", []).append(f"node pool {pool!r} is given twice; one entry per pool")
        elif pool not in owned:
            errors.setdefault(f"{where}.pool", []).append(
                f"{kind} {owner.name} has no queue in node pool {pool!r} (its pools: {', '.join(sorted(owned)) or 'none'})")
        elif owned[pool].node_pool.shard is None:
            errors.setdefault(f"{where}.pool", []).append(f"node pool {pool!r} has no scheduling shard yet")
        else:
            oq = owned[pool]
            pools[pool] = {"pool": pool, "shard": oq.node_pool.shard, "queue": oq.queue.name, "where": where,
                           "changes": {oq.queue.name: fields}, "paths": paths}
    if errors:
        raise WhatIfInputError(errors)
    return kind, owner.name, [pools[p] for p in sorted(pools)]


def _rekey(exc: WhatIfInputError, item: dict[str, Any]) -> dict[str, list[str]]:
    """A pool's replay errors under the input's paths: its queue's fields as the entry's, its shard as its pool."""
    out: dict[str, list[str]] = {}
    prefix = f"changes.{item['queue']}"
    for key, messages in exc.message_dict.items():
        if key.startswith(prefix + "."):
            target = item["paths"].get(key[len(prefix) + 1:], item["where"])
        elif key in (prefix, "changes"):
            target = item["where"]
        elif key == "shard":
            target = f"{item['where']}.pool"
            messages = [f"node pool {item['pool']!r}: {m}" for m in messages]
        else:
            target = key
        out.setdefault(target, []).extend(messages)
    return out


def run_pools_whatif(
    org: Any, window: timedelta = replay.DEFAULT_WINDOW, *, now: datetime | None = None,
    max_jobs: int = replay.DEFAULT_MAX_JOBS, max_horizon_s: float = replay.DEFAULT_MAX_HORIZON_S,
    max_cycles: int = replay.DEFAULT_MAX_CYCLES, consolidation: bool = False, check_only: bool = False,
) -> dict[str, Any]:
    """Replay each named pool's recorded workloads under its current queues and with the owner's entry applied;
    JSON-ready: the owner, and per pool its shard, the owner's queue and `replay.run_whatif`'s result."""
    kind, name, items = plan(org)
    kwargs = {"now": now, "max_jobs": max_jobs, "max_horizon_s": max_horizon_s, "max_cycles": max_cycles,
              "consolidation": consolidation}
    errors: dict[str, list[str]] = {}
    work = 0
    for item in items:
        try:
            checked = replay.run_whatif(item["changes"], window, item["shard"], check_only=True, **kwargs)
        except WhatIfInputError as exc:
            for key, messages in _rekey(exc, item).items():
                errors.setdefault(key, []).extend(messages)
            continue
        work += int(checked.get("work", 0))
    if errors:
        raise WhatIfInputError(errors)
    limit = replay.Limits.from_settings().work
    if work > limit:
        raise WhatIfInputError({"max_cycles": [
            f"the pools' replayed workloads × cycles add up to {work}, above the limit of {limit} "
            "(KAI_WHATIF_MAX_WORK) for one what-if; change fewer pools, lower max_jobs, max_cycles or "
            "max_horizon_hours, or narrow the window"]})
    owner = {"kind": kind, "name": name}
    if check_only:
        return {"org": owner, "checked": True, "work": work}
    pools = [{"pool": item["pool"], "shard": item["shard"].name, "queue": item["queue"],
              "result": replay.run_whatif(item["changes"], window, item["shard"], **kwargs)} for item in items]
    return {"org": owner, "pools": pools, "empty": all(p["result"]["empty"] for p in pools)}
