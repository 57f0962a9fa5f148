"""What must hold on a cluster we schedule, read from the API server itself (not from our mirror).

The mirror is what a scheduler can get wrong, so these checks look at the cluster's own objects:

- **capacity**: no node holds bound, non-terminal pods whose requests exceed its allocatable, for
  every resource it lists (GPUs, CPU, memory, MIG slices and other extended resources) and for its
  pod count;
- **shared devices**: no shared GPU (a ``runai-gpu-group`` on a node) is given more than 1.0 of its
  device by the fractional pods bound to it (a pod on several devices counts its portion on each),
  and no pod is given a device twice or fewer or more devices than it asks for;
- **DRA devices**: no device of a ResourceSlice is in the allocation of two ResourceClaims (but for
  ``adminAccess``, which holds none), and every bound, non-terminal pod's claims are allocated, on its
  node when the allocation names one, and reserved for it (the claims are written before the bind);
- **gangs**: no PodGroup has fewer bound pods than its ``minMember`` while some of them are bound,
  once the binds have settled (a gang is bound pod by pod, so a sample may fall between two of its
  binds; ``settle_seconds`` after its latest bind it must be whole). A member that has Succeeded
  still counts: it was bound with its gang and finished on its own (as KAI counts it), so a gang whose
  pods end one by one is not broken.

`violations` is pure, over the objects as the API returns them; `check_cluster` lists them first.
Every violation is one sentence naming the object, the resource and the figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.cluster.backends.kubernetes.gpu_sharing import groups_of, is_group_label
from kaiweb.cluster.backends.kubernetes.parsing import (
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
    pod_requests,
    resource_claim_names,
)
from kaiweb.cluster.backends.types import (
    GPU_FRACTION_ANNOTATION,
    GPU_FRACTION_NUM_DEVICES_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    OBSERVER_HEADER,
    POD_GROUP_ANNOTATION,
)

__all__ = ["SETTLE_SECONDS", "Violation", "check_cluster", "violations"]

SETTLE_SECONDS = 15.0
_TERMINAL = ("Succeeded", "Failed")
_EPSILON = Decimal("0.000001")


@dataclass(frozen=True)
class Violation:
    rule: str  # capacity | shared-device | dra-device | gang
    subject: str  # Node gpu-3, PodGroup ns/name, …
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _holds_resources(pod: Mapping[str, Any]) -> bool:
    """Bound and not finished: what a kubelet counts against its node."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in _TERMINAL


def _quantity(value: Any) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, InvalidOperation):
        return None


def _figure(name: str, value: Decimal) -> str:
    return f"{value.normalize():f}" if name != "memory" else f"{value / (1 << 30):.2f}Gi"


def _capacity(nodes: Mapping[str, Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[Violation]:
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        try:
            requests = pod_requests(pod.get("spec") or {})
        except Exception:  # noqa: BLE001 - an unreadable pod cannot be counted; the mirror reports it
            continue
        into = used.setdefault(node, {})
        for name, amount in requests.items():
            into[name] = into.get(name, Decimal(0)) + amount
        into["pods"] = into.get("pods", Decimal(0)) + 1
    out = []
    for name in sorted(used):
        node = nodes.get(name)
        if node is None:
            continue  # a node deleted under its pods: the node lifecycle controller evicts them
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, amount in sorted(used[name].items()):
            if amount == 0:
                continue
            have = _quantity(allocatable.get(resource, "0"))
            if have is None:
                continue
            if amount > have + _EPSILON:
                out.append(Violation("capacity", f"Node {name}",
                                     f"node {name} holds bound pods requesting {_figure(resource, amount)} "
                                     f"{resource}, over its allocatable {_figure(resource, have)}"))
    return out


def _portion(pod: Mapping[str, Any]) -> Decimal | None:
    annotations = _meta(pod).get("annotations") or {}
    text = annotations.get(GPU_PORTION_ANNOTATION) or annotations.get(GPU_FRACTION_ANNOTATION)
    if text is None:
        return None
    try:
        return Decimal(str(text))
    except InvalidOperation:
        return None


def _shared_devices(pods: Iterable[Mapping[str, Any]]) -> list[Violation]:
    given: dict[tuple[str, str], Decimal] = {}
    out = []
    for pod in pods:
        meta = _meta(pod)
        labels = meta.get("labels") or {}
        groups = groups_of(labels)
        portion = _portion(pod)
        if not groups or portion is None:
            continue
        node = (pod.get("spec") or {}).get("nodeName") or ""
        who = f"Pod {meta.get('namespace', '')}/{meta.get('name', '')}"
        keys = [k for k in labels if is_group_label(k)]
        if len(keys) != len(groups):
            out.append(Violation("shared-device", who, f"pod {meta.get('name', '')} names one shared GPU twice "
                                 f"in its labels {', '.join(sorted(keys))}"))
        wanted = str((meta.get("annotations") or {}).get(GPU_FRACTION_NUM_DEVICES_ANNOTATION) or "1")
        if wanted != str(len(groups)):
            out.append(Violation("shared-device", who, f"pod {meta.get('name', '')} asks for {wanted} shared "
                                 f"GPUs and holds {len(groups)} ({', '.join(groups)})"))
        for group in groups:
            given[(node, group)] = given.get((node, group), Decimal(0)) + portion
    return out + [Violation("shared-device", f"Node {node}",
                            f"shared GPU {group} on node {node} is given {total.normalize():f} of one device")
                  for (node, group), total in sorted(given.items()) if total > 1 + _EPSILON]


def _dra_devices(claims: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[Violation]:
    parsed = [dra.read_claim(c) for c in claims]
    holders: dict[dra.DeviceKey, list[str]] = {}
    for claim in parsed:
        for device in claim.allocated or ():
            if not device.admin_access:
                holders.setdefault(device.key, []).append(f"{claim.namespace}/{claim.name}")
    out = [Violation("dra-device", f"Device {driver}/{pool}/{device}",
                     f"DRA device {device} of pool {pool} ({driver}) is allocated to {len(held)} ResourceClaims: "
                     f"{', '.join(sorted(held))}")
           for (driver, pool, device), held in sorted(holders.items()) if len(held) > 1]
    by_key = {(c.namespace, c.name): c for c in parsed}
    for pod in pods:
        meta = _meta(pod)
        if meta.get("deletionTimestamp"):
            continue  # the resource-claim controller lets go of a leaving pod's claims on its own time
        namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        node = (pod.get("spec") or {}).get("nodeName") or ""
        for claim_name in resource_claim_names(pod):
            claim = by_key.get((namespace, claim_name))
            if claim is None or claim.problem:
                continue
            where = f"pod {namespace}/{name} is bound to node {node} but its ResourceClaim {claim_name}"
            if claim.allocated is None:
                out.append(Violation("dra-device", f"Pod {namespace}/{name}", f"{where} is not allocated"))
            elif claim.node is not None and claim.node != node:
                out.append(Violation("dra-device", f"Pod {namespace}/{name}", f"{where} is allocated on node {claim.node}"))
            elif uid and uid not in {u for _, u in claim.reserved_for}:
                out.append(Violation("dra-device", f"Pod {namespace}/{name}", f"{where} is not reserved for it"))
    return out


def _bound_at(pod: Mapping[str, Any]) -> datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return _time(cond.get("lastTransitionTime"))
    return _time(_meta(pod).get("creationTimestamp"))


def _gangs(groups: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], now: datetime,
           settle_seconds: float) -> list[Violation]:
    members: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        meta = _meta(pod)
        name = (meta.get("annotations") or {}).get(POD_GROUP_ANNOTATION)
        if name and not meta.get("deletionTimestamp"):
            members.setdefault((meta.get("namespace", ""), name), []).append(pod)
    out = []
    for group in groups:
        meta = _meta(group)
        key = (meta.get("namespace", ""), meta.get("name", ""))
        minimum = (group.get("spec") or {}).get("minMember")
        bound = [p for p in members.get(key, []) if _holds_resources(p)]
        finished = sum(1 for p in members.get(key, []) if (p.get("status") or {}).get("phase") == "Succeeded")
        if not isinstance(minimum, int) or not bound or len(bound) + finished >= minimum:
            continue
        latest = max((t for t in map(_bound_at, bound) if t is not None), default=None)
        if latest is not None and (now - latest).total_seconds() < settle_seconds:
            continue  # still being bound (or evicted) pod by pod
        out.append(Violation("gang", f"PodGroup {key[0]}/{key[1]}",
                             f"PodGroup {key[0]}/{key[1]} has {len(bound)} bound pods, below its minMember "
                             f"{minimum}, {settle_seconds:g}s after its latest bind"))
    return out


def violations(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
               pod_groups: Iterable[Mapping[str, Any]] = (), *, claims: Iterable[Mapping[str, Any]] = (),
               now: datetime | None = None, settle_seconds: float = SETTLE_SECONDS) -> list[Violation]:
    """Every invariant broken by these objects (see the module docstring), in a stable order."""
    by_name = {_meta(n).get("name", ""): n for n in nodes}
    holding = [p for p in pods if _holds_resources(p)]
    return [*_capacity(by_name, holding), *_shared_devices(holding), *_dra_devices(claims, holding),
            *_gangs(pod_groups, pods, now or datetime.now(tz=UTC), settle_seconds)]


def _items(api: client.ApiClient, response: Any) -> list[dict[str, Any]]:
    data = response if isinstance(response, dict) else api.sanitize_for_serialization(response)
    return list((data or {}).get("items") or [])


def check_cluster(api: client.ApiClient, *, settle_seconds: float = SETTLE_SECONDS) -> list[Violation]:
    """List nodes, pods, PodGroups and ResourceClaims from the API server and check them (four list calls,
    on a client of their own that says it is an observer)."""
    with client.ApiClient(api.configuration, header_name=OBSERVER_HEADER, header_value="invariants") as own:
        core, custom = client.CoreV1Api(own), client.CustomObjectsApi(own)
        nodes = _items(own, core.list_node(_preload_content=False).json())
        pods = _items(own, core.list_pod_for_all_namespaces(_preload_content=False).json())
        try:
            groups = _items(own, custom.list_cluster_custom_object(PODGROUP_GROUP, PODGROUP_VERSION,
                                                                   PODGROUP_PLURAL))
        except client.ApiException as exc:
            if exc.status != 404:  # no PodGroup CRD installed: no gangs to check
                raise
            groups = []
        try:
            claims = _items(own, client.ResourceV1Api(own).list_resource_claim_for_all_namespaces(
                _preload_content=False).json())
        except client.ApiException as exc:
            if exc.status != 404:  # the API server serves no DRA: no claims to check
                raise
            claims = []
    return violations(nodes, pods, groups, claims=claims, settle_seconds=settle_seconds)
