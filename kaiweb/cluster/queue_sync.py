"""The Queue CRD sync's rule: who wins when the database and the cluster disagree on a Queue.

The rule, the one place it is written (`diff_queues` plans it; `kaiweb.cluster.mirror.sync_queues`
and the watcher's Queue events carry the plan out):

* Each queue's spec as both sides last agreed on it is kept (``base``). A side whose spec differs
  from it has changed the queue since.
* Changed on one side only: that side's values win. The database's change is written to the cluster
  (``update``); the cluster's change (``kubectl edit``, GitOps) is taken into the database through the
  control plane's import rules (``import``).
* Changed on both sides: **the cluster wins** (GitOps keeps it declaratively); the database values it
  replaces are named in the message and kept in the audit log.
* No agreed spec yet (a queue met for the first time on both sides): the database's values go to the
  cluster.
* A queue only in the database is created in the cluster; one deleted in the database is deleted in
  the cluster; one only in the cluster, never known to the database, is imported; one deleted in the
  cluster while the database still has it is put back (a queue with workloads cannot vanish).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kaiweb.cluster.backends.types import ObservedQueue, QueueSyncAction
from scheduler_core import queue_crd
from scheduler_core.model import QueueSpec

if TYPE_CHECKING:
    from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway


# -- Queue CRD sync -------------------------------------------------------------------------------


def _spec_differences(db: QueueSpec, cluster: QueueSpec) -> list[str]:
    """Each CRD field that differs, as "field cluster's value → database's value"."""
    return [f"{path.removeprefix('spec.')} {_shown(was)} → {_shown(now)}"
            for path, (was, now) in queue_crd.differences(cluster, db).items()]


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else repr(value)


def _depth(name: str, parents: Mapping[str, str | None]) -> int:
    depth, seen = 0, {name}
    while (parent := parents.get(name)) and parent not in seen:
        seen.add(parent)
        name, depth = parent, depth + 1
    return depth


def diff_queues(
    database: Iterable[QueueSpec], cluster: Iterable[ObservedQueue], *, deleted_in_database: Iterable[str] = (),
    base: Mapping[str, QueueSpec] | None = None,
) -> list[QueueSyncAction]:
    """What to do so the cluster's Queue CRDs and the database agree.

    ``base`` is each queue's spec as both sides last agreed on it. For a queue in both, different:

    * only the database changed since (or there is no base) → ``update`` (the database's values go
      to the cluster; the message lists each overridden value);
    * only the cluster changed (``kubectl edit``, GitOps) → ``import``: the cluster's values go to
      the database, through the control plane's import rules;
    * both changed → ``import`` as well: the cluster, which GitOps keeps declaratively, wins, and
      the message names the database values it replaces (they stay in the audit log).

    Otherwise:

    * in the database only → ``create``;
    * in the cluster only, and deleted in the database → ``delete``;
    * in the cluster only, never known to the database → ``import`` (the other direction of the
      two-way sync: the caller adds it to the database; nothing is written to the cluster).

    Creates come parents first and deletes children first, so a tree can be applied in order;
    the order is otherwise by name, so the same inputs give the same plan.
    """
    db = {q.name: q for q in database}
    seen = {q.name: q for q in cluster}
    deleted = set(deleted_in_database) - set(db)
    parents = {**{n: q.spec.parent for n, q in seen.items()}, **{n: q.parent for n, q in db.items()}}
    creates, updates, deletes, imports = [], [], [], []
    for name in sorted(db, key=lambda n: (_depth(n, parents), n)):
        spec = db[name]
        if name not in seen:
            creates.append(QueueSyncAction("create", name, spec, f"Queue {name} is in the database but not in "
                                           "the cluster: creating it."))
            continue
        changes = _spec_differences(spec, seen[name].spec)
        before = (base or {}).get(name)
        if changes and before is not None and queue_crd.differences(before, seen[name].spec):
            detail = "; ".join(_spec_differences(seen[name].spec, spec))
            if not queue_crd.differences(before, spec):
                message = f"Queue {name} was changed in the cluster: its values replace the database's: {detail}."
            else:
                message = (f"Queue {name} was changed in both the cluster and the database; the cluster wins, "
                           f"replacing the database's values: {detail}.")
            imports.append(QueueSyncAction("import", name, seen[name].spec, message,
                                           resource_version=seen[name].resource_version))
            continue
        if changes:
            updates.append(QueueSyncAction(
                "update", name, spec,
                f"Queue {name} differs between the cluster and the database; the database wins: "
                + "; ".join(changes) + ".", resource_version=seen[name].resource_version))
    for name in sorted(set(seen) - set(db), key=lambda n: (-_depth(n, parents), n)):
        if name in deleted:
            deletes.append(QueueSyncAction("delete", name, None, f"Queue {name} was deleted in the database: "
                                           "deleting it from the cluster.",
                                           resource_version=seen[name].resource_version))
        else:
            imports.append(QueueSyncAction("import", name, seen[name].spec,
                                           f"Queue {name} exists only in the cluster: imported into kaiweb."))
    return creates + updates + deletes + imports


def apply_queue_sync(gateway: KubernetesGateway, actions: Iterable[QueueSyncAction]) -> list[str]:
    """Write the ``create``/``update``/``delete`` steps to the cluster; returns their messages
    (``import`` steps belong to the database side and are skipped here)."""
    done = []
    for action in actions:
        if action.op in ("create", "update") and action.spec is not None:
            gateway.upsert_queue(action.spec)
        elif action.op == "delete":
            gateway.delete_queue(action.name)
        else:
            continue
        done.append(action.message)
    return done
