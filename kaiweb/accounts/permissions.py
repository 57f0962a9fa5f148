"""API permissions by role (viewer, queue admin, platform admin); the rules are in `roles`."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from kaiweb.accounts import roles


class RolePermission(BasePermission):
    """Reads for any signed-in user; writes for platform admins.

    A viewset that sets ``queue_scoped = True`` (queues) also lets queue admins write: the
    object check then asks `roles.can_edit_queue`, and the viewset checks the new parent. One that
    sets ``department_scoped = True`` (projects) lets department admins write: the object check asks
    `roles.can_edit_project` of the project's department, and the viewset checks the new one.
    """

    message = "You do not have permission to change this; ask a platform admin or the queue's admin."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        if roles.is_platform_admin(user):
            return True
        if getattr(view, "department_scoped", False) and roles.is_department_admin(user):
            return True
        return bool(getattr(view, "queue_scoped", False)) and roles.is_queue_admin(user)

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        if roles.is_platform_admin(request.user):
            return True
        if getattr(view, "queue_scoped", False):
            return roles.can_edit_queue(request.user, obj)
        if getattr(view, "department_scoped", False):
            return roles.can_edit_project(request.user, obj.department_id)
        return False
