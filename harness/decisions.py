"""Scenario runner: replays KAI decision scenarios (corpus schema ``kai-corpus/1``) on the engine.

Usage: ``python -m harness.decisions PATH [PATH ...] [--json] [--features a,b] [--all] [-v]``

Each scenario is run as the corpus's SCHEMA.md Part B says: single-session modes run the listed
actions once on one session; ``full_cycle`` runs the round loop with the transition table and
the fixed-point checks after the match. A scenario passes *strictly* when every expected status
and node matches at every check point and the per-session caps hold; it passes *status-only*
when everything but the node names matches. Scenarios with ``unsupported_features`` are skipped
unless ``--all`` is given. No scenario is ever treated by its name or id.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scheduler_core import model as m
from scheduler_core.cycle import close_session, open_session, run_action

T0 = 1_000_000.0  # the scenario clock's "now"
_TOL = 1e-9


# --------------------------------------------------------------------------------------------
# Scenario → snapshot / config


def _queue(q: dict[str, Any]) -> m.QueueSpec:
    # queues are created before departments at equal minutes (A.4)
    offset = 0.0 if q.get("kind", "queue") == "queue" else 0.5
    return m.QueueSpec(
        name=q["name"], parent=q.get("parent"), priority=int(q.get("priority", 100)),
        creation=T0 + 60.0 * q.get("creation_minute", 0) + offset,
        gpu=m.QueueResource(q["gpu"]["quota"], q["gpu"]["limit"], q["gpu"]["over_quota_weight"]),
        cpu=m.QueueResource(q["cpu"]["quota_millis"], q["cpu"]["limit_millis"], q["cpu"]["over_quota_weight"]),
        memory=m.QueueResource(q["memory"]["quota_bytes"], q["memory"]["limit_bytes"],
                               q["memory"]["over_quota_weight"]),
        reclaim_min_runtime_s=q.get("reclaim_min_runtime_s"),
        preempt_min_runtime_s=q.get("preempt_min_runtime_s"),
    )


def _node(n: dict[str, Any]) -> m.NodeSpec:
    return m.NodeSpec(
        name=n["name"], cpu_millis=float(n.get("cpu_millis", 0)), memory_bytes=float(n.get("memory_bytes", 0)),
        gpus=int(n.get("gpus", 0)), allocatable_gpus=n.get("allocatable_gpus"),
        gpu_memory_mib=int(n.get("gpu_memory_mib", 100)), gpu_memory_synced=bool(n.get("gpu_memory_synced", True)),
        max_pods=int(n.get("max_pods", 110)), mig_strategy=n.get("mig_strategy"),
        mig_instances=dict(n.get("mig_instances") or {}), labels=dict(n.get("labels") or {}),
    )


def _tc(x: dict[str, Any] | None) -> m.TopologyConstraint | None:
    if not x:
        return None
    return m.TopologyConstraint(x["topology"], x.get("required_level"), x.get("preferred_level"))


def _subgroup(x: dict[str, Any]) -> m.SubGroupSpec:
    return m.SubGroupSpec(
        name=x.get("name", ""), min_subgroups=x.get("min_subgroups"), topology_constraint=_tc(x.get("topology_constraint")),
        pod_sets=tuple(m.PodSetSpec(p["name"], int(p.get("min_available", 0)), _tc(p.get("topology_constraint")))
                       for p in x.get("pod_sets", [])),
        subgroups=tuple(_subgroup(c) for c in x.get("subgroups", [])),
    )


def _task(t: dict[str, Any], job_name: str = "") -> m.TaskSpec:
    kind = t.get("gpu_request_kind", "none")
    req = m.TaskRequest(
        cpu_millis=float(t.get("cpu_millis", 0)), memory_bytes=float(t.get("memory_bytes", 0)), gpu_kind=kind,
        gpus=float(t.get("gpus", 0)) if kind == "whole" else 0.0,
        gpu_fraction=float(t.get("gpu_fraction", 0.0)) if kind == "fraction" else 0.0,
        gpu_memory_mib=int(t.get("gpu_memory_mib", 0)) if kind in ("gpu_memory", "fraction") else 0,
        gpu_devices=int(t.get("gpu_devices", 1)), mig=dict(t.get("mig") or {}),
    )
    return m.TaskSpec(
        name=t["name"], request=req, state=t.get("state", "Pending"), node=t.get("node"),
        gpu_groups=tuple(t.get("gpu_groups") or ()), subgroup=t.get("subgroup"),
        task_order_priority=t.get("task_order_priority"),
        node_affinity=tuple(t["node_affinity"]) if t.get("node_affinity") is not None else None,
        **_pod_affinity(t.get("pod_affinity"), job_name),
    )


def _pod_affinity(pa: dict[str, Any] | None, job_name: str) -> dict[str, Any]:
    """The harness's pod affinity: the pod carries ``labels`` (and ``job-name``); a topology
    key adds a required affinity (resp. anti-affinity) term selecting pods with those labels."""
    if not pa:
        return {"labels": {"job-name": job_name}}
    labels = dict(pa.get("labels") or {})
    selector = tuple(sorted(labels.items()))
    out: dict[str, Any] = {"labels": {"job-name": job_name, **labels}}
    if labels and pa.get("affinity_topology_key"):
        out["pod_affinity"] = (m.PodAffinityTerm(pa["affinity_topology_key"], selector),)
    if labels and pa.get("anti_affinity_topology_key"):
        out["pod_anti_affinity"] = (m.PodAffinityTerm(pa["anti_affinity_topology_key"], selector),)
    return out


def _job(j: dict[str, Any]) -> m.JobSpec:
    stale_for = j.get("stale_for_s")
    return m.JobSpec(
        name=j["name"], namespace=j.get("namespace", ""), queue=j["queue"], priority=int(j.get("priority", 0)),
        preemptible=bool(j.get("preemptible", True)),
        creation=T0 - 60.0 * j.get("age_minutes", 0) + 1e-6 * j.get("build_order", 0),
        build_order=int(j.get("build_order", 0)), subgroups=_subgroup(j["subgroups"]) if j.get("subgroups") else None,
        min_available=j.get("min_available"), tasks=tuple(_task(t, j["name"]) for t in j.get("tasks", [])),
        preemption_delay_s=j.get("preemption_delay_s"), staleness_grace_s=j.get("staleness_grace_period_s"),
        stale_since=(T0 - stale_for) if stale_for is not None else None,
        deleting=bool(j.get("delete_job_in_test", False)),
    )


def snapshot_of(sc: dict[str, Any]) -> m.ClusterSnapshot:
    """The engine snapshot for a scenario's current state."""
    return m.ClusterSnapshot(
        nodes=tuple(_node(n) for n in sc.get("nodes", [])),
        queues=tuple(_queue(q) for q in sc.get("queues", [])),
        jobs=tuple(_job(j) for j in sc.get("jobs", [])),
        topologies=tuple(m.TopologySpec(t["name"], tuple(t.get("levels", []))) for t in sc.get("topologies", []) or []),
        now=T0,
    )


def config_of(sc: dict[str, Any]) -> m.CycleConfig:
    """The cycle configuration the scenario's harness implies."""
    h = sc.get("harness", {})
    plugin_set = h.get("plugin_set", "default")
    plugins: tuple[str, ...] | None = None
    gpu_placement = cpu_placement = "binpack"
    predicates = bool(h.get("predicates_enabled", True))
    if plugin_set == "default_without_predicates":
        predicates = False
    elif plugin_set == "custom":
        names = []
        for p in h.get("plugins", []):
            names.append(p["name"])
            args = p.get("arguments") or {}
            if p["name"] == "nodeplacement":
                gpu_placement = args.get("gpu", "binpack")
                cpu_placement = args.get("cpu", "binpack")
            if p["name"] == "gpuspread":
                gpu_placement = "spread"
        plugins = tuple(names)
    return m.CycleConfig(
        gpu_placement=gpu_placement, cpu_placement=cpu_placement, predicates=predicates, plugins=plugins,
        default_staleness_grace_s=float(h.get("global_staleness_grace_period_s", 0.0)),
        max_consolidation_preemptees=-1,
    )


# --------------------------------------------------------------------------------------------
# Checking


class Outcome:
    """Result of one scenario run."""

    def __init__(self) -> None:
        self.strict_diff: str | None = None
        self.status_diff: str | None = None

    def node_diff(self, msg: str) -> None:
        if self.strict_diff is None:
            self.strict_diff = msg

    def status(self, msg: str) -> None:
        if self.status_diff is None:
            self.status_diff = msg
        self.node_diff(msg)


def _gpus_required(t: dict[str, Any]) -> float:
    kind = t.get("gpu_request_kind", "none")
    if kind == "whole":
        return float(t.get("gpus", 0))
    if kind == "fraction":
        return float(t.get("gpu_fraction", 0)) * int(t.get("gpu_devices", 1))
    return 0.0


def check(sc: dict[str, Any], state: dict[str, Any], result: m.CycleResult, out: Outcome, where: str,
          session_counts: dict[str, int] | None) -> None:
    """Compare ``result`` with the scenario's expectations (A.10) and record the first difference."""
    exp = sc.get("expected", {})
    by_task = {(o.job, o.task): o for o in result.tasks}
    jobs = {j["name"]: j for j in state["jobs"]}
    task_json = {t["name"]: (j, t) for j in state["jobs"] for t in j.get("tasks", [])}

    def cmp_task(jname: str, tname: str, e: dict[str, Any], label: str) -> None:
        o = by_task.get((_uid(jobs[jname]), tname))
        if o is None:
            out.status(f"{where}: {label}: task {tname} missing from the result")
            return
        if "status" in e and o.status != e["status"]:
            out.status(f"{where}: {label}: task {tname} status {o.status} (node {o.node}), expected {e['status']}")
        if e.get("status") in (m.BINDING, m.RUNNING, m.ALLOCATED, m.BOUND) and o.status == e["status"]:
            if _uid(jobs[jname]) not in result.last_start:
                out.status(f"{where}: {label}: job {jname} has no last start time")
        if "node" in e and o.node != e["node"]:
            out.node_diff(f"{where}: {label}: task {tname} on node {o.node}, expected {e['node']}")

    def cmp_sums(tasks: list[dict[str, Any]], e: dict[str, Any], label: str, jname: str) -> None:
        if "gpus_required" in e:
            got = sum(_gpus_required(t) for t in tasks)
            if abs(got - e["gpus_required"]) > 1e-6:
                out.status(f"{where}: {label}: gpus_required {got}, expected {e['gpus_required']}")
        if "cpu_millis_required" in e:
            got = sum(t.get("cpu_millis", 0) for t in tasks)
            if abs(got - e["cpu_millis_required"]) > 1e-6:
                out.status(f"{where}: {label}: cpu_millis_required {got}, expected {e['cpu_millis_required']}")
        if "memory_bytes_required" in e:
            got = sum(t.get("memory_bytes", 0) for t in tasks)
            if abs(got - e["memory_bytes_required"]) > 1e-3:
                out.status(f"{where}: {label}: memory_bytes_required {got}, expected {e['memory_bytes_required']}")
        if "last_start_older_than_s" in e:
            ls = result.last_start.get(_uid(jobs[jname]))
            if ls is None or not (T0 - ls > e["last_start_older_than_s"]):
                out.status(f"{where}: {label}: last start {ls} not older than {e['last_start_older_than_s']}s")

    for jname, e in exp.get("jobs", {}).items():
        if jname not in jobs:
            out.status(f"{where}: job {jname} does not exist")
            continue
        tasks = jobs[jname].get("tasks", [])
        for t in tasks:
            cmp_task(jname, t["name"], e, f"job {jname}")
        cmp_sums(tasks, e, f"job {jname}", jname)
        if "gpus_accepted" in e:
            got = sum(_accepted(result, _uid(jobs[jname]), t["name"], sc) for t in tasks)
            if abs(got - e["gpus_accepted"]) > 1e-6:
                out.status(f"{where}: job {jname}: gpus_accepted {got}, expected {e['gpus_accepted']}")
    for tname, e in exp.get("tasks", {}).items():
        if tname not in task_json:
            continue
        j, t = task_json[tname]
        cmp_task(j["name"], tname, e, f"task {tname}")
        cmp_sums([t], e, f"task {tname}", j["name"])
    for nname, e in exp.get("nodes", {}).items():
        node_got = result.nodes.get(nname)
        if node_got is None:
            out.status(f"{where}: node {nname} missing")
            continue
        for key in ("idle_gpus", "releasing_gpus"):
            if key in e and abs(node_got[key] - e[key]) > 1e-6:
                out.status(f"{where}: node {nname} {key} {node_got[key]}, expected {e[key]}")
    if session_counts is not None:
        h = sc.get("harness", {})
        for key, cap in (("binds", "max_binds_per_session"), ("evictions", "max_evictions_per_session"),
                         ("pipelined", "max_pipelines_per_session")):
            if cap in h and session_counts.get(key, 0) > h[cap]:
                out.status(f"{where}: {session_counts[key]} {key} in one session, at most {h[cap]} allowed")


def _accepted(result: m.CycleResult, job: str, task: str, sc: dict[str, Any]) -> float:
    for b in result.binds:
        if b.job == job and b.task == task:
            return b.gpu_portion * max(1, len(b.gpu_groups)) if b.gpu_groups else 0.0
    return 0.0


def _uid(j: dict[str, Any]) -> str:
    ns = j.get("namespace", "")
    return f"{ns}/{j['name']}" if ns else j["name"]


def _session_counts(state: dict[str, Any], result: m.CycleResult) -> dict[str, int]:
    """New binds / evictions / pipelines in one session, against the state it started from."""
    before = {(_uid(j), t["name"]): t.get("state") for j in state["jobs"] for t in j.get("tasks", [])}
    counts = {"binds": 0, "evictions": 0, "pipelined": 0}
    for o in result.tasks:
        old = before.get((o.job, o.task))
        if o.status == m.BINDING and old != m.BINDING:
            counts["binds"] += 1
        elif o.status == m.RELEASING and old != m.RELEASING:
            counts["evictions"] += 1
        elif o.status == m.PIPELINED and old != m.PIPELINED:
            counts["pipelined"] += 1
    counts["evictions"] += sum(1 for p in result.pipelined if p.moved_from is not None)
    return counts


# --------------------------------------------------------------------------------------------
# Running


def run_session(state: dict[str, Any], sc: dict[str, Any], actions: Iterable[str]) -> m.CycleResult:
    """Build a session from ``state``, run ``actions`` once each, return the result."""
    s, placer = open_session(snapshot_of(state), config_of(sc))
    for a in actions:
        run_action(s, placer, a)
    return close_session(s)


def transition(state: dict[str, Any], result: m.CycleResult) -> dict[str, Any]:
    """The next round's state from a session's result (SCHEMA B.3 transition table)."""
    nxt = copy.deepcopy(state)
    by_task = {(o.job, o.task): o for o in result.tasks}
    for j in nxt["jobs"]:
        uid = _uid(j)
        stale = result.stale_since.get(uid)
        if stale is not None:
            j["stale_for_s"] = T0 - stale
        else:
            j.pop("stale_for_s", None)
        for t in j.get("tasks", []):
            o = by_task.get((uid, t["name"]))
            if o is None:
                continue
            if o.status == m.BINDING:
                t["state"], t["node"] = m.RUNNING, o.node
                if o.gpu_groups:
                    t["gpu_groups"] = list(o.gpu_groups)
            elif o.status == m.PIPELINED:
                t["state"], t["node"] = m.PENDING, None
                if o.gpu_groups:
                    t["gpu_groups"] = list(o.gpu_groups)
            elif o.status == m.RELEASING and not j.get("delete_job_in_test"):
                t["state"], t["node"] = m.PENDING, None
            else:
                t["state"], t["node"] = o.status, o.node if o.status != m.PENDING else t.get("node")
    return nxt


def run_scenario(sc: dict[str, Any]) -> Outcome:
    """Run one scenario; the outcome holds the first strict and status-only differences."""
    out = Outcome()
    state = {"jobs": sc["jobs"], "nodes": sc["nodes"], "queues": sc["queues"], "topologies": sc.get("topologies", []),
             "harness": sc.get("harness", {})}
    try:
        if sc["mode"] == "full_cycle":
            rounds = sc.get("rounds") or {}
            until = rounds.get("until_match") or 2
            after = rounds.get("after_match") or 5
            actions = sc.get("actions") or list(m.ACTIONS)
            for k in range(until):
                res = run_session(state, sc, actions)
                check_caps(sc, state, res, out, f"round {k + 1}")
                state = transition(state, res)
            res = run_session(state, sc, [])
            check(sc, state, res, out, "after rounds", None)
            for k in range(after):
                res = run_session(state, sc, actions)
                check(sc, state, res, out, f"fixed-point round {k + 1}", _session_counts(state, res))
                state = transition(state, res)
        else:
            actions = sc.get("actions") or [sc["mode"].split(":", 1)[1]]
            res = run_session(state, sc, actions)
            check(sc, state, res, out, "session", _session_counts(state, res))
    except Exception as exc:  # a crash is a failure of this scenario, not of the run
        out.status(f"engine error: {type(exc).__name__}: {exc}")
    return out


def check_caps(sc: dict[str, Any], state: dict[str, Any], res: m.CycleResult, out: Outcome, where: str) -> None:
    counts = _session_counts(state, res)
    h = sc.get("harness", {})
    for key, cap in (("binds", "max_binds_per_session"), ("evictions", "max_evictions_per_session"),
                     ("pipelined", "max_pipelines_per_session")):
        if cap in h and counts.get(key, 0) > h[cap]:
            out.status(f"{where}: {counts[key]} {key} in one session, at most {h[cap]} allowed")


def load(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Every scenario in the JSON files under ``paths`` (INDEX.json excluded), in path order."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(sorted(x for x in path.rglob("*.json") if x.name != "INDEX.json"))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    out: list[dict[str, Any]] = []
    for f in files:
        data = json.loads(f.read_text())
        if isinstance(data, list):
            out.extend(x for x in data if isinstance(x, dict) and "mode" in x)
    return out


def _counts() -> dict[str, int]:
    return {"total": 0, "passed": 0, "passed_status_only": 0, "skipped_unsupported": 0}


def run_all(scenarios: list[dict[str, Any]], features: set[str] | None = None, include_unsupported: bool = False,
            verbose: bool = True, stream: Any = None) -> dict[str, Any]:
    """Run scenarios and return the summary object of ``--json``."""
    summary: dict[str, Any] = _counts()
    by_mode: dict[str, dict[str, int]] = {}
    by_feature: dict[str, dict[str, int]] = {}
    failed: list[str] = []
    lines: list[str] = []
    for sc in scenarios:
        if features and not features.issubset(set(sc.get("features", []))):
            continue
        buckets = [summary, by_mode.setdefault(sc["mode"], _counts())]
        buckets += [by_feature.setdefault(f, _counts()) for f in sc.get("features", [])]
        for b in buckets:
            b["total"] += 1
        if sc.get("unsupported_features") and not include_unsupported:
            for b in buckets:
                b["skipped_unsupported"] += 1
            lines.append(f"SKIP {sc['id']} (unsupported: {', '.join(sc['unsupported_features'])})")
            continue
        out = run_scenario(sc)
        if out.strict_diff is None:
            for b in buckets:
                b["passed"] += 1
                b["passed_status_only"] += 1
            lines.append(f"PASS {sc['id']}")
        else:
            failed.append(sc["id"])
            if out.status_diff is None:
                for b in buckets:
                    b["passed_status_only"] += 1
                lines.append(f"FAIL {sc['id']} (status ok): {out.strict_diff}")
            else:
                lines.append(f"FAIL {sc['id']}: {out.strict_diff}")
    summary["by_mode"] = dict(sorted(by_mode.items()))
    summary["by_feature"] = dict(sorted(by_feature.items()))
    summary["failed"] = failed
    if verbose and stream is not None:
        for line in lines:
            print(line, file=stream)
    summary["_lines"] = lines
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.decisions", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="scenario files or folders")
    ap.add_argument("--json", action="store_true", help="print one JSON summary object")
    ap.add_argument("--features", default="", help="only scenarios carrying all these tags (comma-separated)")
    ap.add_argument("--all", action="store_true", help="also run scenarios with unsupported features")
    args = ap.parse_args(argv)
    try:
        scenarios = load(args.paths)
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    feats = {f for f in args.features.split(",") if f} or None
    summary = run_all(scenarios, feats, args.all, verbose=False)
    lines = summary.pop("_lines")
    if args.json:
        print(json.dumps(summary, indent=1, sort_keys=False))
    else:
        for line in lines:
            print(line)
        print(f"total {summary['total']}  passed {summary['passed']}  status-only {summary['passed_status_only']}  "
              f"skipped (unsupported) {summary['skipped_unsupported']}")
        for mode, c in summary["by_mode"].items():
            print(f"  {mode:45s} {c['passed']:4d} / {c['total'] - c['skipped_unsupported']:4d} strict, "
                  f"{c['passed_status_only']:4d} status-only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
