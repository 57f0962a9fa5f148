"""Dynamic Resource Allocation scenarios (`tests/dra_scenarios/`), played by the e2e runner (`devkube.e2e`).

They are kai-e2e scenarios (the corpus's JSON format: ``steps`` of ``apply``, ``cycles``, ``expect``) whose
objects include ``resource.k8s.io/v1`` DeviceClasses, ResourceSlices (one per node, as a DRA driver
publishes them), ResourceClaims and ResourceClaimTemplates, and pods with ``spec.resourceClaims``. The
runner starts the resource-claim controller for them and observes every claim (``resourceclaims``).

`failures` checks the expectations (the vocabulary is in the builder's docstring,
``tests/dra_scenarios/build.py``): the corpus's ``pods``, ``selectors`` and ``queues`` keys, and the DRA
keys ``claims`` and ``devices``. It never runs the product.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devkube import e2e

SCENARIOS = Path(__file__).resolve().parents[1] / "tests" / "dra_scenarios"


def _quantity(value: Any) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(str(value)))


def _pod_scheduled_false(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((c for c in pod.get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)


def _check_pods(expect: Mapping[str, Any], live: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    for key, want in (expect.get("pods") or {}).items():
        pod = live.get(key)
        if want.get("evicted") is True:
            if pod is not None:
                out.append(f"pod {key}: still there, expected evicted")
            continue
        if pod is None:
            out.append(f"pod {key}: absent")
            continue
        node = pod["nodeName"]
        if "scheduled" in want and bool(node) != want["scheduled"]:
            out.append(f"pod {key}: scheduled is {bool(node)} (node {node}), expected {want['scheduled']}")
        if "node" in want and node != want["node"]:
            out.append(f"pod {key}: on node {node}, expected {want['node']}")
        if "node_in" in want and node not in want["node_in"]:
            out.append(f"pod {key}: on node {node}, expected one of {want['node_in']}")
        waiting = _pod_scheduled_false(pod)
        if want.get("unschedulable") and (waiting is None or waiting.get("reason") != "Unschedulable"):
            out.append(f"pod {key}: no PodScheduled=False condition with reason Unschedulable")
        if "why_regex" in want:
            why = (waiting or {}).get("message") or ""
            if not re.search(want["why_regex"], why):
                out.append(f"pod {key}: why it waits is {why!r}, expected to match {want['why_regex']!r}")
    return out


def _check_selectors(expect: Mapping[str, Any], live: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    for want in expect.get("selectors") or ():
        chosen = [p for p in live.values() if p["namespace"] == want.get("namespace", p["namespace"])
                  and all((p.get("labels") or {}).get(k) == v for k, v in (want.get("labels") or {}).items())]
        nodes = [p["nodeName"] for p in chosen if p["nodeName"]]
        for key, have in (("scheduled_count", len(nodes)), ("pending_count", len(chosen) - len(nodes)),
                          ("distinct_nodes", len(set(nodes)))):
            if key in want and have != want[key]:
                out.append(f"selector {want}: {key} is {have}, expected {want[key]}")
        if want.get("same_node") and len(set(nodes)) != 1:
            out.append(f"selector {want}: scheduled on {sorted(set(nodes))}, expected one node")
    return out


def _check_queues(expect: Mapping[str, Any], obs: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    queues = {(q.get("metadata") or {}).get("name"): q for q in obs.get("queues") or []}
    for want in expect.get("queues") or ():
        status = (queues.get(want["name"]) or {}).get("status") or {}
        for key, field in (("status_allocated", "allocated"), ("status_requested", "requested")):
            for resource, qty in (want.get(key) or {}).items():
                have = (status.get(field) or {}).get(resource, 0)
                if _quantity(have) != _quantity(qty):
                    out.append(f"queue {want['name']}: status.{field}[{resource}] is {have}, expected {qty}")
    return out


def claim_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocated claim is pinned to: its allocation's ``nodeSelector``, as kube-scheduler
    writes it (one term, ``matchFields`` ``metadata.name In [node]``)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(field["values"]) == 1:
                return str(field["values"][0])
    return None


def claim_devices(claim: Mapping[str, Any]) -> list[str]:
    """The devices an allocated claim holds, ``pool/device``, in its allocation's order."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or [])
    return [f"{r['pool']}/{r['device']}" for r in results]


def _claims_of(obs: Mapping[str, Any], live: Mapping[str, Mapping[str, Any]],
               want: Mapping[str, Any]) -> tuple[str, list[Mapping[str, Any]]]:
    """The claims an expectation names: ``claim`` (ns/name), or ``for_pod`` (ns/name: the claims its
    ``spec.resourceClaims`` name, a template's through ``status.resourceClaimStatuses``)."""
    by_key = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in obs.get("resourceclaims") or []}
    if "claim" in want:
        found = by_key.get(want["claim"])
        return f"claim {want['claim']}", [found] if found else []
    pod = live.get(want["for_pod"])
    label = f"the claims of pod {want['for_pod']}"
    if pod is None:
        return label, []
    made = {s["name"]: s.get("resourceClaimName") for s in pod.get("resourceClaimStatuses") or []}
    names = [e.get("resourceClaimName") or made.get(e["name"]) for e in pod.get("resourceClaims") or []]
    return label, [by_key[f"{pod['namespace']}/{n}"] for n in names if n and f"{pod['namespace']}/{n}" in by_key]


def _check_claims(expect: Mapping[str, Any], obs: Mapping[str, Any],
                  live: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    for want in expect.get("claims") or ():
        label, claims = _claims_of(obs, live, want)
        if not claims:
            out.append(f"{label}: none")
            continue
        for claim in claims:
            name = f"{label} ({claim['metadata']['name']})" if "for_pod" in want else label
            status = claim.get("status") or {}
            node, devices = claim_node(claim), claim_devices(claim)
            if "allocated" in want and bool(status.get("allocation")) != want["allocated"]:
                out.append(f"{name}: allocated is {bool(status.get('allocation'))}, expected {want['allocated']}")
            if "node" in want and node != want["node"]:
                out.append(f"{name}: allocated on node {node}, expected {want['node']}")
            if "node_in" in want and node not in want["node_in"]:
                out.append(f"{name}: allocated on node {node}, expected one of {want['node_in']}")
            if "devices" in want and sorted(devices) != sorted(want["devices"]):
                out.append(f"{name}: holds {devices}, expected {want['devices']}")
            if "device_count" in want and len(devices) != want["device_count"]:
                out.append(f"{name}: holds {len(devices)} devices, expected {want['device_count']}")
            if "reserved_for" in want:
                reserved = sorted(r.get("name") for r in status.get("reservedFor") or [])
                if reserved != sorted(want["reserved_for"]):
                    out.append(f"{name}: reserved for {reserved}, expected {sorted(want['reserved_for'])}")
    return out


def _check_devices(expect: Mapping[str, Any], obs: Mapping[str, Any]) -> list[str]:
    want = expect.get("devices")
    if not want:
        return []
    held = [d for c in obs.get("resourceclaims") or [] for d in claim_devices(c)]
    out: list[str] = []
    if "allocated" in want and len(held) != want["allocated"]:
        out.append(f"devices: {len(held)} held by claims ({sorted(held)}), expected {want['allocated']}")
    if want.get("distinct") and len(held) != len(set(held)):
        out.append(f"devices: some held by two claims: {sorted(held)}")
    return out


def _check(expect: Mapping[str, Any], obs: Mapping[str, Any]) -> list[str]:
    live = {f"{p['namespace']}/{p['name']}": p for p in obs["pods"] if not p["deleted"]}
    return [*_check_pods(expect, live), *_check_selectors(expect, live), *_check_queues(expect, obs),
            *_check_claims(expect, obs, live), *_check_devices(expect, obs)]


def failures(scenario: Mapping[str, Any], observations: list[Mapping[str, Any]]) -> list[str]:
    """What the observations (one per ``expect`` step) do not show of the scenario's expectations."""
    return e2e.expectation_failures(scenario, observations, _check)
