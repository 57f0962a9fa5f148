"""Admin of namespace→queue bindings (platform admins change them; the writes are audited)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db import transaction

from kaiweb.admission import services
from kaiweb.admission.models import NamespaceQueueBinding
from kaiweb.core.admin import SOURCE, ServiceAdmin
from kaiweb.core.services import Change


class BindingAdminForm(forms.ModelForm):
    class Meta:
        model = NamespaceQueueBinding
        fields = ["namespace", "queue"]

    def clean_queue(self) -> Any:
        queue = self.cleaned_data["queue"]
        if queue is not None and queue.children.exists():
            raise forms.ValidationError(f"queue {queue.name} has child queues: bind a namespace to leaf queues")
        return queue


@admin.register(NamespaceQueueBinding)
class NamespaceQueueBindingAdmin(ServiceAdmin):
    form = BindingAdminForm
    list_display = ("namespace", "queue", "created")
    search_fields = ("namespace", "queue__name")
    autocomplete_fields = ("queue",)

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).select_related("queue")

    def service_save(self, request: Any, obj: Any, data: dict[str, Any], change: bool) -> Change[Any]:
        namespace = data.get("namespace", obj.namespace if obj else "")
        queue = data.get("queue", obj.queue if obj else None)
        with transaction.atomic():  # a change is a removal and an addition, both or neither
            if obj is not None:
                services.unbind(obj, actor=request.user, source=SOURCE)
            return Change(services.bind(namespace, queue, actor=request.user, source=SOURCE))

    def service_delete(self, request: Any, obj: Any) -> None:
        services.unbind(obj, actor=request.user, source=SOURCE)
