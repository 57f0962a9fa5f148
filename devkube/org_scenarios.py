"""Scenarios of departments, projects and node pools, played by the e2e runner (`devkube.e2e`).

They are KAI e2e scenarios (the corpus's JSON format: ``steps`` of ``apply``, ``cycles``, ``expect``) with
one more top-level section, ``org``: the node pools, departments and projects, set up through the org
services (``kaiweb.org.services``) after the database is emptied and before any cluster object is
applied, as a platform admin would have made them first. A ``cycles`` step runs one cycle of every
shard (each pool's, in name order), as the shards' workers would.

The expect vocabulary is the corpus's, the subset these scenarios use, plus ``node_pool`` on a PodGroup:

* ``pods: {"ns/name": {"scheduled": bool, "node_in": [...], "why_regex": re}}`` (``why_regex``: the
  message of its ``PodScheduled=False`` condition, why it waits);
* ``podgroups: [{"for_pod": "ns/name", "queue": q, "node_pool": p}]`` (``default``: no pool label;
  ``kai-unexisting-node-pool``: waiting unassigned);
* ``selectors: [{"namespace"? (any), "labels"?, "scheduled_count"?, "pending_count"?}]``;
* ``events: [{"for_pod": "ns/name", "reason", "message_regex"?}]`` (an event on the pod's PodGroup).

`failures` checks them (each failure names the scenario's expectation); it never runs the product.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devkube import e2e

SCENARIOS = Path(__file__).resolve().parents[1] / "tests" / "org_scenarios"
POD_GROUP_ANNOTATION = "pod-group-name"
NODE_POOL_LABEL = "kai.scheduler/node-pool"


def apply_org(scenario: Mapping[str, Any]) -> None:
    """The scenario's ``org``: node pools, then departments, then projects, through the services."""
    from kaiweb.org import services

    org = scenario.get("org") or {}
    for pool in org.get("node_pools") or ():
        services.create_node_pool(pool)
    for department in org.get("departments") or ():
        services.create_department(department)
    for project in org.get("projects") or ():
        services.create_project(project)


def every_shard_cycle() -> list[Any]:
    """One cycle of every enabled shard of the mirrored cluster, in name order."""
    from kaiweb.cluster import mirror
    from kaiweb.cluster.models import SchedulingShard
    from kaiweb.scheduling.cycle import run_and_record_cycle

    cluster = mirror.kubernetes_cluster()
    return [run_and_record_cycle(shard, trigger="e2e")
            for shard in SchedulingShard.objects.filter(cluster=cluster, enabled=True).order_by("name")]


def every_shard_invariants(outcomes: list[Any]) -> list[str]:
    from devkube.product import cycle_invariants

    return [v for outcome in outcomes for v in cycle_invariants(outcome)]


# ----------------------------------------------------------------------------------- expectations


def _pod_group_of(obs: Mapping[str, Any], pod_key: str) -> Mapping[str, Any] | None:
    pod = next((p for p in obs["pods"] if f"{p['namespace']}/{p['name']}" == pod_key and not p["deleted"]), None)
    if pod is None:
        return None
    name = (pod.get("annotations") or {}).get(POD_GROUP_ANNOTATION)
    return next((g for g in obs["podgroups"] if (g.get("metadata") or {}).get("namespace") == pod["namespace"]
                 and (g.get("metadata") or {}).get("name") == name), None)


def _check(expect: Mapping[str, Any], obs: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    live = {f"{p['namespace']}/{p['name']}": p for p in obs["pods"] if not p["deleted"]}
    for key, want in (expect.get("pods") or {}).items():
        pod = live.get(key)
        if pod is None:
            out.append(f"pod {key}: absent")
            continue
        if "scheduled" in want and bool(pod["nodeName"]) != want["scheduled"]:
            out.append(f"pod {key}: scheduled is {bool(pod['nodeName'])} (node {pod['nodeName']}), "
                       f"expected {want['scheduled']}")
        if "node_in" in want and pod["nodeName"] not in want["node_in"]:
            out.append(f"pod {key}: on node {pod['nodeName']}, expected one of {want['node_in']}")
        if "why_regex" in want:
            why = next((c.get("message") or "" for c in pod.get("conditions") or []
                        if c.get("type") == "PodScheduled" and c.get("status") == "False"), "")
            if not re.search(want["why_regex"], why):
                out.append(f"pod {key}: why it waits is {why!r}, expected to match {want['why_regex']!r}")
    for want in expect.get("podgroups") or ():
        group = _pod_group_of(obs, want["for_pod"])
        if group is None:
            out.append(f"PodGroup of {want['for_pod']}: absent")
            continue
        labels = (group.get("metadata") or {}).get("labels") or {}
        queue = (group.get("spec") or {}).get("queue")
        if "queue" in want and queue != want["queue"]:
            out.append(f"PodGroup of {want['for_pod']}: queue {queue}, expected {want['queue']}")
        if "node_pool" in want and labels.get(NODE_POOL_LABEL, "default") != want["node_pool"]:
            out.append(f"PodGroup of {want['for_pod']}: node pool {labels.get(NODE_POOL_LABEL, 'default')}, "
                       f"expected {want['node_pool']}")
    for want in expect.get("selectors") or ():
        chosen = [p for p in live.values() if p["namespace"] == want.get("namespace", p["namespace"])
                  and all((p.get("labels") or {}).get(k) == v for k, v in (want.get("labels") or {}).items())]
        scheduled = sum(1 for p in chosen if p["nodeName"])
        for key, have in (("scheduled_count", scheduled), ("pending_count", len(chosen) - scheduled)):
            if key in want and have != want[key]:
                out.append(f"selector {want}: {key} is {have}, expected {want[key]}")
    for want in expect.get("events") or ():
        group = _pod_group_of(obs, want["for_pod"])
        name = (group or {}).get("metadata", {}).get("name")
        found = [e for e in obs["events"] if (e.get("involvedObject") or {}).get("kind") == "PodGroup"
                 and (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == want["reason"]
                 and re.search(want.get("message_regex", ""), e.get("message") or "")]
        if not found:
            out.append(f"event {want['reason']} on the PodGroup of {want['for_pod']}: none")
    return out


def failures(scenario: Mapping[str, Any], observations: list[Mapping[str, Any]]) -> list[str]:
    """What the observations (one per ``expect`` step) do not show of the scenario's expectations."""
    return e2e.expectation_failures(scenario, observations, _check)
