"""Reading where a pod may run: tolerations, affinity (node, pod, anti) and host ports.

Every reader checks the shape and the values Kubernetes' API validation would, and raises
`ConstraintError` naming the field (``spec.affinity.nodeAffinity...[0].operator``) and the rule;
the gateway turns it into an `Unreadable`. The affinity comes back in Kubernetes' own spelling,
reduced to the fields the scheduler reads, so it can be stored and shown as the pod wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiweb.cluster.backends.types import Toleration

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PROTOCOLS = ("TCP", "UDP", "SCTP")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


class ConstraintError(Exception):
    """A placement field that breaks a rule."""

    def __init__(self, field: str, rule: str, value: Any = None) -> None:
        super().__init__(f"{field}: {rule}")
        self.field, self.rule, self.value = field, rule, value


def _map(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConstraintError(field, "must be an object", value)
    return value


def _list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConstraintError(field, "must be a list", value)
    return value


def _str(value: Any, field: str, required: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ConstraintError(field, "must be a string", value)
    if required and not value:
        raise ConstraintError(field, "is required")
    return value


def _weight(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise ConstraintError(field, "must be a whole number from 1 to 100", value)
    return value


# -- tolerations -----------------------------------------------------------------------------------


def parse_tolerations(value: Any, field: str = "spec.tolerations") -> tuple[Toleration, ...]:
    """``spec.tolerations``: operator Equal (default) or Exists; Exists takes no value; an empty
    key needs Exists; effect empty or a taint effect."""
    out = []
    for i, raw in enumerate(_list(value, field)):
        where = f"{field}[{i}]"
        tol = _map(raw, where)
        key = _str(tol.get("key"), f"{where}.key")
        operator = _str(tol.get("operator"), f"{where}.operator") or "Equal"
        val = _str(tol.get("value"), f"{where}.value")
        effect = _str(tol.get("effect"), f"{where}.effect")
        if operator not in ("Equal", "Exists"):
            raise ConstraintError(f"{where}.operator", "must be Equal or Exists", operator)
        if operator == "Exists" and val:
            raise ConstraintError(f"{where}.value", "must be empty when the operator is Exists", val)
        if not key and operator != "Exists":
            raise ConstraintError(f"{where}.operator", "must be Exists when the key is empty", operator)
        if effect and effect not in TAINT_EFFECTS:
            raise ConstraintError(f"{where}.effect", f"must be empty or one of {', '.join(TAINT_EFFECTS)}", effect)
        out.append(Toleration(key=key, operator=operator, value=val, effect=effect))
    return tuple(out)


def check_taint_effect(effect: Any, field: str) -> str:
    """A node taint's effect, which must be one of the three Kubernetes knows."""
    if effect not in TAINT_EFFECTS:
        raise ConstraintError(field, f"must be one of {', '.join(TAINT_EFFECTS)}", effect)
    return str(effect)


# -- node affinity ---------------------------------------------------------------------------------


def _requirement(raw: Any, field: str, operators: tuple[str, ...], fields_only: bool = False) -> dict[str, Any]:
    req = _map(raw, field)
    key = _str(req.get("key"), f"{field}.key", required=True)
    if fields_only and key != "metadata.name":
        raise ConstraintError(f"{field}.key", "must be metadata.name (the only field nodes can be selected by)", key)
    op = _str(req.get("operator"), f"{field}.operator", required=True)
    if op not in operators:
        raise ConstraintError(f"{field}.operator", f"must be one of {', '.join(operators)}", op)
    values = [_str(v, f"{field}.values[{k}]") for k, v in enumerate(_list(req.get("values"), f"{field}.values"))]
    if op in ("In", "NotIn") and not values:
        raise ConstraintError(f"{field}.values", f"must not be empty with operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ConstraintError(f"{field}.values", f"must be empty with operator {op}", values)
    if op in ("Gt", "Lt"):
        if len(values) != 1 or not values[0].lstrip("-").isdigit():
            raise ConstraintError(f"{field}.values", f"must be one whole number with operator {op}", values)
    return {"key": key, "operator": op, "values": values}


def _node_term(raw: Any, field: str) -> dict[str, Any]:
    term = _map(raw, field)
    exprs = [_requirement(r, f"{field}.matchExpressions[{k}]", OPERATORS)
             for k, r in enumerate(_list(term.get("matchExpressions"), f"{field}.matchExpressions"))]
    fields = [_requirement(r, f"{field}.matchFields[{k}]", ("In", "NotIn"), fields_only=True)
              for k, r in enumerate(_list(term.get("matchFields"), f"{field}.matchFields"))]
    return {"matchExpressions": exprs, "matchFields": fields}


def _node_affinity(raw: Any, field: str) -> dict[str, Any]:
    na = _map(raw, field)
    out: dict[str, Any] = {}
    if na.get(REQUIRED) is not None:
        where = f"{field}.{REQUIRED}"
        selector = _map(na[REQUIRED], where)
        terms = _list(selector.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
        if not terms:
            raise ConstraintError(f"{where}.nodeSelectorTerms", "must hold at least one term")
        out[REQUIRED] = {"nodeSelectorTerms": [_node_term(t, f"{where}.nodeSelectorTerms[{k}]")
                                               for k, t in enumerate(terms)]}
    preferred = []
    for k, raw_pref in enumerate(_list(na.get(PREFERRED), f"{field}.{PREFERRED}")):
        where = f"{field}.{PREFERRED}[{k}]"
        pref = _map(raw_pref, where)
        preferred.append({"weight": _weight(pref.get("weight"), f"{where}.weight"),
                          "preference": _node_term(pref.get("preference"), f"{where}.preference")})
    if preferred:
        out[PREFERRED] = preferred
    return out


# -- pod affinity ----------------------------------------------------------------------------------


def _pod_term(raw: Any, field: str) -> dict[str, Any]:
    term = _map(raw, field)
    topology_key = _str(term.get("topologyKey"), f"{field}.topologyKey", required=True)
    selector: dict[str, Any] | None = None
    if term.get("labelSelector") is not None:
        sel = _map(term["labelSelector"], f"{field}.labelSelector")
        labels = _map(sel.get("matchLabels"), f"{field}.labelSelector.matchLabels")
        selector = {
            "matchLabels": {str(k): _str(v, f"{field}.labelSelector.matchLabels[{k}]") for k, v in labels.items()},
            "matchExpressions": [
                _requirement(r, f"{field}.labelSelector.matchExpressions[{k}]", LABEL_OPERATORS)
                for k, r in enumerate(_list(sel.get("matchExpressions"), f"{field}.labelSelector.matchExpressions"))
            ],
        }
    namespaces = [_str(v, f"{field}.namespaces[{k}]", required=True)
                  for k, v in enumerate(_list(term.get("namespaces"), f"{field}.namespaces"))]
    ns_selector = term.get("namespaceSelector")
    if ns_selector is not None:
        if _map(ns_selector, f"{field}.namespaceSelector"):
            raise ConstraintError(f"{field}.namespaceSelector",
                                  "is only supported empty (every namespace); list the namespaces instead", ns_selector)
        namespaces = ["*"]
    return {"topologyKey": topology_key, "labelSelector": selector, "namespaces": namespaces}


def _pod_affinity(raw: Any, field: str) -> dict[str, Any]:
    pa = _map(raw, field)
    out: dict[str, Any] = {}
    required = [_pod_term(t, f"{field}.{REQUIRED}[{k}]")
                for k, t in enumerate(_list(pa.get(REQUIRED), f"{field}.{REQUIRED}"))]
    if required:
        out[REQUIRED] = required
    preferred = []
    for k, raw_pref in enumerate(_list(pa.get(PREFERRED), f"{field}.{PREFERRED}")):
        where = f"{field}.{PREFERRED}[{k}]"
        pref = _map(raw_pref, where)
        preferred.append({"weight": _weight(pref.get("weight"), f"{where}.weight"),
                          "podAffinityTerm": _pod_term(pref.get("podAffinityTerm"), f"{where}.podAffinityTerm")})
    if preferred:
        out[PREFERRED] = preferred
    return out


def parse_affinity(value: Any, field: str = "spec.affinity") -> dict[str, Any]:
    """``spec.affinity`` checked and reduced to node, pod and anti affinity ({} for none)."""
    aff = _map(value, field)
    out: dict[str, Any] = {}
    for name, reader in (("nodeAffinity", _node_affinity), ("podAffinity", _pod_affinity),
                         ("podAntiAffinity", _pod_affinity)):
        part = reader(aff.get(name), f"{field}.{name}")
        if part:
            out[name] = part
    return out


# -- host ports ------------------------------------------------------------------------------------


def parse_host_ports(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The host ports of the pod's containers as ``protocol/port[/hostIP]``, sorted."""
    out = set()
    for i, container in enumerate(_list(spec.get("containers"), "spec.containers")):
        c = _map(container, f"spec.containers[{i}]")
        for k, raw in enumerate(_list(c.get("ports"), f"spec.containers[{i}].ports")):
            where = f"spec.containers[{i}].ports[{k}]"
            port = _map(raw, where)
            host_port = port.get("hostPort")
            if host_port in (None, 0):
                continue
            if isinstance(host_port, bool) or not isinstance(host_port, int) or not 1 <= host_port <= 65535:
                raise ConstraintError(f"{where}.hostPort", "must be a port number from 1 to 65535", host_port)
            protocol = _str(port.get("protocol"), f"{where}.protocol") or "TCP"
            if protocol not in PROTOCOLS:
                raise ConstraintError(f"{where}.protocol", f"must be one of {', '.join(PROTOCOLS)}", protocol)
            host_ip = _str(port.get("hostIP"), f"{where}.hostIP")
            out.add(f"{protocol}/{host_port}/{host_ip}" if host_ip else f"{protocol}/{host_port}")
    return tuple(sorted(out))
