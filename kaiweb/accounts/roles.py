"""Roles: viewer (reads everything), queue admin (edits the subtrees they administer), department admin
(runs the department's projects), project member (sees the project), platform admin.

A platform admin is a superuser or a member of the ``platform-admins`` group. A queue admin holds a
``QueueMembership`` with role ``admin`` on a queue; that role covers the queue and every queue below
it. Everyone signed in is a viewer. These helpers are the one place the rules live: the API
permission class, the Django admin and the HTML forms all call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kaiweb.queues.choices import MembershipRole

if TYPE_CHECKING:
    from kaiweb.queues.models import Queue

PLATFORM_ADMINS_GROUP = "platform-admins"
_CACHE_ATTR = "_kaiweb_admin_queue_ids"
_DEPARTMENTS_ATTR = "_kaiweb_admin_department_ids"


def is_platform_admin(user: Any) -> bool:
    """Superusers and members of the platform-admins group may change everything."""
    if not (user is not None and user.is_authenticated and user.is_active):
        return False
    if user.is_superuser:
        return True
    cached = getattr(user, "_kaiweb_is_platform_admin", None)
    if cached is None:
        cached = user.groups.filter(name=PLATFORM_ADMINS_GROUP).exists()
        user._kaiweb_is_platform_admin = cached
    return cached


def administered_queue_ids(user: Any) -> frozenset[int]:
    """Ids of every queue the user administers through a membership (subtrees included).

    Computed once per user object (two queries) and cached on it, so a request that checks many
    queues stays within a fixed query budget.
    """
    if not (user is not None and user.is_authenticated and user.is_active):
        return frozenset()
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is not None:
        return cached
    from kaiweb.queues.models import Queue, QueueMembership

    roots = set(
        QueueMembership.objects.filter(user=user, role=MembershipRole.ADMIN).values_list("queue_id", flat=True)
    )
    ids: set[int] = set()
    if roots:
        children: dict[int | None, list[int]] = {}
        for pk, parent_id in Queue.objects.values_list("pk", "parent_id"):
            children.setdefault(parent_id, []).append(pk)
        stack = list(roots)
        while stack:
            pk = stack.pop()
            if pk in ids:
                continue
            ids.add(pk)
            stack.extend(children.get(pk, ()))
    result = frozenset(ids)
    setattr(user, _CACHE_ATTR, result)
    return result


def forget(user: Any) -> None:
    """Drop the cached role data of `user` (after its memberships or the tree changed)."""
    for attr in (_CACHE_ATTR, "_kaiweb_is_platform_admin", _DEPARTMENTS_ATTR):
        if hasattr(user, attr):
            delattr(user, attr)


def is_queue_admin(user: Any) -> bool:
    """The user administers at least one queue."""
    return bool(administered_queue_ids(user))


def can_edit_queue(user: Any, queue: Queue | int | None) -> bool:
    """May `user` change (or delete, or add children to) `queue`? None means "the top level"."""
    if is_platform_admin(user):
        return True
    if queue is None:
        return False  # only platform admins create or move queues at the top level
    pk = queue if isinstance(queue, int) else queue.pk
    return pk in administered_queue_ids(user)


def can_manage_platform(user: Any) -> bool:
    """Clusters, shards, priority classes, settings and memberships: platform admins only."""
    return is_platform_admin(user)


# ------------------------------------------------------------------------------------------ departments, projects
# A platform admin runs the whole org; a department admin (``Department.admins``) creates, edits and
# deletes the department's projects, but neither the department's own numbers nor the node pools; a
# project member (``Project.members``) sees the project and changes nothing. Everyone signed in reads
# the org tree, as every signed-in user reads the queue tree.


def administered_department_ids(user: Any) -> frozenset[int]:
    """Ids of the departments the user is an admin of (one query, cached on the user object)."""
    if not (user is not None and user.is_authenticated and user.is_active):
        return frozenset()
    cached = getattr(user, _DEPARTMENTS_ATTR, None)
    if cached is None:
        cached = frozenset(user.administered_departments.values_list("pk", flat=True))
        setattr(user, _DEPARTMENTS_ATTR, cached)
    return cached


def is_department_admin(user: Any) -> bool:
    return bool(administered_department_ids(user))


def can_manage_node_pools(user: Any) -> bool:
    """Node pools (and their shards' configuration): platform admins only."""
    return is_platform_admin(user)


def can_edit_department(user: Any) -> bool:
    """A department's own numbers, and creating or deleting departments: platform admins only."""
    return is_platform_admin(user)


def can_edit_project(user: Any, department: Any) -> bool:
    """May `user` create, change or delete a project in `department` (a Department, its id, or None for
    a project without a department)? Platform admins always; department admins in their departments.
    Moving a project needs this for both its old and its new department."""
    if is_platform_admin(user):
        return True
    if department is None:
        return False
    pk = department if isinstance(department, int) else department.pk
    return pk in administered_department_ids(user)


def is_project_member(user: Any, project: Any) -> bool:
    if not (user is not None and user.is_authenticated):
        return False
    return project.members.filter(pk=user.pk).exists()
