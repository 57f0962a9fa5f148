"""The audit log as people read it: one "old → new" line per changed field, in units and with names.

Entries store raw field values (queue figures in CRD units, foreign keys by id, durations in
seconds); this turns them into "GPU quota: 8 → 16 GPUs", "parent: department-a → department-b",
"CPU limit: unlimited → 128 cores". It only formats; `AuditEntry.changes()` says what changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kaiweb.ui.formatting import _trim, fmt_amount, fmt_duration

_RESOURCE_TITLE = {"cpu": "CPU", "memory": "memory", "gpu": "GPU"}
_UNIT = {"cpu": "cores", "memory": "GB", "gpu": "GPUs"}
#: foreign keys whose ids the log shows as the referenced queue's name
_QUEUE_KEYS = {"parent_id", "queue_id"}


def _label(field: str) -> str:
    for r, title in _RESOURCE_TITLE.items():
        for part, words in (("quota", "quota"), ("limit", "limit"), ("over_quota_weight", "over-quota weight")):
            if field == f"{r}_{part}":
                return f"{title} {words}"
    if field.endswith("_id"):
        field = field[:-3]
    return field.replace("_", " ")


def _value(field: str, value: Any, names: dict[int, str]) -> str:
    if value is None or value == "":
        return "inherit" if field.endswith("_min_runtime") else "—"
    if field in _QUEUE_KEYS:
        return names.get(value, f"#{value}")
    for r in _RESOURCE_TITLE:
        if field in (f"{r}_quota", f"{r}_limit"):
            shown = fmt_amount(value, r)
            return "unlimited" if shown == "∞" else f"{shown} {_UNIT[r]}"
        if field == f"{r}_over_quota_weight" and isinstance(value, int | float):
            return _trim(float(value))
    if field.endswith("_min_runtime") and isinstance(value, int | float):
        return fmt_duration(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "none"
    if field == "queues" and isinstance(value, list):
        return " · ".join(_org_entry(e) for e in value) or "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    if isinstance(value, float):
        return _trim(value)
    return str(value)


def _org_entry(entry: Any) -> str:
    """A department's or project's queue entry (KRM's units) as "h100 (vision-h100): GPU 4 guaranteed, 8 at
    most, weight 1; CPU …", the resources that are set."""
    if not isinstance(entry, dict):
        return str(entry)
    parts = []
    for r, title in _RESOURCE_TITLE.items():
        amounts = entry.get(r) or {}
        if not isinstance(amounts, dict) or not any(amounts.values()):
            continue
        most = amounts.get("limit", 0)
        parts.append(f"{title} {_trim(float(amounts.get('deserved', 0)))} guaranteed, "
                     f"{'no ceiling' if most == -1 else _trim(float(most)) + ' at most'}, "
                     f"weight {_trim(float(amounts.get('over_quota_weight', 0)))}")
    name = f" ({entry['name']})" if entry.get("name") else ""
    return f"{entry.get('pool', '?')}{name}: {'; '.join(parts) or 'nothing set'}"


def readable_changes(entries: Iterable[Any]) -> list[list[dict[str, str]]]:
    """Per entry, its changed fields as {"field", "old", "new"} (one query for every queue name)."""
    from kaiweb.queues.models import Queue

    entries = list(entries)
    diffs = [e.changes() for e in entries]
    ids = {v for d in diffs for f, pair in d.items() if f in _QUEUE_KEYS for v in pair if isinstance(v, int)}
    names = dict(Queue.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}
    out = []
    for entry, diff in zip(entries, diffs, strict=True):
        rows = []
        for field, (old, new) in diff.items():
            if entry.before is None and new in (None, "", {}, []):
                continue  # a creation lists what was set, not every empty field
            rows.append({"field": _label(field), "old": _value(field, old, names) if entry.before is not None else "",
                         "new": _value(field, new, names) if entry.after is not None else ""})
        out.append(rows)
    return out
