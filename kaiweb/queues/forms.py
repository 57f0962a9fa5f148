"""The queue edit form: its fields in the Queue CRD's units; the rules are the services'."""

from __future__ import annotations

from typing import Any

from django import forms

from kaiweb.core.choices import RESOURCES
from kaiweb.queues.models import Queue

RESOURCE_FIELDS = [f"{r}_{part}" for r in RESOURCES for part in ("quota", "limit", "over_quota_weight")]
EDIT_FIELDS = ["display_name", "parent", "priority", *RESOURCE_FIELDS, "preempt_min_runtime", "reclaim_min_runtime"]
UNIT_HINT = {"cpu": "millicores (1000 = 1 core)", "memory": "MB (10^6 bytes)", "gpu": "devices, fractions allowed"}


class QueueForm(forms.ModelForm):
    """Edit one queue. The parent choices are limited to queues the user may edit.

    Field values are checked by the model's validators here; the tree rules (cycles, a parent
    with workloads) and the audit record come from `kaiweb.queues.services.update_queue`, whose
    errors the view puts back on the field they name.
    """

    class Meta:
        model = Queue
        fields = EDIT_FIELDS
        widgets = {
            **{f: forms.NumberInput(attrs={"step": "any"}) for f in RESOURCE_FIELDS},
            "preempt_min_runtime": forms.TextInput(attrs={"placeholder": "inherit, e.g. 00:10:00"}),
            "reclaim_min_runtime": forms.TextInput(attrs={"placeholder": "inherit, e.g. 00:10:00"}),
        }

    def __init__(self, *args: Any, editable_ids: frozenset[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        parent_qs = Queue.objects.order_by("name")
        if self.instance.pk:
            parent_qs = parent_qs.exclude(pk=self.instance.pk)
        if editable_ids is not None:
            # A queue admin moves queues only inside their own subtrees, never to the top level.
            allowed = set(editable_ids)
            if self.instance.parent_id:
                allowed.add(self.instance.parent_id)
            parent_qs = parent_qs.filter(pk__in=allowed)
            self.fields["parent"].required = bool(self.instance.parent_id)
            self.fields["parent"].empty_label = None if self.instance.parent_id else "— top level —"
        else:
            self.fields["parent"].empty_label = "— top level —"
        self.fields["parent"].queryset = parent_qs
        self.fields["parent"].help_text = "Only leaf queues hold workloads; a queue with workloads cannot get children."
        for name in RESOURCE_FIELDS:
            # 384000.0 reads better as 384000: show whole numbers without a decimal point.
            value = getattr(self.instance, name, None)
            if isinstance(value, float) and value.is_integer() and not self.is_bound:
                self.initial[name] = int(value)
        for r in RESOURCES:
            self.fields[f"{r}_quota"].help_text = f"{UNIT_HINT[r]}; -1 = unlimited"
            self.fields[f"{r}_limit"].help_text = "-1 = no cap; 0 = none at all"
            self.fields[f"{r}_over_quota_weight"].help_text = "share of the surplus; 0 = none"

    def resource_rows(self) -> list[tuple[str, list[Any]]]:
        """(resource, [quota, limit, weight] bound fields) for the grid layout."""
        return [(r, [self[f"{r}_{p}"] for p in ("quota", "limit", "over_quota_weight")]) for r in RESOURCES]

    def changed_values(self) -> dict[str, Any]:
        """The cleaned values of the fields that changed, as the update service takes them."""
        return {name: self.cleaned_data[name] for name in self.changed_data if name in self.cleaned_data}


class QueueCreateForm(QueueForm):
    """A new queue: its name, and the same fields as the edit form."""

    class Meta(QueueForm.Meta):
        fields = ["name", *EDIT_FIELDS]

    def __init__(self, *args: Any, editable_ids: frozenset[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, editable_ids=editable_ids, **kwargs)
        self.fields["name"].help_text = "A Kubernetes name: lowercase letters, digits and '-'; it cannot be changed later."
        if editable_ids is not None:
            # Queue admins create queues only under a queue they administer.
            self.fields["parent"].required = True
            self.fields["parent"].empty_label = None
            self.fields["parent"].queryset = Queue.objects.filter(pk__in=editable_ids).order_by("name")

    def values(self) -> dict[str, Any]:
        """Every field, as the create service takes them."""
        return {name: self.cleaned_data[name] for name in self.Meta.fields if name in self.cleaned_data}
