"""API permissions by role (viewer, queue admin, platform admin)."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission


class RolePermission(BasePermission):
    """Read for any signed-in user; writes for staff. Refined per object by the apps."""

    def has_permission(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        return bool(user.is_staff or user.is_superuser)
