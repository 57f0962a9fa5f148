"""What must hold after every scheduling cycle, checked where tests and benchmarks can call it.

- the cycle ended ``succeeded`` (a cycle never fails because the watcher changed rows under it);
- no pod was bound twice: no pod (by uid) has applied binds to two different nodes;
- on a Kubernetes cluster, what the API server itself holds (`kaiweb.cluster.invariants`): no node
  over its allocatable, no shared GPU given more than one device, no gang below its minimum once
  bound.

`after_cycle` returns the violations as sentences; nothing here changes anything.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.gateway import get_gateway
from kaiweb.cluster.invariants import check_cluster
from kaiweb.scheduling.choices import CycleStatus, DecisionKind, DecisionStatus
from kaiweb.scheduling.models import Decision, SchedulingCycle


def double_binds(uids: list[str] | None = None) -> list[str]:
    """Pods (by uid) with applied binds to more than one node; only ``uids`` when given."""
    applied = Decision.objects.filter(kind=DecisionKind.BIND, status=DecisionStatus.APPLIED).exclude(pod_uid="")
    if uids is not None:
        applied = applied.filter(pod_uid__in=uids)
    twice = (applied.values("pod_uid").annotate(nodes=Count("node_name", distinct=True)).filter(nodes__gt=1)
             .values_list("pod_uid", flat=True))
    out = []
    for uid in sorted(twice):
        where = sorted(set(applied.filter(pod_uid=uid).values_list("namespace", "pod_name", "node_name")))
        out.append(f"bound-twice: pod {where[0][0]}/{where[0][1]} (uid {uid}) was bound to "
                   f"{', '.join(n for _, _, n in where)}")
    return out


def after_cycle(cycle: SchedulingCycle, *, gateway: Any = None) -> list[str]:
    """Every violation after ``cycle`` (see the module docstring)."""
    out: list[str] = []
    if cycle.status != CycleStatus.SUCCEEDED:
        out.append(f"cycle: cycle {cycle.pk} ended {cycle.status}: {(cycle.error or '').splitlines()[:1]}")
    uids = list(Decision.objects.filter(cycle=cycle, kind=DecisionKind.BIND, status=DecisionStatus.APPLIED)
                .exclude(pod_uid="").values_list("pod_uid", flat=True))
    out.extend(double_binds(uids))
    if gateway is None and cycle.shard is not None:
        gateway = get_gateway(cycle.shard.cluster)
    if isinstance(gateway, KubernetesGateway):
        out.extend(str(v) for v in check_cluster(gateway.core.api_client))
    return out
