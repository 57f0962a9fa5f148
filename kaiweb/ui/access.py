"""Roles as the pages show them; the rules themselves live in `kaiweb.accounts.roles`.

The pages ask these questions only to show or hide buttons and to refuse forms early; the
services and the API enforce the same rules on every write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaiweb.accounts import roles


@dataclass(frozen=True, slots=True)
class Role:
    key: str
    label: str


PLATFORM_ADMIN = Role("platform-admin", "platform admin")
QUEUE_ADMIN = Role("queue-admin", "queue admin")
VIEWER = Role("viewer", "viewer")
ANONYMOUS = Role("anonymous", "signed out")


def role_of(user: Any) -> Role:
    if user is None or not user.is_authenticated:
        return ANONYMOUS
    if roles.is_platform_admin(user):
        return PLATFORM_ADMIN
    if roles.is_queue_admin(user):
        return QUEUE_ADMIN
    return VIEWER


def editable_queue_ids(user: Any) -> frozenset[int] | None:
    """Ids of the queues the user may edit; None means every queue (platform admin)."""
    if roles.is_platform_admin(user):
        return None
    return roles.administered_queue_ids(user)


can_edit_queue = roles.can_edit_queue
