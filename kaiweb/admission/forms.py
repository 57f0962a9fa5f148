"""The form that binds a namespace to a queue."""

from __future__ import annotations

from django import forms

from kaiweb.admission.models import namespace_validator
from kaiweb.queues.models import Queue


class BindingForm(forms.Form):
    namespace = forms.CharField(max_length=63, validators=[namespace_validator],
                                help_text="A Kubernetes namespace. From its first binding on, its pods and PodGroups "
                                          "may use only the queues bound to it.")
    queue = forms.ModelChoiceField(queryset=Queue.objects.filter(children__isnull=True).order_by("name"),
                                   to_field_name="name", help_text="A leaf queue.")
