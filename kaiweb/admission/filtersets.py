"""Filters of the bindings list (API)."""

from __future__ import annotations

import django_filters

from kaiweb.admission.models import NamespaceQueueBinding


class NamespaceQueueBindingFilterSet(django_filters.FilterSet):
    queue = django_filters.CharFilter(field_name="queue__name", help_text="The queue's name.")

    class Meta:
        model = NamespaceQueueBinding
        fields = ("id", "namespace", "queue")
