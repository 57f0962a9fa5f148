"""Admin building blocks: writes go through the services (rules, audit, warnings) and the roles decide."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models

from kaiweb.accounts import roles
from kaiweb.audit.choices import AuditSource
from kaiweb.core.services import Change

SOURCE = AuditSource.ADMIN


class ServiceAdmin(admin.ModelAdmin):
    """A ModelAdmin whose saves and deletes call services; only platform admins change by default.

    Subclasses implement `service_save(request, obj, data, change)` returning a `Change` and
    `service_delete(request, obj)`. Bulk deletion is off: it would bypass the rules and the audit.
    """

    def get_actions(self, request: Any) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def has_view_permission(self, request: Any, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_module_permission(self, request: Any) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_add_permission(self, request: Any) -> bool:
        return roles.can_manage_platform(request.user)

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return roles.can_manage_platform(request.user)

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return roles.can_manage_platform(request.user)

    def service_save(self, request: Any, obj: models.Model, data: dict[str, Any], change: bool) -> Change[Any]:
        raise NotImplementedError

    def service_delete(self, request: Any, obj: models.Model) -> None:
        raise NotImplementedError

    def save_model(self, request: Any, obj: Any, form: forms.ModelForm, change: bool) -> None:
        data = {name: form.cleaned_data[name] for name in form.changed_data if name in form.cleaned_data}
        if not change:
            data = {name: value for name, value in form.cleaned_data.items() if name in self._editable(form)}
        target = obj.__class__.objects.get(pk=obj.pk) if change else None
        result = self.service_save(request, target, data, change)
        obj.pk = result.obj.pk
        obj.refresh_from_db()
        for warning in result.warnings:
            self.message_user(request, warning, messages.WARNING)

    def _editable(self, form: forms.ModelForm) -> set[str]:
        return set(form.fields)

    def delete_model(self, request: Any, obj: Any) -> None:
        self.service_delete(request, obj)

    def save_related(self, request: Any, form: Any, formsets: Any, change: bool) -> None:
        # Many-to-many fields are managed through their own services (memberships), not here.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Observed state and history: staff may look, nobody edits here (the cluster and the cycles write it)."""

    def get_actions(self, request: Any) -> dict[str, Any]:
        return {}

    def has_view_permission(self, request: Any, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_module_permission(self, request: Any) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
