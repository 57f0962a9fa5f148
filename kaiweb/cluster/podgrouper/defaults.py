"""KAI's default grouper: the PodGroup every plugin starts from.

One PodGroup per top owner, named ``pg-<owner name>-<owner uid>``, owned by the top owner, minMember 1.
Its labels are the owner's labels, its annotations the owner's annotations plus the top-owner
metadata; queue, priority class, preemptibility, preemption delay, staleness grace and topology come
from labels and annotations of the owners and the pod, in KAI's order (see each function).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from kaiweb.cluster.podgrouper.model import (
    INFERENCE_PRIORITY,
    NAMESPACE_PROJECT_LABEL,
    NODE_POOL_LABEL,
    PREEMPTIBILITY_LABEL,
    PREEMPTIBILITY_VALUES,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_CLASS_API_VERSION,
    PRIORITY_LABEL,
    PROJECT_LABEL,
    QUEUE_LABEL,
    STALENESS_ANNOTATION,
    TOP_OWNER_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    TRAIN_PRIORITY,
    USER_LABEL,
    Bad,
    ListPods,
    Lookup,
    Plan,
    Topology,
    dig,
    format_go_duration,
    labels,
    meta,
    parse_go_duration,
    str_map,
)

__all__ = ["INFERENCE_PRIORITY", "Context", "Obj", "default_plan", "priority_for", "queue_for"]


@dataclass
class Obj:
    """An object of the owner chain (or the pod itself), with the apiVersion/kind it was reached by.

    Labels and annotations are copies: the skip-top-owner rule adds the skipped owner's to them.
    """

    api_version: str
    kind: str
    raw: Mapping[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, api_version: str, kind: str, raw: Mapping[str, Any]) -> Obj:
        m = meta(raw)
        return cls(api_version, kind, raw, str_map(m.get("labels")), str_map(m.get("annotations")))

    @property
    def name(self) -> str:
        return str(meta(self.raw).get("name") or "")

    @property
    def namespace(self) -> str:
        return str(meta(self.raw).get("namespace") or "")

    @property
    def uid(self) -> str:
        return str(meta(self.raw).get("uid") or "")

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def ref(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}

    def identity(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, "uid": self.uid}

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


def bad(obj: Obj, path: str, rule: str, value: Any = None, *, show_value: bool = True) -> Bad:
    """A `Bad` naming the object and the field: field "Job/train-1 spec.parallelism"."""
    got = f" (got {value!r})" if show_value else ""
    return Bad(f"{obj.kind}/{obj.name} {path}", rule, f"{obj.describe()}: {path} {rule}{got}")


def int_field(obj: Obj, value: Any, path: str, *, minimum: int | None = None) -> int | None:
    """A whole-number field of a raw object (JSON may give 3 or 3.0); None when unset."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise bad(obj, path, "must be a whole number", value)
    if minimum is not None and value < minimum:
        raise bad(obj, path, f"must be at least {minimum}", value)
    return int(value)


def int_text(obj: Obj, value: str, path: str, *, minimum: int | None = None) -> int:
    """A whole number written in an annotation or label ("3"), read as KAI's strconv reads it."""
    text = value.strip() if isinstance(value, str) else ""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise bad(obj, path, "must be a whole number", value)
    number = int(text)
    if minimum is not None and number < minimum:
        raise bad(obj, path, f"must be at least {minimum}", value)
    return number


@dataclass
class Context:
    """One call of `group_pod`: the pod, how to read the cluster, and the caller's settings."""

    pod: Mapping[str, Any]
    lookup: Lookup
    namespace_labels: Callable[[str], Mapping[str, str]] | None = None
    default_queue: str | None = None
    queue_label: str = QUEUE_LABEL
    node_pool_label: str = NODE_POOL_LABEL
    priority_class_exists: Callable[[str], bool] | None = None
    workload_defaults: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    list_pods: ListPods | None = None
    notes: list[str] = field(default_factory=list)
    _priority_seen: dict[str, bool] = field(default_factory=dict)

    @property
    def pod_name(self) -> str:
        return str(meta(self.pod).get("name") or "")

    @property
    def pod_namespace(self) -> str:
        return str(meta(self.pod).get("namespace") or "")

    @property
    def pod_labels(self) -> dict[str, str]:
        return labels(self.pod)

    @property
    def pod_annotations(self) -> dict[str, str]:
        return str_map(meta(self.pod).get("annotations"))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The lookup, made safe: an exception or a non-object answer counts as absent."""
        try:
            found = self.lookup(api_version, kind, namespace, name)
        except Exception as exc:  # the caller's lookup failing must not stop the grouper
            self.notes.append(f"could not read {kind} {namespace}/{name}: {exc}")
            return None
        return found if isinstance(found, Mapping) else None

    def priority_exists(self, name: str) -> bool:
        if not name:
            return False
        if name not in self._priority_seen:
            if self.priority_class_exists is not None:
                self._priority_seen[name] = bool(self.priority_class_exists(name))
            else:
                self._priority_seen[name] = self.get(PRIORITY_CLASS_API_VERSION, "PriorityClass", "", name) is not None
        return self._priority_seen[name]

    def defaults_for(self, obj: Obj) -> Mapping[str, str] | None:
        """The per-workload-type defaults (KAI's default-priorities ConfigMap) for this owner's kind."""
        if not self.workload_defaults or not obj.kind:
            return None
        key = f"{obj.kind}.{obj.group}" if obj.group else obj.kind
        return self.workload_defaults.get(key) or self.workload_defaults.get(obj.kind)


def workload_defaults_from(types: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, str]]:
    """KAI's default-priorities ConfigMap ``types`` list ({typeName, group, priorityName, preemptibility})
    as the mapping `Context` reads, keyed like Kubernetes' GroupKind ("Job.batch", "Pod")."""
    out: dict[str, Mapping[str, str]] = {}
    for item in types:
        if not isinstance(item, Mapping) or not item.get("typeName"):
            continue
        key = f"{item['typeName']}.{item['group']}" if item.get("group") else str(item["typeName"])
        out[key] = {"priorityName": str(item.get("priorityName") or ""),
                    "preemptibility": str(item.get("preemptibility") or "")}
    return out


# ------------------------------------------------------------------------------------------ the default plan


def default_plan(ctx: Context, top: Obj, all_owners: list[Obj] | None = None) -> Plan:
    """KAI's DefaultGrouper.GetPodGroupMetadata for this top owner.

    ``all_owners`` is the chain from the pod's first owner up to the top; plugins pass nothing, and
    then only the top owner counts for the priority class and preemptibility (as in KAI).
    """
    owners = all_owners or [top]
    priority, _ = _priority_with_defaults(ctx, owners, TRAIN_PRIORITY)
    plan = Plan(
        name=f"pg-{top.name}-{top.uid}",
        namespace=ctx.pod_namespace,
        owner=top.ref(),
        labels=_plan_labels(ctx, top),
        annotations=_plan_annotations(ctx, top),
        queue=queue_for(ctx, top),
        priority_class=priority,
        preemptibility=_preemptibility(ctx, owners),
        preemption_delay=_duration(ctx, owners, PREEMPTION_DELAY_ANNOTATION, negative_ok=False),
        staleness_grace=_duration(ctx, owners, STALENESS_ANNOTATION, negative_ok=True),
        min_member=1,
    )
    plan.topology = Topology(top.annotations.get(TOPOLOGY_ANNOTATION, ""),
                             top.annotations.get(TOPOLOGY_REQUIRED_ANNOTATION, ""),
                             top.annotations.get(TOPOLOGY_PREFERRED_ANNOTATION, ""))
    return plan


def _plan_labels(ctx: Context, top: Obj) -> dict[str, str]:
    out = dict(top.labels)
    if USER_LABEL not in out and USER_LABEL in ctx.pod_labels:
        out[USER_LABEL] = ctx.pod_labels[USER_LABEL]
    return out


def _plan_annotations(ctx: Context, top: Obj) -> dict[str, str]:
    out: dict[str, str] = {}
    if USER_LABEL in ctx.pod_annotations:
        out[USER_LABEL] = ctx.pod_annotations[USER_LABEL]
    out[TOP_OWNER_ANNOTATION] = _top_owner_yaml(top)
    out.update(top.annotations)
    return out


def _top_owner_yaml(top: Obj) -> str:
    """The top owner as KAI's annotation holds it: a small YAML mapping."""
    fields = {"name": top.name, "uid": top.uid, "group": top.group, "version": top.version, "kind": top.kind}
    return yaml.safe_dump(fields, sort_keys=False, default_flow_style=False)


# ------------------------------------------------------------------------------------------ queue


def queue_for(ctx: Context, top: Obj) -> str:
    """The PodGroup's queue, in KAI's order, then this project's two fallbacks.

    KAI: the queue label on the top owner, then on the pod, then the ``project`` label (top owner,
    then pod; with ``-<node pool>`` appended when the pod carries the node-pool label), and finally
    KAI's fixed "default-queue". Here a namespace's project (KRM's ``kai/project`` label) stands for the
    ``project`` label, and the namespace's queue label and then ``default_queue`` come before giving up, and giving up is a `Problem` naming the label (pass
    ``default_queue="default-queue"`` to get KAI's behaviour exactly).
    """
    label = ctx.queue_label
    if label in top.labels:
        return top.labels[label]
    if label in ctx.pod_labels:
        return ctx.pod_labels[label]
    project = top.labels.get(PROJECT_LABEL) if PROJECT_LABEL in top.labels else ctx.pod_labels.get(PROJECT_LABEL)
    ns_labels: dict[str, str] = {}
    if not project and ctx.namespace_labels is not None:
        try:
            ns_labels = str_map(ctx.namespace_labels(ctx.pod_namespace))
        except Exception as exc:  # the caller's reader failing is a missing label, not a crash
            ctx.notes.append(f"could not read the labels of namespace {ctx.pod_namespace}: {exc}")
        # A pod in a project's namespace (KRM's `kai/project` label) is the project's, as KRM's pod
        # admission labels it; the org's assigner then gives its PodGroup the project's queue in its pool.
        project = ns_labels.get(NAMESPACE_PROJECT_LABEL)
    if project:
        pool = ctx.pod_labels.get(ctx.node_pool_label)
        return f"{project}-{pool}" if pool is not None else project
    if ns_labels.get(label):
        return ns_labels[label]
    if ctx.default_queue:
        return ctx.default_queue
    raise Bad(f"metadata.labels[{label}]", "is required: the queue of the workload",
              f"no queue for pod {ctx.pod_namespace}/{ctx.pod_name}: neither {top.describe()}, the pod nor "
              f"namespace {ctx.pod_namespace} has the label {label}, and no default queue is set")


# ------------------------------------------------------------------------------------------ priority class


def _label_priority(ctx: Context, owner: Obj) -> str:
    if PRIORITY_LABEL in owner.labels:
        return owner.labels[PRIORITY_LABEL]
    if PRIORITY_LABEL in ctx.pod_labels:
        return ctx.pod_labels[PRIORITY_LABEL]
    spec_name = dig(ctx.pod, "spec", "priorityClassName")
    return spec_name if isinstance(spec_name, str) else ""


def _priority_with_defaults(ctx: Context, owners: list[Obj], fallback: str) -> tuple[str, bool]:
    """KAI: for each owner, its ``priorityClassName`` label, else the pod's label, else the pod's
    spec.priorityClassName, taken when that PriorityClass exists; then the per-type default of the
    first owner whose kind has one that exists; else the fallback (train, or inference for
    Deployments), which is not checked."""
    for owner in owners:
        name = _label_priority(ctx, owner)
        if ctx.priority_exists(name):
            return name, False
        if name:
            ctx.notes.append(f"priority class {name!r} named by {owner.describe()} or its pod does not exist")
    for owner in owners:
        defaults = ctx.defaults_for(owner)
        if defaults and ctx.priority_exists(defaults.get("priorityName", "")):
            return defaults["priorityName"], True
    return fallback, True


def priority_for(ctx: Context, top: Obj, fallback: str) -> str:
    """KAI's CalcPodGroupPriorityClass: as above with the top owner alone (used for Deployments)."""
    return _priority_with_defaults(ctx, [top], fallback)[0]


# ------------------------------------------------------------------------------------------ preemptibility, durations


def _preemptibility(ctx: Context, owners: list[Obj]) -> str:
    """The preemptibility label of the first owner that has a valid one, else the pod's, else the
    per-type default; empty when none (the scheduler then goes by the priority class). As in KAI, an
    empty label value is valid and ends the search; an unknown value is noted and passed over."""
    found = [(o.describe(), o.labels.get(PREEMPTIBILITY_LABEL)) for o in owners]
    found.append((f"pod {ctx.pod_namespace}/{ctx.pod_name}", ctx.pod_labels.get(PREEMPTIBILITY_LABEL)))
    for where, value in found:
        if value is None:
            continue
        if value in PREEMPTIBILITY_VALUES or value == "":
            return value
        ctx.notes.append(f"{where}: label {PREEMPTIBILITY_LABEL}={value!r} ignored: "
                         f"must be preemptible or non-preemptible")
    for owner in owners:
        value = (ctx.defaults_for(owner) or {}).get("preemptibility", "").lower()
        if value in PREEMPTIBILITY_VALUES:
            return value
    return ""


def _duration(ctx: Context, owners: list[Obj], key: str, *, negative_ok: bool) -> str | None:
    """A duration annotation of the first owner with a valid one, else the pod's; Go's spelling."""
    candidates = [(o.describe(), o.annotations.get(key)) for o in owners]
    candidates.append((f"pod {ctx.pod_namespace}/{ctx.pod_name}", ctx.pod_annotations.get(key)))
    for where, text in candidates:
        if text is None:
            continue
        ns = parse_go_duration(text)
        if ns is None or (ns < 0 and not negative_ok):
            rule = "a duration such as 30s, 5m or 1h30m" + ("" if negative_ok else ", not negative")
            ctx.notes.append(f"{where}: annotation {key}={text!r} ignored: must be {rule}")
            continue
        return format_go_duration(ns)
    return None


def list_matching_pods(ctx: Context, namespace: str, selector: Mapping[str, str]) -> list[Mapping[str, Any]] | None:
    """Pods of the namespace with all these labels, or None when the caller gave no pod lister."""
    if ctx.list_pods is None:
        return None
    try:
        pods = list(ctx.list_pods(namespace, dict(selector)))
    except Exception as exc:  # a failing lister is the same as none
        ctx.notes.append(f"could not list pods in {namespace}: {exc}")
        return None
    return [p for p in pods if isinstance(p, Mapping)
            and all(labels(p).get(k) == v for k, v in selector.items())]
