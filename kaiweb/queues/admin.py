"""Admin of the queues app: the tree (queue admins edit their subtrees), priority classes, memberships."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from kaiweb.accounts import roles
from kaiweb.core.admin import SOURCE, ServiceAdmin
from kaiweb.core.services import Change
from kaiweb.queues import services
from kaiweb.queues.models import PriorityClass, Queue, QueueBounds, QueueMembership
from kaiweb.queues.services import QUEUE_FIELDS


class QueueAdminForm(forms.ModelForm):
    """Checks the tree rules (cycle, parent with workloads) as form errors, before anything is saved."""

    class Meta:
        model = Queue
        fields = [
            "name", "display_name", "parent", "priority",
            "cpu_quota", "cpu_limit", "cpu_over_quota_weight",
            "memory_quota", "memory_limit", "memory_over_quota_weight",
            "gpu_quota", "gpu_limit", "gpu_over_quota_weight",
            "preempt_min_runtime", "reclaim_min_runtime", "labels",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if "parent" in data and not self.errors:
            if (self.instance.pk is None or "parent" in self.changed_data):
                services.check_tree(self.instance, data.get("parent"))
        return data

    def validate_unique(self) -> None:
        # The check constraints repeat the field rules in generic words; show only the rules' messages.
        if not self._errors:
            super().validate_unique()


@admin.register(Queue)
class QueueAdmin(ServiceAdmin):
    form = QueueAdminForm
    list_display = ("name", "display_name", "parent", "priority", "gpu_quota", "gpu_limit", "gpu_over_quota_weight")
    list_filter = ("priority", ("parent", admin.RelatedOnlyFieldListFilter))
    search_fields = ("name", "display_name")
    list_select_related = ("parent",)
    ordering = ("name",)
    fieldsets = (
        (None, {"fields": ("name", "display_name", "parent", "priority", "labels")}),
        ("CPU (millicores; -1 = unlimited)", {"fields": ("cpu_quota", "cpu_limit", "cpu_over_quota_weight")}),
        ("Memory (MB; -1 = unlimited)", {"fields": ("memory_quota", "memory_limit", "memory_over_quota_weight")}),
        ("GPU (devices; -1 = unlimited)", {"fields": ("gpu_quota", "gpu_limit", "gpu_over_quota_weight")}),
        ("Minimum runtime", {"fields": ("preempt_min_runtime", "reclaim_min_runtime")}),
    )

    def has_add_permission(self, request: Any) -> bool:
        return roles.is_platform_admin(request.user) or roles.is_queue_admin(request.user)

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        if obj is None:
            return roles.is_platform_admin(request.user) or roles.is_queue_admin(request.user)
        return roles.can_edit_queue(request.user, obj)

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj)

    def formfield_for_foreignkey(self, db_field: Any, request: Any, **kwargs: Any) -> Any:
        if db_field.name == "parent" and not roles.is_platform_admin(request.user):
            # Queue admins place queues only inside the subtrees they administer.
            kwargs["queryset"] = Queue.objects.filter(pk__in=roles.administered_queue_ids(request.user))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_form(self, request: Any, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        if "parent" in form.base_fields and not roles.is_platform_admin(request.user):
            form.base_fields["parent"].required = True
        return form

    def service_save(self, request: Any, obj: Queue | None, data: dict[str, Any], change: bool) -> Change[Queue]:
        data = {k: v for k, v in data.items() if k in QUEUE_FIELDS}
        if obj is None:
            return services.create_queue(data, actor=request.user, source=SOURCE)
        return services.update_queue(obj, data, actor=request.user, source=SOURCE)

    def service_delete(self, request: Any, obj: Queue) -> None:
        services.delete_queue(obj, actor=request.user, source=SOURCE)

    def get_deleted_objects(self, objs: Any, request: Any) -> tuple[Any, Any, Any, Any]:
        problems = [p for obj in objs for p in services.delete_problems(obj)]
        if problems:
            # Shown by the admin as the reasons the deletion is not possible.
            return [], {}, set(), problems
        return super().get_deleted_objects(objs, request)


@admin.register(PriorityClass)
class PriorityClassAdmin(ServiceAdmin):
    list_display = ("name", "value", "preemptible", "global_default")
    list_filter = ("preemptible", "global_default")
    search_fields = ("name",)
    fields = ("name", "value", "preemptible", "global_default", "description")

    def service_save(self, request: Any, obj: PriorityClass | None, data: dict[str, Any], change: bool) -> Change[Any]:
        if obj is None:
            return services.create_priority_class(data, actor=request.user, source=SOURCE)
        return services.update_priority_class(obj, data, actor=request.user, source=SOURCE)

    def service_delete(self, request: Any, obj: PriorityClass) -> None:
        services.delete_priority_class(obj, actor=request.user, source=SOURCE)


@admin.register(QueueMembership)
class QueueMembershipAdmin(ServiceAdmin):
    list_display = ("queue", "user", "role")
    list_filter = ("role",)
    search_fields = ("queue__name", "user__username")
    autocomplete_fields = ("user", "queue")

    def service_save(self, request: Any, obj: Any, data: dict[str, Any], change: bool) -> Change[Any]:
        queue = data.get("queue", obj.queue if obj else None)
        user = data.get("user", obj.user if obj else None)
        if obj is not None and (obj.queue_id != queue.pk or obj.user_id != user.pk):
            services.set_membership(obj.queue, obj.user, None, actor=request.user, source=SOURCE)
        membership = services.set_membership(queue, user, data.get("role", obj.role if obj else "admin"),
                                             actor=request.user, source=SOURCE)
        return Change(membership)

    def service_delete(self, request: Any, obj: Any) -> None:
        services.set_membership(obj.queue, obj.user, None, actor=request.user, source=SOURCE)


@admin.register(QueueBounds)
class QueueBoundsAdmin(ServiceAdmin):
    """What queue admins may set on their queues; platform admins change it."""

    list_display = ("__str__", "max_priority", "max_gpu_quota", "max_gpu_limit", "max_over_quota_weight")

    def has_add_permission(self, request: Any) -> bool:
        return False  # one row, created on first use

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: Any) -> Any:
        QueueBounds.load()
        return super().get_queryset(request)

    def service_save(self, request: Any, obj: Any, data: dict[str, Any], change: bool) -> Change[Any]:
        return services.update_bounds(data, actor=request.user, source=SOURCE)
