"""Forms of the org pages: a node pool, a department, a project (with one row of numbers per node pool).

The forms check shapes only; the services check KRM's rules and their errors go back onto the field they
name. ``values()`` is what the service takes.
"""

from __future__ import annotations

from typing import Any

from django import forms

from kaiweb.cluster.choices import GpuPlacementStrategy, PlacementStrategy
from kaiweb.core.choices import RESOURCES
from kaiweb.org.models import Department, NodePool, Project
from kaiweb.org.rules import DEFAULT_QUEUE_PRIORITY, QueueEntry

AMOUNTS = ("deserved", "limit", "over_quota_weight")
AMOUNT_LABEL = {"deserved": "guaranteed", "limit": "at most (-1: no ceiling)", "over_quota_weight": "over-quota weight"}
SHOWN = ("gpu", "cpu", "memory")  # the form's rows, GPUs first
RESOURCE_LABEL = {"gpu": "GPU (devices)", "cpu": "CPU (millicores)", "memory": "Memory (MB)"}
MAX_AMOUNT = 1e12
# An amount left empty: KRM's default is 0 everywhere, and a limit of 0 is a ceiling of zero; the form
# offers no ceiling instead, so a pool row that sets only GPUs does not forbid CPU and memory.
EMPTY_AMOUNT = {"deserved": 0, "limit": -1, "over_quota_weight": 1}


class NodePoolForm(forms.Form):
    name = forms.SlugField(max_length=63, help_text="Lower-case letters, digits and dashes.")
    label_key = forms.CharField(max_length=253, required=False, help_text="The node label that selects the pool's "
                                "nodes, e.g. nvidia.com/gpu.product. Fixed once made.")
    label_value = forms.CharField(max_length=63, required=False, help_text="Its value, matched exactly.")
    gpu_placement = forms.ChoiceField(choices=GpuPlacementStrategy.choices, initial=GpuPlacementStrategy.BINPACK,
                                      label="GPU placement strategy")
    cpu_placement = forms.ChoiceField(choices=PlacementStrategy.choices, initial=PlacementStrategy.BINPACK,
                                      label="CPU placement strategy")
    k_value = forms.FloatField(min_value=0, max_value=1e6, initial=1.0, label="k-value",
                               help_text="Time-based fair share strength (0 = off).")
    preempt_min_runtime = forms.DurationField(required=False, help_text="e.g. 00:05:00; empty: none.")
    reclaim_min_runtime = forms.DurationField(required=False, help_text="e.g. 00:10:00; empty: none.")

    def __init__(self, *args: Any, pool: NodePool | None = None, **kwargs: Any) -> None:
        if pool is not None and "initial" not in kwargs:
            shard = pool.shard
            kwargs["initial"] = {"name": pool.name, "label_key": pool.label_key, "label_value": pool.label_value,
                                 **({k: getattr(shard, k) for k in ("gpu_placement", "cpu_placement", "k_value",
                                                                     "preempt_min_runtime", "reclaim_min_runtime")}
                                    if shard is not None else {})}
        super().__init__(*args, **kwargs)
        if pool is not None:
            for fixed in ("name", "label_key", "label_value"):
                self.fields[fixed].disabled = True

    def values(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        for fixed in ("name", "label_key", "label_value"):
            if self.fields[fixed].disabled:
                data.pop(fixed)
        return data


class OwnerForm(forms.Form):
    """A department's or project's fields and one row of numbers per node pool."""

    name = forms.SlugField(max_length=63, help_text="Lower-case letters, digits and dashes; names its queues.")
    display_name = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: Any, pools: list[str], owner: Department | Project | None = None,
                 entries: tuple[QueueEntry, ...] = (), **kwargs: Any) -> None:
        initial = kwargs.setdefault("initial", {})
        if owner is not None:
            initial.setdefault("name", owner.name)
            initial.setdefault("display_name", owner.display_name)
        for e in entries:
            initial[f"q-{e.pool}-on"] = True
            initial[f"q-{e.pool}-priority"] = e.priority
            for r in RESOURCES:
                for a in AMOUNTS:
                    initial[f"q-{e.pool}-{r}-{a}"] = getattr(getattr(e, r), a)
        super().__init__(*args, **kwargs)
        self.pools = pools
        if owner is not None:
            self.fields["name"].disabled = True
        for pool in pools:
            self.fields[f"q-{pool}-on"] = forms.BooleanField(required=False, label=f"a queue in {pool}")
            self.fields[f"q-{pool}-priority"] = forms.IntegerField(
                required=False, min_value=-(2**31), max_value=2**31 - 1, initial=DEFAULT_QUEUE_PRIORITY,
                label="priority")
            for r in RESOURCES:
                for a in AMOUNTS:
                    self.fields[f"q-{pool}-{r}-{a}"] = forms.FloatField(
                        required=False, min_value=-1, max_value=MAX_AMOUNT, initial=EMPTY_AMOUNT[a],
                        label=f"{pool} {RESOURCE_LABEL[r]} {AMOUNT_LABEL[a]}")

    def pool_rows(self) -> list[dict[str, Any]]:
        """Per pool: its switch, priority and the 3×3 numbers, for the template."""
        return [{"pool": pool, "on": self[f"q-{pool}-on"], "priority": self[f"q-{pool}-priority"],
                 "resources": [(RESOURCE_LABEL[r], [self[f"q-{pool}-{r}-{a}"] for a in AMOUNTS]) for r in SHOWN]}
                for pool in self.pools]

    def entries(self) -> list[dict[str, Any]]:
        out = []
        for pool in self.pools:
            if not self.cleaned_data.get(f"q-{pool}-on"):
                continue
            priority = self.cleaned_data.get(f"q-{pool}-priority")
            entry: dict[str, Any] = {"pool": pool,
                                     "priority": DEFAULT_QUEUE_PRIORITY if priority is None else priority}
            for r in RESOURCES:
                given = {a: self.cleaned_data.get(f"q-{pool}-{r}-{a}") for a in AMOUNTS}
                entry[r] = {a: EMPTY_AMOUNT[a] if v is None else v for a, v in given.items()}
            out.append(entry)
        return out

    def people(self) -> list[str]:
        """The usernames of the admins (a department) or members (a project)."""
        raise NotImplementedError

    def values(self) -> dict[str, Any]:
        data = {"display_name": self.cleaned_data.get("display_name", ""), "queues": self.entries()}
        if not self.fields["name"].disabled:
            data["name"] = self.cleaned_data["name"]
        return data


def _usernames(owner: Any, field: str) -> str:
    return " ".join(sorted(u.get_username() for u in getattr(owner, field).all())) if owner is not None else ""


class DepartmentForm(OwnerForm):
    admins = forms.CharField(max_length=5000, required=False, label="Department admins",
                             help_text="Usernames, space-separated: they run the department's projects.")

    def __init__(self, *args: Any, owner: Department | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {}).setdefault("admins", _usernames(owner, "admins"))
        super().__init__(*args, owner=owner, **kwargs)

    def people(self) -> list[str]:
        return (self.cleaned_data.get("admins") or "").split()


class ProjectForm(OwnerForm):
    department = forms.ChoiceField(required=False)
    namespace = forms.CharField(max_length=63, required=False,
                                help_text="An existing namespace to adopt; empty: kai-<name>, made and kept.")
    enforce_kai_scheduler = forms.BooleanField(
        required=False, label="Enforce the KAI scheduler",
        help_text="Put every pod of the namespace on the scheduler, whatever it asked for.")
    members = forms.CharField(max_length=5000, required=False, label="Project members",
                              help_text="Usernames, space-separated: they see the project.")
    default_node_pools = forms.CharField(
        max_length=500, required=False, help_text="Node pools, in order, space-separated, for workloads that name "
        "none; each needs a queue above.")

    def __init__(self, *args: Any, departments: list[str], allow_none: bool,
                 owner: Project | None = None, **kwargs: Any) -> None:
        initial = kwargs.setdefault("initial", {})
        if owner is not None:
            initial.setdefault("department", owner.department.name if owner.department_id else "")
            initial.setdefault("namespace", owner.namespace)
            initial.setdefault("enforce_kai_scheduler", owner.enforce_kai_scheduler)
            initial.setdefault("default_node_pools", " ".join(owner.default_node_pools or []))
            initial.setdefault("members", _usernames(owner, "members"))
        super().__init__(*args, owner=owner, **kwargs)
        choices = [(d, d) for d in departments]
        self.fields["department"].choices = ([("", "(none)")] if allow_none else []) + choices

    def people(self) -> list[str]:
        return (self.cleaned_data.get("members") or "").split()

    def clean_default_node_pools(self) -> list[str]:
        return (self.cleaned_data.get("default_node_pools") or "").split()

    def values(self) -> dict[str, Any]:
        data = super().values()
        data.update({k: self.cleaned_data[k] for k in ("department", "namespace", "enforce_kai_scheduler",
                                                       "default_node_pools")})
        return data
