"""Writes of the cluster app: clusters and scheduling shards (audited), nodes as observed, and the nodes'
DRA devices as a cycle read them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from kaiweb.audit import services as audit
from kaiweb.audit.choices import AuditAction, AuditSource
from kaiweb.cluster.choices import EvictionMode
from kaiweb.cluster.models import MAX_DRA_DEVICES, Cluster, Node, SchedulingShard
from kaiweb.core.services import Change, already_exists, reject_unknown_fields

CLUSTER_FIELDS = frozenset({"name", "backend", "settings", "enabled", "description"})
SHARD_FIELDS = frozenset(
    {
        "cluster", "name", "partition_label_key", "partition_label_value", "gpu_placement", "cpu_placement",
        "k_value", "usage_window_seconds", "usage_half_life_seconds", "preempt_min_runtime",
        "reclaim_min_runtime", "eviction_mode", "update_pod_eviction_condition", "enabled",
    }
)
# Keys in a cluster's settings that would be secrets: they belong in the environment, not the database.
SECRET_SETTING_HINTS = ("token", "password", "secret", "key")


def _check_cluster(cluster: Cluster) -> None:
    clash = Cluster.objects.filter(name=cluster.name).exclude(pk=cluster.pk).exists()
    if clash:
        raise already_exists("name", f"a cluster named {cluster.name!r} already exists; names are unique")
    cluster.full_clean(validate_unique=False)
    if not isinstance(cluster.settings, dict):
        raise ValidationError({"settings": "must be an object of setting names to values"})
    secrets = sorted(k for k in cluster.settings if any(h in k.lower() for h in SECRET_SETTING_HINTS))
    if secrets:
        raise ValidationError(
            {"settings": f"{', '.join(secrets)} look like secrets; pass them through the environment, not settings"}
        )


def _check_shard(shard: SchedulingShard) -> None:
    if shard.cluster_id is None:
        raise ValidationError({"cluster": "is required"})
    if SchedulingShard.objects.filter(cluster_id=shard.cluster_id, name=shard.name).exclude(pk=shard.pk).exists():
        raise ValidationError({"name": f"cluster already has a shard named {shard.name!r}"})
    other = (
        SchedulingShard.objects.filter(
            cluster_id=shard.cluster_id,
            partition_label_key=shard.partition_label_key,
            partition_label_value=shard.partition_label_value,
        )
        .exclude(pk=shard.pk)
        .first()
    )
    if other is not None:
        value = shard.partition_label_value or "(unlabelled)"
        raise ValidationError(
            {"partition_label_value": f"shard {other.name} already covers {shard.partition_label_key}={value}; "
             "shards must not overlap"}
        )
    shard.full_clean(validate_unique=False, validate_constraints=False)


def _save(
    obj: models.Model, data: Mapping[str, Any], allowed: frozenset[str], check: Any, *, actor: Any, source: str
) -> models.Model:
    reject_unknown_fields(dict(data), allowed)
    with transaction.atomic():
        created = obj.pk is None
        if not created:
            obj = type(obj).objects.select_for_update().get(pk=obj.pk)
        before = None if created else audit.snapshot(obj)
        for key, value in data.items():
            setattr(obj, key, value)
        check(obj)
        obj.save()
        after = audit.snapshot(obj)
        if created or after != before:
            action = AuditAction.CREATE if created else AuditAction.UPDATE
            audit.record(obj, action, actor=actor, source=source, before=before, after=after)
        return obj


def save_cluster(
    cluster: Cluster | None, data: Mapping[str, Any], *, actor: Any = None, source: str = AuditSource.SYSTEM
) -> Change[Cluster]:
    """Create (cluster None) or change a cluster."""
    obj = _save(cluster or Cluster(), data, CLUSTER_FIELDS, _check_cluster, actor=actor, source=source)
    return Change(obj)  # type: ignore[arg-type]  # Change is generic over the saved model


def save_shard(
    shard: SchedulingShard | None, data: Mapping[str, Any], *, actor: Any = None, source: str = AuditSource.SYSTEM
) -> Change[SchedulingShard]:
    """Create (shard None) or change a scheduling shard; shards of a cluster never overlap."""
    obj = _save(shard or SchedulingShard(), data, SHARD_FIELDS, _check_shard, actor=actor, source=source)
    warnings = []
    if obj.gpu_placement == "spread" or obj.cpu_placement == "spread":  # type: ignore[attr-defined]  # obj is a SchedulingShard on this path
        warnings.append("a spread placement turns consolidation off for this shard (as in KAI)")
    if obj.update_pod_eviction_condition and obj.eviction_mode == EvictionMode.EVICT:  # type: ignore[attr-defined]  # obj is a SchedulingShard on this path
        warnings.append("update_pod_eviction_condition applies to the delete mode only: with evict, the API "
                        "server sets DisruptionTarget itself (reason EvictionByEvictionAPI, Kubernetes 1.26 and later)")
    return Change(obj, warnings)  # type: ignore[arg-type]  # Change is generic over the saved model


def delete_cluster(cluster: Cluster, *, actor: Any = None, source: str = AuditSource.SYSTEM) -> None:
    """Delete a cluster that no longer has workloads (its nodes and shards go with it)."""
    with transaction.atomic():
        count = cluster.workloads.count()
        if count:
            raise ValidationError({"cluster": f"cluster {cluster.name} still has {count} workload(s); delete them first"})
        before, pk = audit.snapshot(cluster), cluster.pk
        cluster.delete()
        audit.record(cluster, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)


def delete_shard(shard: SchedulingShard, *, actor: Any = None, source: str = AuditSource.SYSTEM) -> None:
    """Delete a scheduling shard (its cycle history is kept, without the shard)."""
    with transaction.atomic():
        before, pk = audit.snapshot(shard), shard.pk
        shard.delete()
        audit.record(shard, AuditAction.DELETE, actor=actor, source=source, before=before, object_id=pk)


def record_dra_devices(cluster_id: int, devices: Mapping[str, Sequence[Mapping[str, Any]]], *, cycle_id: int | None,
                       at: datetime) -> int:
    """Store each named node's DRA devices (`Node.dra_devices`, as `dra.Inventory.node_devices` gives them;
    an empty list for a node that has none any more), cut at `MAX_DRA_DEVICES` with the whole count kept.
    Only the rows whose devices changed are written, each on its own (the watcher writes other columns of
    the same rows: no transaction holds several row locks it could take in another order). Nodes not
    named are left as they are (another shard's cycle reads them). Returns how many rows were written."""
    wanted = {name: [dict(r) for r in rows] for name, rows in devices.items()}
    # Only the rows that hold devices now or will: a cluster's other nodes are not read each cycle.
    stored = (Node.objects.filter(cluster_id=cluster_id)
              .filter(models.Q(dra_devices_total__gt=0) | models.Q(name__in=[n for n, r in wanted.items() if r]))
              .values_list("pk", "name", "dra_devices", "dra_devices_total"))
    written = 0
    for pk, name, listed, total in stored:
        if name not in wanted:
            continue
        rows = wanted[name]
        kept = rows[:MAX_DRA_DEVICES]
        if kept == listed and len(rows) == total:
            continue
        Node.objects.filter(pk=pk).update(
            dra_devices=kept, dra_devices_total=len(rows), dra_claimed=sum(1 for r in rows if Node.dra_device_held(r)),
            dra_read_at=at, dra_read_cycle=cycle_id)
        written += 1
    return written
