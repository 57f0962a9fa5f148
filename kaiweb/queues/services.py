"""Writes of the queues app: the queue tree, memberships and priority classes.

Every write runs in one transaction, checks the rules first and raises a ValidationError
whose keys are field names and whose messages state the rule, so nothing is half-written.
Each change is recorded in the audit log. Suspicious but allowed states (children's quotas
adding up above their parent's) come back as warnings on the returned `Change`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, OperationalError, connection, transaction

from kaiweb.accounts import roles
from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.core.choices import RESOURCES, UNLIMITED
from kaiweb.core.services import Change, already_exists, reject_unknown_fields
from kaiweb.queues.choices import MembershipRole
from kaiweb.queues.models import PriorityClass, Queue, QueueBounds, QueueMembership
from kaiweb.workloads.choices import ACTIVE_WORKLOAD_STATES

Actor = AbstractBaseUser | AnonymousUser | None
F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)

QUEUE_FIELDS = frozenset(
    {
        "name", "display_name", "parent", "priority", "preempt_min_runtime", "reclaim_min_runtime", "labels",
        *(f"{r}_{part}" for r in RESOURCES for part in ("quota", "limit", "over_quota_weight")),
    }
)
PRIORITY_CLASS_FIELDS = frozenset({"name", "value", "preemptible", "global_default", "description"})


# ------------------------------------------------------------------------------------------ tree rules


def resolve_parent(value: Queue | int | str | None) -> Queue | None:
    """The parent queue given as an object, a primary key or a name; a clear error if it does not exist."""
    if value is None or value == "":
        return None
    if isinstance(value, Queue):
        return value
    if isinstance(value, bool) or not isinstance(value, int | str) or isinstance(value, int) and not 0 < value < 2**63:
        raise ValidationError({"parent": "must be the name of a queue (or null for the top level)"})
    lookup = {"pk": value} if isinstance(value, int) else {"name": value}
    parent = Queue.objects.filter(**lookup).first()
    if parent is None:
        raise ValidationError({"parent": f"queue {value!r} does not exist; create the parent first"})
    return parent


def find_cycle(parents: Mapping[Any, Any], start: Any) -> list[Any] | None:
    """The loop reached by following parents from `start` (keys, start first), or None."""
    path: list[Any] = []
    seen: set[Any] = set()
    node: Any = start
    while node is not None:
        if node in seen:
            return [*path[path.index(node):], node]
        seen.add(node)
        path.append(node)
        node = parents.get(node)
    return None


def check_tree(queue: Queue, parent: Queue | None, *, lock: bool = False) -> None:
    """Rules that need the rest of the tree: no cycle, and only leaf queues hold workloads.

    With `lock` (inside a transaction) the queue rows are locked while the tree is read, so two
    concurrent moves cannot each pass the cycle check and together make a loop.
    """
    if parent is None:
        return
    if queue.pk is not None:
        rows_qs = Queue.objects.select_for_update() if lock else Queue.objects.all()
        rows = list(rows_qs.values_list("pk", "parent_id", "name"))
        parents: dict[Any, Any] = {pk: parent_id for pk, parent_id, _ in rows}
        names = {pk: name for pk, _, name in rows}
        names[queue.pk] = queue.name  # the queue may be renamed in this change
        parents[queue.pk] = parent.pk
        loop = find_cycle(parents, queue.pk)
        if loop:
            raise ValidationError(
                {
                    "parent": f"putting {queue.name} under {parent.name} makes a cycle in the tree: "
                    + " → ".join(names[pk] for pk in loop)
                }
            )
    active = parent.workloads.filter(state__in=ACTIVE_WORKLOAD_STATES).count()
    if active:
        raise ValidationError(
            {
                "parent": f"queue {parent.name} has {active} active workload(s); only leaf queues hold workloads, "
                "so it cannot get child queues"
            }
        )


def quota_warnings(queue: Queue) -> list[str]:
    """Warnings for the queue's parent and for the queue itself: children's quotas above the parent's.

    `queue` may carry unsaved values (the edit preview): it stands in for its stored row among its
    parent's children, so the preview warns exactly as the save will."""
    warnings: list[str] = []
    parents = [p for p in (queue.parent, queue if queue.pk else None) if p is not None]
    for parent in parents:
        children = [queue if c.pk == queue.pk else c for c in Queue.objects.filter(parent=parent)]
        if parent is queue.parent and all(c is not queue for c in children):
            children.append(queue)
        if not children:
            continue
        for r in RESOURCES:
            parent_quota = getattr(parent, f"{r}_quota")
            if parent_quota == UNLIMITED:
                continue
            quotas = [getattr(c, f"{r}_quota") for c in children]
            if UNLIMITED in quotas:
                warnings.append(
                    f"a child of {parent.name} has an unlimited {r} quota while {parent.name}'s {r} quota is "
                    f"{parent_quota:g}: the children are promised more than the parent has"
                )
            elif sum(quotas) > parent_quota:
                warnings.append(
                    f"the children of {parent.name} have {r} quotas summing to {sum(quotas):g}, above "
                    f"{parent.name}'s {r} quota {parent_quota:g}: not every child can get its quota"
                )
    return warnings


def _validate(queue: Queue) -> None:
    # The check constraints mirror clean(); clean() says it in words, so skip their generic messages.
    queue.full_clean(validate_constraints=False)


# ------------------------------------------------------------------------------------------ concurrency


def _is_lock_conflict(exc: OperationalError) -> bool:
    """A deadlock or a serialization failure: the transaction can simply be run again."""
    sqlstate = getattr(getattr(exc, "__cause__", None), "sqlstate", None)
    return sqlstate in {"40P01", "40001"} or "deadlock" in str(exc).lower()


def retry_on_conflict(func: F) -> F:
    """Run a write once more when the database aborted it for a deadlock (only as the outermost
    transaction: inside another one, the caller's transaction is lost and the error goes up)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if connection.in_atomic_block:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except OperationalError as exc:
            if not _is_lock_conflict(exc):
                raise
            log.warning("%s hit a lock conflict (%s); running it again", func.__name__, exc)
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]  # the wrapper keeps the signature of what it wraps


def lock_tree() -> None:
    """Lock every queue row, in id order, until the transaction ends.

    A move locks the whole tree before it reads it for cycles; taking the locks in one global order
    means two concurrent moves wait for each other instead of deadlocking.
    """
    list(Queue.objects.select_for_update().order_by("pk").values_list("pk", flat=True))


def _save_unique(queue: Queue) -> None:
    """Save, turning a unique-name race (two creates or renames of one name at once) into a rule error."""
    try:
        with transaction.atomic():
            queue.save()
    except IntegrityError as exc:
        if Queue.objects.filter(name=queue.name).exclude(pk=queue.pk).exists():
            raise already_exists("name", f"a queue named {queue.name!r} already exists; queue names are unique") from exc
        raise


# ------------------------------------------------------------------------------------------ queues


def _apply(queue: Queue, data: Mapping[str, Any]) -> Queue | None:
    reject_unknown_fields(dict(data), QUEUE_FIELDS)
    values = dict(data)
    parent = queue.parent
    if "parent" in values:
        parent = resolve_parent(values.pop("parent"))
        queue.parent = parent
    for key, value in values.items():
        setattr(queue, key, value)
    return parent


def check_bounds(queue: Queue, actor: Actor, before: Mapping[str, Any] | None = None) -> None:
    """A queue admin (not a platform admin, not the system) may not raise a field past the platform
    admins' bound (`QueueBounds`); each field past it is named with the bound. `before` holds the
    stored values: a value that did not change is not judged again."""
    from kaiweb.accounts import roles

    if actor is None or not getattr(actor, "is_authenticated", False) or roles.is_platform_admin(actor):
        return
    errors: dict[str, str] = {}
    for field, bound in QueueBounds.load().limits().items():
        if bound is None:
            continue
        value = getattr(queue, field)
        if before is not None and before.get(field) == value:
            continue
        unlimited = field != "priority" and value == UNLIMITED
        if unlimited or value > bound:
            shown = "unlimited (-1)" if unlimited else f"{value:g}"
            errors[field] = (f"{shown} is above {bound:g}, the most a queue admin may set (a platform admin's "
                             "bound); ask a platform admin")
    if errors:
        raise ValidationError(errors)


BOUNDS_FIELDS = frozenset({"max_priority", "max_gpu_quota", "max_gpu_limit", "max_cpu_quota", "max_memory_quota",
                           "max_over_quota_weight"})


def update_bounds(data: Mapping[str, Any], *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> Change[QueueBounds]:
    """Change what queue admins may set (platform admins only: the admin and callers check the role)."""
    return audit.update_singleton(QueueBounds, data, BOUNDS_FIELDS, _check_bounds, actor=actor, source=source)


def _check_bounds(obj: QueueBounds) -> None:
    for field in BOUNDS_FIELDS:
        value = getattr(obj, field)
        if value is not None and not math.isfinite(float(value)):
            raise ValidationError({field: "must be a finite number"})


def create_queue(data: Mapping[str, Any], *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> Change[Queue]:
    """Create a queue from field values (parent as object, id or name)."""
    with transaction.atomic():
        queue = Queue()
        parent = _apply(queue, data)
        if queue.name and Queue.objects.filter(name=queue.name).exists():
            raise already_exists("name", f"a queue named {queue.name!r} already exists; queue names are unique")
        _validate(queue)
        check_bounds(queue, actor)
        check_tree(queue, parent)
        _save_unique(queue)
        audit.record(queue, AuditAction.CREATE, actor=actor, source=source, after=audit.snapshot(queue))
        return Change(queue, quota_warnings(queue))


@retry_on_conflict
def update_queue(
    queue: Queue, data: Mapping[str, Any], *, actor: Actor = None, source: str = AuditSource.SYSTEM
) -> Change[Queue]:
    """Change some fields of a queue (a partial update); the tree is re-checked when the parent moves.

    A move locks the whole tree in id order first (`lock_tree`), so concurrent moves serialise and
    a pair that would make a cycle together is refused; a deadlock is retried once.
    """
    with transaction.atomic():
        if "parent" in data:
            lock_tree()
        queue = Queue.objects.select_for_update().get(pk=queue.pk)
        before = audit.snapshot(queue)
        old_name = queue.name
        parent = _apply(queue, data)
        if queue.name != old_name and Queue.objects.filter(name=queue.name).exclude(pk=queue.pk).exists():
            raise already_exists("name", f"a queue named {queue.name!r} already exists; queue names are unique")
        _validate(queue)
        check_bounds(queue, actor, before)
        if "parent" in data:
            check_tree(queue, parent)
        _save_unique(queue)
        after = audit.snapshot(queue)
        if after != before:
            audit.record(queue, AuditAction.UPDATE, actor=actor, source=source, before=before, after=after)
        return Change(queue, quota_warnings(queue))


def delete_problems(queue: Queue) -> list[str]:
    """Why `queue` cannot be deleted (empty when it can): it has children or workloads."""
    problems = []
    children = list(queue.children.order_by("name").values_list("name", flat=True))
    if children:
        problems.append(f"queue {queue.name} has child queues ({', '.join(children)}); delete or move them first")
    workloads = queue.workloads.count()
    if workloads:
        problems.append(
            f"queue {queue.name} has {workloads} workload(s); delete them or move them to another queue first"
        )
    return problems


def delete_queue(queue: Queue, *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> None:
    """Delete a leaf queue without workloads; its status and usage history go with it."""
    with transaction.atomic():
        queue = Queue.objects.select_for_update().get(pk=queue.pk)
        problems = delete_problems(queue)
        if problems:
            raise ValidationError({"queue": problems})
        before = audit.snapshot(queue)
        pk = queue.pk
        queue.delete()
        audit.record(queue, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)


def set_membership(
    queue: Queue, user: AbstractBaseUser, role: str | None, *, actor: Actor = None, source: str = AuditSource.SYSTEM
) -> QueueMembership | None:
    """Give `user` a role on `queue` (and its subtree), or remove it with role None."""
    if role is not None and role not in MembershipRole.values:
        raise ValidationError({"role": f"must be one of {', '.join(MembershipRole.values)}, not {role!r}"})
    with transaction.atomic():
        existing = QueueMembership.objects.filter(queue=queue, user=user).first()
        before = audit.snapshot(existing) if existing else None
        if role is None:
            if existing is not None:
                pk = existing.pk
                existing.delete()
                audit.record(existing, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)
            membership = None
        else:
            membership, created = QueueMembership.objects.update_or_create(
                queue=queue, user=user, defaults={"role": role}
            )
            audit.record(
                membership, AuditAction.CREATE if created else AuditAction.UPDATE,
                actor=actor, source=source, before=before, after=audit.snapshot(membership),
            )
    roles.forget(user)
    return membership


# ------------------------------------------------------------------------------------------ priority classes


def _check_priority_class(pc: PriorityClass) -> None:
    clash = PriorityClass.objects.filter(name=pc.name).exclude(pk=pc.pk).first()
    if clash is not None:
        raise already_exists("name", f"a priority class named {pc.name!r} already exists (value {clash.value}); "
                             "names are unique")
    pc.full_clean(validate_unique=False, validate_constraints=False)
    if pc.global_default and PriorityClass.objects.filter(global_default=True).exclude(pk=pc.pk).exists():
        other = PriorityClass.objects.filter(global_default=True).exclude(pk=pc.pk).first()
        raise ValidationError(
            {"global_default": f"{other.name} is already the global default; only one class can be"}
        )


def create_priority_class(
    data: Mapping[str, Any], *, actor: Actor = None, source: str = AuditSource.SYSTEM
) -> Change[PriorityClass]:
    """Create a priority class; `preemptible` defaults to KAI's rule (value below 100)."""
    reject_unknown_fields(dict(data), PRIORITY_CLASS_FIELDS)
    with transaction.atomic():
        values = dict(data)
        if "preemptible" not in values and isinstance(values.get("value"), int):
            values["preemptible"] = PriorityClass.default_preemptible(values["value"])
        pc = PriorityClass(**values)
        _check_priority_class(pc)
        pc.save()
        audit.record(pc, AuditAction.CREATE, actor=actor, source=source, after=audit.snapshot(pc))
        return Change(pc, _priority_class_warnings(pc))


def update_priority_class(
    pc: PriorityClass, data: Mapping[str, Any], *, actor: Actor = None, source: str = AuditSource.SYSTEM
) -> Change[PriorityClass]:
    """Change a priority class."""
    reject_unknown_fields(dict(data), PRIORITY_CLASS_FIELDS)
    with transaction.atomic():
        pc = PriorityClass.objects.select_for_update().get(pk=pc.pk)
        before = audit.snapshot(pc)
        for key, value in data.items():
            setattr(pc, key, value)
        _check_priority_class(pc)
        pc.save()
        after = audit.snapshot(pc)
        if after != before:
            audit.record(pc, AuditAction.UPDATE, actor=actor, source=source, before=before, after=after)
        return Change(pc, _priority_class_warnings(pc))


def delete_priority_class(pc: PriorityClass, *, actor: Actor = None, source: str = AuditSource.SYSTEM) -> None:
    """Delete a priority class no workload uses."""
    with transaction.atomic():
        used = pc.workloads.count()
        if used:
            raise ValidationError(
                {"priority_class": f"{pc.name} is used by {used} workload(s); change their class first"}
            )
        before = audit.snapshot(pc)
        pk = pc.pk
        pc.delete()
        audit.record(pc, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)


def _priority_class_warnings(pc: PriorityClass) -> list[str]:
    if pc.preemptible != PriorityClass.default_preemptible(pc.value):
        kind = "preemptible" if pc.preemptible else "non-preemptible"
        return [f"{pc.name} is {kind} although KAI's default for value {pc.value} is the opposite (below 100 = preemptible)"]
    return []


def queue_names(queues: Iterable[Queue]) -> list[str]:
    """Names of the queues, sorted (for messages)."""
    return sorted(q.name for q in queues)
