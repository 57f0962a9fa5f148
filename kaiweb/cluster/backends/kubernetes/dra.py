"""Dynamic Resource Allocation (``resource.k8s.io/v1``) read and allocated as kube-scheduler's structured
parameters do: DeviceClasses, ResourceSlices and ResourceClaims in, the devices a claim gets on a node out.

A device is one entry of a ResourceSlice: its driver, pool and name, the node it is on (the slice's
``nodeName``, ``nodeSelector`` or ``allNodes``, or the device's own with ``perDeviceNodeSelection``), its
attributes and capacity. Only the slices of a pool's newest generation count. A claim's request names a
DeviceClass; a device may be given to it when the class's and the request's CEL selectors all hold
(evaluated by ``cel-python``, each expression compiled once), it is on the node, and no other claim holds
it (an ``adminAccess`` request neither needs a free device nor holds one). ``ExactCount`` takes ``count``
devices, ``All`` every matching device on the node (and fails when one is held); a ``matchAttribute``
constraint makes the devices of the requests it names agree on that attribute.

GPUs: the devices of the GPU drivers (``GPU_DRIVERS``, NVIDIA's ``gpu.nvidia.com``; a MIG slice it
publishes is one device too) are GPUs: each counts as one GPU of its node's capacity and one GPU of the
queue of the pod whose claim holds it, as KAI counts DRA-claimed GPUs as whole devices.

Bad input never raises: a claim or class that cannot be read, or a selector that does not compile or
fails on a device, is a ``problem`` (a sentence naming the object and the field) that keeps the pods of that
claim pending; each selector is evaluated at most once per device (``_Cel``'s memo, bounded).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import celpy
from celpy import celtypes
from kubernetes.utils import parse_quantity

from scheduler_core import model as m
from scheduler_core.predicates import term_matches

log = logging.getLogger(__name__)

API_VERSION = "resource.k8s.io/v1"
# What kube-scheduler puts on a claim it allocates (resource.k8s.io/v1 ``Finalizer``): the claim cannot be
# deleted while allocated, and the resource-claim controller deallocates it once no pod is reserved.
FINALIZER = "resource.kubernetes.io/delete-protection"
GPU_DRIVERS = ("gpu.nvidia.com",)
EXACT_COUNT = "ExactCount"
ALL = "All"
# Kubernetes' limits (resource.k8s.io/v1 validation): requests and constraints per claim, devices per
# allocation, and consumers a claim may be reserved for.
MAX_REQUESTS = 32
MAX_DEVICES_PER_ALLOCATION = 32
MAX_RESERVED_FOR = 256
NAME_FIELD = "metadata.name"
# How many combinations of matchAttribute values a claim's allocation tries on one node.
MAX_CHOICES = 256
# How many (expression, device) verdicts are remembered before the memo starts over.
MAX_MEMO = 100_000


DeviceKey = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str | None = None  # the one node it is on
    node_terms: tuple[m.NodeSelectorTerm, ...] | None = None  # the nodes it is reachable from
    all_nodes: bool = False
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # domain -> name -> value
    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # domain -> name -> amount
    # what a selector can see of it, as text: the memo of verdicts is keyed by it (`_Cel`)
    fingerprint: str = field(default="", compare=False)

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)

    @property
    def is_gpu(self) -> bool:
        return self.driver in GPU_DRIVERS

    def on(self, node: m.NodeSpec) -> bool:
        """The device can be used by a pod on ``node``."""
        if self.node is not None:
            return self.node == node.name
        if self.node_terms is not None:
            return any(term_matches(node, t) for t in self.node_terms)
        return self.all_nodes

    def attribute(self, qualified: str) -> Any:
        """A fully qualified attribute (``domain/name``; a bare name is the driver's), None when absent."""
        domain, _, name = qualified.rpartition("/")
        return self.attributes.get(domain or self.driver, {}).get(name)


@dataclass(frozen=True)
class Request:
    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False


@dataclass(frozen=True)
class Allocated:
    """One device of a claim's allocation."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request, "driver": self.driver, "pool": self.pool,
                               "device": self.device}
        if self.admin_access:
            out["adminAccess"] = True
        return out


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    requests: tuple[Request, ...] = ()
    constraints: tuple[tuple[tuple[str, ...], str], ...] = ()  # (requests, matchAttribute); () names all
    allocated: tuple[Allocated, ...] | None = None  # None: not allocated
    node: str | None = None  # the node an allocation pins its consumers to (None: any node)
    reserved_for: tuple[tuple[str, str], ...] = ()  # (pod name, pod uid)
    problem: str = ""  # why it cannot be allocated ("" none)
    status: Mapping[str, Any] = field(default_factory=dict, compare=False)  # as read, to write it back whole
    finalizers: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


# ------------------------------------------------------------------------------------------- reading


class _Bad(Exception):
    pass


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _attribute_value(raw: Any) -> Any:
    """A DeviceAttribute (exactly one of int, bool, string, version) as a plain value; None when malformed."""
    raw = _mapping(raw)
    for key in ("int", "bool", "string", "version"):
        if key in raw:
            value = raw[key]
            if key == "int" and isinstance(value, int) and not isinstance(value, bool):
                return value
            if key == "bool" and isinstance(value, bool):
                return value
            if key in ("string", "version") and isinstance(value, str):
                return value
    return None


def _quantity_int(value: Any) -> int | None:
    try:
        return int(Decimal(parse_quantity(value)).to_integral_value(rounding="ROUND_CEILING"))
    except (ValueError, TypeError, InvalidOperation):
        return None


def _node_terms(raw: Any) -> tuple[m.NodeSelectorTerm, ...]:
    def requirement(r: Any) -> m.NodeSelectorRequirement:
        r = _mapping(r)
        return m.NodeSelectorRequirement(_text(r.get("key")), _text(r.get("operator")),
                                         tuple(str(v) for v in _list(r.get("values"))))

    return tuple(m.NodeSelectorTerm(tuple(requirement(r) for r in _list(_mapping(t).get("matchExpressions"))),
                                    tuple(requirement(r) for r in _list(_mapping(t).get("matchFields"))))
                 for t in _list(_mapping(raw).get("nodeSelectorTerms")))


def _placement(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Where a slice (or a device of it, with ``perDeviceNodeSelection``) is: node, node terms or all nodes."""
    if _text(raw.get("nodeName")):
        return {"node": raw["nodeName"]}
    if isinstance(raw.get("nodeSelector"), Mapping):
        return {"node_terms": _node_terms(raw["nodeSelector"])}
    return {"all_nodes": bool(raw.get("allNodes"))}


def read_devices(slices: Iterable[Mapping[str, Any]]) -> tuple[Device, ...]:
    """The devices of the ResourceSlices, newest generation of each pool only, in (driver, pool, name) order."""
    newest: dict[tuple[str, str], int] = {}
    kept: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for raw in slices:
        spec = _mapping(_mapping(raw).get("spec"))
        pool = _mapping(spec.get("pool"))
        key = (_text(spec.get("driver")), _text(pool.get("name")))
        generation = pool.get("generation") if isinstance(pool.get("generation"), int) else 0
        if not all(key):
            continue
        if generation > newest.get(key, -1):
            newest[key] = generation
            kept = [(s, p) for s, p in kept if (_text(s.get("driver")), _text(p.get("name"))) != key]
        if generation == newest[key]:
            kept.append((spec, pool))
    devices: dict[DeviceKey, Device] = {}
    for spec, pool in kept:
        driver, pool_name = _text(spec.get("driver")), _text(pool.get("name"))
        per_device = bool(spec.get("perDeviceNodeSelection"))
        where = _placement(spec)
        for raw_device in _list(spec.get("devices")):
            d = _mapping(raw_device)
            name = _text(d.get("name"))
            if not name:
                continue
            attributes: dict[str, dict[str, Any]] = {}
            for qualified, value in _mapping(d.get("attributes")).items():
                domain, _, short = str(qualified).rpartition("/")
                plain = _attribute_value(value)
                if plain is not None:
                    attributes.setdefault(domain or driver, {})[short] = plain
            capacity: dict[str, dict[str, int]] = {}
            for qualified, value in _mapping(d.get("capacity")).items():
                domain, _, short = str(qualified).rpartition("/")
                amount = _quantity_int(_mapping(value).get("value"))
                if amount is not None:
                    capacity.setdefault(domain or driver, {})[short] = amount
            device = Device(driver, pool_name, name, attributes=attributes, capacity=capacity,
                            fingerprint=repr((driver, sorted((k, sorted(v.items())) for k, v in attributes.items()),
                                              sorted((k, sorted(v.items())) for k, v in capacity.items()))),
                            **(_placement(d) if per_device else where))
            devices.setdefault(device.key, device)
    return tuple(devices[k] for k in sorted(devices))


def read_classes(classes: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Each DeviceClass's CEL selectors by name."""
    out: dict[str, tuple[str, ...]] = {}
    for raw in classes:
        name = _text(_mapping(_mapping(raw).get("metadata")).get("name"))
        spec = _mapping(_mapping(raw).get("spec"))
        out[name] = tuple(_text(_mapping(_mapping(s).get("cel")).get("expression")) for s in _list(spec.get("selectors")))
    return out


def _request(raw: Any, i: int) -> Request:
    r = _mapping(raw)
    name = _text(r.get("name"))
    if not name:
        raise _Bad(f"spec.devices.requests[{i}].name is required")
    exactly = r.get("exactly")
    if not isinstance(exactly, Mapping):
        raise _Bad(f"spec.devices.requests[{i}] ({name}): only 'exactly' requests are allocated "
                   "(firstAvailable is not supported)")
    klass = _text(exactly.get("deviceClassName"))
    if not klass:
        raise _Bad(f"spec.devices.requests[{i}].exactly.deviceClassName is required")
    mode = _text(exactly.get("allocationMode")) or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise _Bad(f"spec.devices.requests[{i}].exactly.allocationMode must be ExactCount or All, not {mode!r}")
    count = exactly.get("count", 1) if mode == EXACT_COUNT else 0
    if mode == EXACT_COUNT and (not isinstance(count, int) or isinstance(count, bool)
                                or not 1 <= count <= MAX_DEVICES_PER_ALLOCATION):
        raise _Bad(f"spec.devices.requests[{i}].exactly.count must be a whole number from 1 to "
                   f"{MAX_DEVICES_PER_ALLOCATION}, not {count!r}")
    selectors = tuple(_text(_mapping(_mapping(s).get("cel")).get("expression")) for s in _list(exactly.get("selectors")))
    return Request(name, klass, selectors, mode, int(count), bool(exactly.get("adminAccess")))


def read_claim(raw: Mapping[str, Any]) -> Claim:
    """A ResourceClaim; one it cannot read is a `Claim` with its ``problem`` said, never an exception."""
    meta = _mapping(_mapping(raw).get("metadata"))
    namespace, name = _text(meta.get("namespace")), _text(meta.get("name"))
    base = Claim(namespace, name, _text(meta.get("uid")), _text(meta.get("resourceVersion")))
    try:
        devices = _mapping(_mapping(raw.get("spec")).get("devices"))
        raw_requests = _list(devices.get("requests"))
        if not raw_requests or len(raw_requests) > MAX_REQUESTS:
            raise _Bad(f"spec.devices.requests must list 1 to {MAX_REQUESTS} requests")
        requests = tuple(_request(r, i) for i, r in enumerate(raw_requests))
        names = {r.name for r in requests}
        constraints: list[tuple[tuple[str, ...], str]] = []
        for i, c in enumerate(_list(devices.get("constraints"))[:MAX_REQUESTS]):
            c = _mapping(c)
            attribute = _text(c.get("matchAttribute"))
            if not attribute:
                raise _Bad(f"spec.devices.constraints[{i}]: only matchAttribute constraints are allocated")
            among = tuple(str(r) for r in _list(c.get("requests")))
            if set(among) - names:
                raise _Bad(f"spec.devices.constraints[{i}].requests names no request of the claim: "
                           f"{sorted(set(among) - names)}")
            constraints.append((among, attribute))
        status = _mapping(raw.get("status"))
        allocation = status.get("allocation")
        allocated: tuple[Allocated, ...] | None = None
        node: str | None = None
        if isinstance(allocation, Mapping):
            allocated = tuple(
                Allocated(_text(r.get("request")), _text(r.get("driver")), _text(r.get("pool")),
                          _text(r.get("device")), bool(r.get("adminAccess")))
                for r in (_mapping(x) for x in _list(_mapping(allocation.get("devices")).get("results"))))
            node = allocated_node(allocation.get("nodeSelector"))
        reserved = tuple((_text(_mapping(c).get("name")), _text(_mapping(c).get("uid")))
                         for c in _list(status.get("reservedFor")) if _text(_mapping(c).get("resource")) == "pods")
        return Claim(namespace, name, base.uid, base.resource_version, requests, tuple(constraints), allocated,
                     node, reserved, status=dict(status),
                     finalizers=tuple(str(f) for f in _list(meta.get("finalizers"))))
    except _Bad as bad:
        return Claim(namespace, name, base.uid, base.resource_version,
                     problem=f"ResourceClaim {namespace}/{name}: {bad}")


def allocated_node(selector: Any) -> str | None:
    """The node of an allocation's nodeSelector when it names one node by ``metadata.name`` (None: any)."""
    for term in _list(_mapping(selector).get("nodeSelectorTerms")):
        for r in _list(_mapping(term).get("matchFields")):
            r = _mapping(r)
            values = _list(r.get("values"))
            if r.get("key") == NAME_FIELD and r.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


# ----------------------------------------------------------------------------------------------- CEL


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


def _quantity(text: Any) -> celtypes.IntType:
    amount = _quantity_int(str(text))
    if amount is None:
        raise ValueError(f"quantity({text!r}) is not a Kubernetes quantity")
    return celtypes.IntType(amount)


class _Cel:
    """Selectors compiled once and their verdict on each device remembered (bounded).

    The device is the variable ``device`` as Kubernetes' DRA CEL environment has it: ``driver``,
    ``attributes[domain].name``, ``capacity[domain].name`` (an integer; ``quantity("40Gi")`` and
    ``compareTo`` compare it). A verdict is True, False or the error's text."""

    FUNCTIONS = {"quantity": _quantity, "compareTo": _compare_to, "isGreaterThan": lambda a, b: a > b,
                 "isLessThan": lambda a, b: a < b}

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}
        self._verdicts: dict[tuple[str, str], bool | str] = {}

    def program(self, expression: str) -> Any:
        """The compiled program, or the compile error's text."""
        if expression not in self._programs:
            try:
                self._programs[expression] = self._env.program(self._env.compile(expression), functions=self.FUNCTIONS)
            except Exception as exc:  # noqa: BLE001 - any failure to compile is the expression's problem
                self._programs[expression] = f"does not compile: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        return self._programs[expression]

    def holds(self, expression: str, device: Device) -> bool | str:
        key = (expression, device.fingerprint or repr((device.driver, device.attributes, device.capacity)))
        if key in self._verdicts:
            return self._verdicts[key]
        program = self.program(expression)
        verdict: bool | str
        if isinstance(program, str):
            verdict = program
        else:
            try:
                result = program.evaluate({"device": celpy.json_to_cel(
                    {"driver": device.driver, "attributes": device.attributes, "capacity": device.capacity})})
                verdict = (bool(result) if isinstance(result, celtypes.BoolType | bool)
                           else f"evaluates to {result!r}, not a bool")
            except Exception as exc:  # noqa: BLE001 - a runtime error is the selector's problem
                verdict = f"fails on a device: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        if len(self._verdicts) >= MAX_MEMO:
            self._verdicts.clear()
        self._verdicts[key] = verdict
        return verdict


_CEL = _Cel()


# ------------------------------------------------------------------------------------------ allocating


@dataclass
class Inventory:
    """A cycle's view of DRA: the classes' selectors, the devices, the claims and which devices they hold."""

    classes: dict[str, tuple[str, ...]]
    devices: tuple[Device, ...]
    claims: dict[tuple[str, str], Claim]
    _local: dict[str, list[Device]] | None = None  # node-local devices by node
    _shared: list[Device] | None = None  # the others (a node selector, all nodes)

    def on_node(self, node: m.NodeSpec) -> list[Device]:
        """The devices a pod on ``node`` can be given, in (driver, pool, name) order."""
        if self._local is None or self._shared is None:
            self._local, self._shared = {}, []
            for d in self.devices:
                if d.node is not None:
                    self._local.setdefault(d.node, []).append(d)
                else:
                    self._shared.append(d)
        shared = [d for d in self._shared if d.on(node)]
        local = self._local.get(node.name, [])
        return sorted([*local, *shared], key=lambda d: d.key) if shared else list(local)

    @classmethod
    def read(cls, classes: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
             claims: Iterable[Mapping[str, Any]]) -> Inventory:
        read = (read_claim(c) for c in claims if isinstance(c, Mapping))
        return cls(read_classes(c for c in classes if isinstance(c, Mapping)),
                   read_devices(s for s in slices if isinstance(s, Mapping)), {c.key: c for c in read})

    def held(self) -> set[DeviceKey]:
        """The devices an allocation holds (an admin-access one holds none)."""
        return {a.key for c in self.claims.values() for a in (c.allocated or ()) if not a.admin_access}

    def holders(self) -> dict[DeviceKey, tuple[Claim, bool]]:
        """Per device a claim has, that claim and whether it has it for admin access only: a claim that
        holds the device wins over one with admin access (which holds none); among equals, the first in
        (namespace, name) order."""
        out: dict[DeviceKey, tuple[Claim, bool]] = {}
        for key in sorted(self.claims):
            claim = self.claims[key]
            for a in claim.allocated or ():
                if a.key not in out or (out[a.key][1] and not a.admin_access):
                    out[a.key] = (claim, a.admin_access)
        return out

    def node_devices(self, node: m.NodeSpec,
                     holders: Mapping[DeviceKey, tuple[Claim, bool]] | None = None) -> list[dict[str, Any]]:
        """The devices a pod on ``node`` can be given, each with who has it, as plain values for the node's
        page: driver, pool, device, gpu, claim ("namespace/name", "" none), pods (the claim's reservedFor,
        "namespace/name": a claim is only used by pods of its namespace) and admin_access. ``holders``
        (`holders`) saves working it out again for each node."""
        held = self.holders() if holders is None else holders
        rows: list[dict[str, Any]] = []
        for d in self.on_node(node):
            claim, admin = held.get(d.key, (None, False))
            rows.append({"driver": d.driver, "pool": d.pool, "device": d.name, "gpu": d.is_gpu,
                         "claim": f"{claim.namespace}/{claim.name}" if claim is not None else "",
                         "pods": [f"{claim.namespace}/{name}" for name, _ in claim.reserved_for]
                         if claim is not None else [],
                         "admin_access": admin})
        return rows

    def gpus_on(self, node: m.NodeSpec) -> int:
        """The GPU devices a pod on ``node`` can be given (node-local ones and those reachable from it)."""
        return sum(1 for d in self.on_node(node) if d.is_gpu)

    def matching(self, request: Request, device: Device) -> bool | str:
        """The class's and the request's selectors all hold on the device (or the first problem's text)."""
        if request.device_class not in self.classes:
            return f'deviceclass "{request.device_class}" not found'
        for expression in (*self.classes[request.device_class], *request.selectors):
            verdict = _CEL.holds(expression, device)
            if verdict is not True:
                return verdict
        return True

    def allocate(self, claim: Claim, node: m.NodeSpec, held: set[DeviceKey]) -> tuple[Allocated, ...] | str:
        """The devices ``claim`` gets on ``node`` with ``held`` taken, as kube-scheduler's allocator chooses
        them (the first in (driver, pool, name) order that satisfy every request and constraint), or why
        none can be had."""
        if claim.problem:
            return claim.problem
        on_node = self.on_node(node)
        candidates: dict[str, list[Device]] = {}
        for request in claim.requests:
            found: list[Device] = []
            for device in on_node:
                verdict = self.matching(request, device)
                if isinstance(verdict, str):
                    if "not found" in verdict or "does not compile" in verdict:
                        return f"ResourceClaim {claim.namespace}/{claim.name} request {request.name}: {verdict}"
                    log.debug("ResourceClaim %s/%s request %s: selector %s", claim.namespace, claim.name,
                              request.name, verdict)
                    continue
                if verdict:
                    found.append(device)
            candidates[request.name] = found
        return _choose(claim, candidates, held) or (
            f"ResourceClaim {claim.namespace}/{claim.name}: not enough free matching devices on node {node.name}")

    def fits(self, claim: Claim, node: m.NodeSpec, held: set[DeviceKey]) -> bool:
        return not isinstance(self.allocate(claim, node, held), str)


def _choose(claim: Claim, candidates: Mapping[str, Sequence[Device]],
            held: set[DeviceKey]) -> tuple[Allocated, ...] | None:
    """Devices for every request, agreeing on each matchAttribute constraint: each constraint's values
    tried in order, the first complete choice wins; at most `MAX_CHOICES` choices are tried per claim and
    node (bounded work, whatever the constraints), then the claim does not fit there."""
    single = {r.name for r in claim.requests if r.mode == EXACT_COUNT and r.count == 1}
    constraints = [(among, attr) for among, attr in
                   ((tuple(r) or tuple(req.name for req in claim.requests), attr) for r, attr in claim.constraints)
                   if not (len(among) == 1 and among[0] in single)]  # one device agrees with itself
    tried = [0]

    def attempt(index: int, allowed: dict[str, list[Device]]) -> tuple[Allocated, ...] | None:
        if tried[0] >= MAX_CHOICES:
            return None
        if index == len(constraints):
            tried[0] += 1
            return _pick(claim, allowed, held)
        among, attribute = constraints[index]
        values = sorted({repr(d.attribute(attribute)) for r in among for d in allowed.get(r, ())
                         if d.attribute(attribute) is not None})
        for value in values:
            narrowed = {r: [d for d in ds if r not in among or repr(d.attribute(attribute)) == value]
                        for r, ds in allowed.items()}
            chosen = attempt(index + 1, narrowed)
            if chosen is not None:
                return chosen
        return None

    return attempt(0, {r: list(ds) for r, ds in candidates.items()})


def _pick(claim: Claim, allowed: Mapping[str, Sequence[Device]], held: set[DeviceKey]) -> tuple[Allocated, ...] | None:
    taken: set[DeviceKey] = set()
    out: list[Allocated] = []
    for request in claim.requests:
        devices = allowed.get(request.name, ())
        if request.admin_access:
            pool = list(devices)
        else:
            pool = [d for d in devices if d.key not in held and d.key not in taken]
        if request.mode == ALL:
            if not devices or len(pool) != len(devices):
                return None
            want = len(pool)
        else:
            want = request.count
        if len(pool) < want:
            return None
        for d in pool[:want]:
            if not request.admin_access:
                taken.add(d.key)
            out.append(Allocated(request.name, d.driver, d.pool, d.name, request.admin_access))
    return tuple(out)


def allocation_status(devices: Sequence[Allocated], node: str | None) -> dict[str, Any]:
    """A claim's ``status.allocation`` as kube-scheduler writes it: the devices and, for node-local ones,
    the node selector pinning its consumers to the node."""
    out: dict[str, Any] = {"devices": {"results": [a.as_json() for a in devices]}}
    if node is not None:
        out["nodeSelector"] = {"nodeSelectorTerms": [
            {"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": [node]}]}]}
    return out


def gpu_devices(inventory: Inventory, devices: Iterable[Allocated]) -> set[DeviceKey]:
    """The GPU devices among an allocation's (admin access counts none)."""
    known = {d.key: d for d in inventory.devices}
    return {a.key for a in devices if not a.admin_access and (a.driver in GPU_DRIVERS or (
        a.key in known and known[a.key].is_gpu))}
