"""The pod-grouper's vocabulary: public results, the PodGroup being built, and safe readers of raw objects.

Everything here works on plain dicts as the Kubernetes API returns them. Readers never raise on a
malformed object except through `Bad`, which `group_pod` turns into a `Problem` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# ------------------------------------------------------------------------------------------ names

PODGROUP_API_VERSION = "scheduling.run.ai/v2alpha2"
PODGROUP_KIND = "PodGroup"
PRIORITY_CLASS_API_VERSION = "scheduling.k8s.io/v1"

POD_GROUP_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
QUEUE_LABEL = "kai.scheduler/queue"
PROJECT_LABEL = "project"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
# KAI Resource Management's: a namespace so labelled is a project's, and a PodGroup made there carries
# this node-pool value until its pool is chosen (absence already means the default pool).
NAMESPACE_PROJECT_LABEL = "kai/project"
UNASSIGNED_NODE_POOL = "kai-unexisting-node-pool"
USER_LABEL = "user"
PRIORITY_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
SKIP_ANNOTATION = "kai.scheduler/skip-podgrouper"
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
PREEMPTION_DELAY_ANNOTATION = "kai.scheduler/preemption-delay"
STALENESS_ANNOTATION = "kai.scheduler/staleness-grace-period"
TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
TOPOLOGY_REQUIRED_ANNOTATION = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED_ANNOTATION = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE_ANNOTATION = "kai.scheduler/segment-size"
SEGMENT_REQUIRED_ANNOTATION = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED_ANNOTATION = "kai.scheduler/segment-topology-preferred-placement"
TOP_OWNER_ANNOTATION = "kai.scheduler/top-owner-metadata"

TRAIN_PRIORITY = "train"
INFERENCE_PRIORITY = "inference"
PREEMPTIBILITY_VALUES = ("preemptible", "non-preemptible")

# ------------------------------------------------------------------------------------------ public results

Lookup = Callable[[str, str, str, str], Mapping[str, Any] | None]
"""(apiVersion, kind, namespace, name) -> the raw object, or None when absent. Namespace "" = cluster scope."""

ListPods = Callable[[str, Mapping[str, str]], Iterable[Mapping[str, Any]]]
"""(namespace, label selector as equalities) -> the raw pods of that namespace carrying all those labels."""


@dataclass(frozen=True)
class Grouping:
    """What the pod-grouper wants in the cluster for one pod: its PodGroup and the marks on the pod."""

    podgroup: dict[str, Any]
    pod_annotations: dict[str, str]
    pod_labels: dict[str, str]
    top_owner: dict[str, str]
    notes: tuple[str, ...] = ()  # ignored bad values (KAI logs them and goes on), e.g. an unknown preemptibility


@dataclass(frozen=True)
class Skipped:
    """The pod is not the grouper's business (another scheduler, opted out, or grouped by hand)."""

    reason: str


@dataclass(frozen=True)
class Problem:
    """The pod cannot be grouped: a value on the pod or an owner breaks a rule, named by its field."""

    field: str
    rule: str
    message: str


class Bad(Exception):
    """Raised inside the grouper; becomes a `Problem`."""

    def __init__(self, field: str, rule: str, message: str) -> None:
        super().__init__(message)
        self.field, self.rule, self.message = field, rule, message


# ------------------------------------------------------------------------------------------ the PodGroup being built


@dataclass
class Topology:
    topology: str = ""
    required: str = ""
    preferred: str = ""

    def as_json(self) -> dict[str, str]:
        out = {"topology": self.topology, "requiredTopologyLevel": self.required,
               "preferredTopologyLevel": self.preferred}
        return {k: v for k, v in out.items() if v}


@dataclass
class SubGroupPlan:
    name: str
    min_member: int = 0
    min_sub_group: int | None = None
    parent: str | None = None
    has_pod: bool = False  # the pod being grouped belongs to this subgroup
    topology: Topology | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.parent is not None:
            out["parent"] = self.parent
        if self.topology is not None and self.topology.as_json():
            out["topologyConstraint"] = self.topology.as_json()
        if self.min_sub_group is not None:
            out["minSubGroup"] = self.min_sub_group
        else:
            out["minMember"] = self.min_member
        return out


@dataclass
class Plan:
    """KAI's PodGroup metadata: everything a plugin decides before the object is written."""

    name: str
    namespace: str
    owner: dict[str, str]  # apiVersion, kind, name, uid of the PodGroup's owner
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    queue: str = ""
    priority_class: str = ""
    preemptibility: str = ""
    preemption_delay: str | None = None
    staleness_grace: str | None = None
    min_member: int = 1
    min_sub_group: int | None = None
    sub_groups: list[SubGroupPlan] = field(default_factory=list)
    topology: Topology = field(default_factory=Topology)
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ readers


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    value = obj.get("metadata") if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def str_map(value: Any) -> dict[str, str]:
    """Labels or annotations as str -> str; anything else in them is dropped."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return str_map(meta(obj).get("labels"))


def annotations(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return str_map(meta(obj).get("annotations"))


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]...; None as soon as a step is missing or not an object."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def describe(obj: Mapping[str, Any] | None, kind: str | None = None) -> str:
    m = meta(obj)
    kind = kind or (obj.get("kind") if isinstance(obj, Mapping) else None) or "object"
    namespace = m.get("namespace")
    return f"{kind} {namespace}/{m.get('name')}" if namespace else f"{kind} {m.get('name')}"


# ------------------------------------------------------------------------------------------ durations

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def parse_go_duration(text: str) -> int | None:
    """A Go duration ("90s", "1h30m", "-5m") in nanoseconds; None when it is not one."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    if body == "0":
        return 0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(body):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_NS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(body):
        return None
    return sign * round(total)


def format_go_duration(ns: int) -> str:
    """Nanoseconds as Go's Duration.String() writes them ("1m30s", "1h0m0s", "500ms", "0s")."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 10**9:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + _trim(ns / size) + unit
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _trim(rest / 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _trim(value: float) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"
