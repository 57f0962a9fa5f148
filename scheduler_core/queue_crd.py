"""KAI's Queue CRD (``scheduling.run.ai/v2``) and the engine's ``QueueSpec``: the one reader and writer.

Every Queue document kaiweb reads or writes goes through here: a YAML import, a Queue read from
the cluster, the agreed spec the CRD sync remembers, the simulator's queue files, the export and
the CRD written to the cluster. The CRD's units are converted at this border and nowhere else:
CPU in millicores and GPUs in devices as they are, memory in MB (10^6 bytes) in the CRD and in
bytes in the engine (``units``' functions); -1 means unlimited on both sides.

Unset fields take KAI's meaning: quota 0 (no guarantee), limit 0 (a cap of zero), over-quota
weight 0 (no share of the surplus), priority 100. Two ways to read:

* ``strict`` (a file a person wrote: import, ``replay --queues``): apiVersion and kind are
  checked, an unknown key is an error, a limit below its quota is an error, and an unset limit
  warns (it caps the resource at zero);
* lenient (an object the cluster already holds, which KAI reads as it is): unknown keys are
  ignored (a newer CRD may add some), and a quota above its limit reads as the limit, as KAI's
  fair share caps it there.

Both report every problem with the CRD field it concerns (``Problem``), never raise on bad input,
and apply the same amount rules (``resource_problems``, the one place of that rule).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_core import model as m
from scheduler_core.units import shown, to_engine_units, to_queue_units

API_VERSION = "scheduling.run.ai/v2"
KIND = "Queue"
RESOURCES = ("cpu", "memory", "gpu")
SPEC_KEYS = frozenset({"displayName", "parentQueue", "priority", "resources", "preemptMinRuntime", "reclaimMinRuntime"})
#: CRD key → ``QueueResource`` attribute
RESOURCE_KEYS = {"quota": "quota", "limit": "limit", "overQuotaWeight": "over_quota_weight"}
DEFAULT_PRIORITY = 100
#: the longest duration a Go ``time.Duration`` (the CRD field's type) holds, in seconds
MAX_DURATION_US = (2**63 - 1) // 1000
MAX_DURATION_S = MAX_DURATION_US / 1e6
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
#: CRD key of a duration → ``QueueSpec`` attribute
DURATION_KEYS = {"preemptMinRuntime": "preempt_min_runtime_s", "reclaimMinRuntime": "reclaim_min_runtime_s"}


@dataclass(frozen=True, slots=True)
class Problem:
    """One field that cannot be read: its CRD path, the rule it breaks, the value found."""

    field: str
    message: str
    value: Any = None


@dataclass(slots=True)
class Reading:
    """What one Queue document says: the spec (None when a problem keeps it from being read),
    its labels, every problem and the warnings (strict reads only)."""

    name: str
    spec: m.QueueSpec | None
    labels: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------- rules


def _not_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)


def resource_problems(quota: Any, limit: Any, weight: Any) -> dict[str, str]:
    """The rule of one resource's quota, limit and over-quota weight (in any one unit), keyed by
    CRD key ("quota", "limit", "overQuotaWeight"); empty when the three are valid."""
    errors: dict[str, str] = {}
    for key, value in (("quota", quota), ("limit", limit)):
        if value is None:
            errors[key] = "is required (-1 for unlimited)"
        elif _not_number(value):
            errors[key] = f"must be a finite number (-1 for unlimited), not {shown(value)}"
        elif value < 0 and value != m.UNLIMITED:
            errors[key] = f"must be -1 (unlimited) or a non-negative amount, not {value:g}"
    if weight is None:
        errors["overQuotaWeight"] = "is required"
    elif _not_number(weight):
        errors["overQuotaWeight"] = f"must be a finite number, not {shown(weight)}"
    elif weight < 0:
        errors["overQuotaWeight"] = f"must not be negative (got {weight:g}); 0 means no share of the surplus"
    if "quota" in errors or "limit" in errors or limit == m.UNLIMITED:
        return errors
    if quota == m.UNLIMITED:
        errors["limit"] = f"limit {limit:g} is below the quota (unlimited); use -1 for the limit or lower the quota"
    elif limit < quota:
        errors["limit"] = f"limit {limit:g} is below the quota {quota:g}; a limit must be -1 or ≥ the quota"
    return errors


# ----------------------------------------------------------------------------------- durations


def parse_duration(value: Any) -> float:
    """A Go duration ("90s", "5m", "1h30m") or a number of seconds, in seconds; ValueError when
    unreadable or longer than a Go duration holds (about 292 years)."""
    seconds: float
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number of seconds or a duration like '90s', not {shown(value)}")
        seconds = float(value)
    elif isinstance(value, str) and value:
        pos, seconds = 0, 0.0
        for match in _DURATION_PART.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
            pos = match.end()
        if pos != len(value):
            raise ValueError(f"must be a duration like '90s', '5m' or '1h30m', not {shown(value)}")
    else:
        raise ValueError(f"must be a duration like '90s', '5m' or '1h30m', not {shown(value)}")
    if not 0 <= seconds <= MAX_DURATION_S:
        raise ValueError(f"must be between 0s and {format_duration(MAX_DURATION_S)} (the longest Go duration), "
                         f"not {shown(value)}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds as a Go duration ("1h30m"; 90 → "1m30s")."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, whole = divmod(rest, 60)
    frac = seconds - int(seconds)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if whole or frac or not out:
        out += f"{whole + frac:g}s"
    return out


# ---------------------------------------------------------------------------------------- read


def read(doc: Any, *, strict: bool = True, creation: float = 0.0) -> Reading:
    """One Queue object (a mapping with metadata and spec) → ``Reading``; see the module docstring."""
    problems: list[Problem] = []
    warnings: list[str] = []

    def problem(path: str, message: str, value: Any = None) -> None:
        problems.append(Problem(path, message, value))

    if not isinstance(doc, Mapping):
        return Reading("", None, problems=[Problem("", f"must be a mapping (a Queue object), not {type(doc).__name__}")])
    raw_meta = doc.get("metadata")
    metadata: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    raw_name = metadata.get("name")
    name: str = raw_name if isinstance(raw_name, str) else ""
    if strict:
        if doc.get("apiVersion") != API_VERSION:
            problem("apiVersion", f"must be {API_VERSION}, not {shown(doc.get('apiVersion'))}", doc.get("apiVersion"))
        if doc.get("kind") != KIND:
            problem("kind", f"must be {KIND}, not {shown(doc.get('kind'))}", doc.get("kind"))
    if not name:
        problem("metadata.name", "is required")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        if strict:
            problem("metadata.labels", "must map label names to strings")
        labels = {}
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        problem("spec", "is required and must be a mapping", spec)
        return Reading(name, None, dict(labels), problems, warnings)
    if strict:
        for key in sorted(set(spec) - SPEC_KEYS, key=str):
            problem(f"spec.{key}", f"is not a Queue field (known: {', '.join(sorted(SPEC_KEYS))})")
    display = spec.get("displayName") or None
    if display is not None and not isinstance(display, str):
        problem("spec.displayName", "must be a string", display)
    parent = spec.get("parentQueue") or None
    if parent is not None and not isinstance(parent, str):
        problem("spec.parentQueue", "must be a queue name", parent)
    priority = spec.get("priority")
    if priority is None:
        priority = DEFAULT_PRIORITY
    elif isinstance(priority, bool) or not isinstance(priority, int):
        problem("spec.priority", f"must be an integer, not {shown(priority)}", priority)
    durations: dict[str, float | None] = {}
    for key, attr in DURATION_KEYS.items():
        durations[attr] = None
        if spec.get(key) not in (None, ""):
            try:
                durations[attr] = parse_duration(spec[key])
            except ValueError as exc:
                problem(f"spec.{key}", str(exc), spec[key])
    resources = spec.get("resources")
    if not isinstance(resources, Mapping):
        # KAI's admission webhook rejects a Queue without spec.resources.
        problem("spec.resources", "is required (a mapping of cpu, memory and gpu)", resources)
        return Reading(name, None, dict(labels), problems, warnings)
    if strict:
        for key in sorted(set(resources) - set(RESOURCES), key=str):
            problem(f"spec.resources.{key}", "is not a queue resource (cpu, memory, gpu)")
    parsed: dict[str, m.QueueResource] = {}
    for r in RESOURCES:
        block = resources.get(r) or {}
        path = f"spec.resources.{r}"
        if not isinstance(block, Mapping):
            problem(path, "must be a mapping of quota, limit and overQuotaWeight", block)
            continue
        if strict:
            for key in sorted(set(block) - set(RESOURCE_KEYS), key=str):
                problem(f"{path}.{key}", "is not a resource field (quota, limit, overQuotaWeight)")
        values = {key: (0 if block.get(key) is None else block[key]) for key in RESOURCE_KEYS}
        errors = resource_problems(values["quota"], values["limit"], values["overQuotaWeight"])
        if not strict and set(errors) == {"limit"} and not _not_number(values["limit"]) and values["limit"] >= 0:
            # KAI takes a limit below the quota: the limit wins and caps the fair share, so such a
            # quota reads as the limit (kaiweb's own queues keep quota ≤ limit).
            values["quota"], errors = values["limit"], {}
        for key, message in errors.items():
            problem(f"{path}.{key}", message, values[key])
        if strict and "limit" not in block:
            warnings.append(f"{name}: {path}.limit is unset, which KAI reads as a cap of 0 (no {r} at all); "
                            "set -1 for no cap")
        if not errors:
            parsed[r] = m.QueueResource(quota=to_engine_units(r, values["quota"]),
                                        limit=to_engine_units(r, values["limit"]),
                                        over_quota_weight=float(values["overQuotaWeight"]))
    if problems:
        return Reading(name, None, dict(labels), problems, warnings)
    return Reading(name, m.QueueSpec(
        name=name, parent=parent, priority=priority, display_name=display, creation=creation,
        cpu=parsed["cpu"], memory=parsed["memory"], gpu=parsed["gpu"], **durations,
    ), dict(labels), problems, warnings)


# --------------------------------------------------------------------------------------- write


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def crd_amount(resource: str, value: float) -> int | float:
    """An engine amount of ``resource`` in the CRD's unit (-1 stays -1)."""
    return _plain(value if value < 0 else round(to_queue_units(resource, value), 6))


def write_spec(spec: m.QueueSpec) -> dict[str, Any]:
    """The CRD ``spec`` of a ``QueueSpec``, every resource field explicit (nothing relies on defaults)."""
    body: dict[str, Any] = {}
    if spec.display_name:
        body["displayName"] = spec.display_name
    if spec.parent:
        body["parentQueue"] = spec.parent
    body["priority"] = spec.priority
    body["resources"] = {
        r: {key: (crd_amount(r, getattr(getattr(spec, r), attr)) if key != "overQuotaWeight"
                  else _plain(getattr(getattr(spec, r), attr))) for key, attr in RESOURCE_KEYS.items()}
        for r in RESOURCES
    }
    for key, attr in DURATION_KEYS.items():
        seconds = getattr(spec, attr)
        if seconds is not None:
            body[key] = format_duration(seconds)
    return body


def write(spec: m.QueueSpec, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A whole Queue object for ``spec``."""
    metadata: dict[str, Any] = {"name": spec.name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": write_spec(spec)}


def _flat(body: Mapping[str, Any], prefix: str = "spec") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in body.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}.{key}"))
        else:
            out[f"{prefix}.{key}"] = value
    return out


def differences(a: m.QueueSpec, b: m.QueueSpec) -> dict[str, tuple[Any, Any]]:
    """CRD path → (value in ``a``, value in ``b``) for each field of the CRD where they differ
    (what the engine holds beyond the CRD, such as the creation time, is not compared)."""
    fa, fb = _flat(write_spec(a)), _flat(write_spec(b))
    return {path: (fa.get(path), fb.get(path)) for path in sorted(set(fa) | set(fb)) if fa.get(path) != fb.get(path)}
