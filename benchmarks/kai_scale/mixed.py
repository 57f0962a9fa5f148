"""B11, B13, B14: NCCL-like churn (gangs that end), RL gangs with subgroups beside CPU batches over
five queues, and thousands of fractional-GPU jobs on shared devices.

Sizes are KAI's at N = 500 nodes, scaled with N = ``run.nodes`` as each function says.

B14 runs with a **stand-in** for one step that KWOK cannot do: on a real cluster a fractional pod's
reservation pod gets a GPU from the device plugin and its container reports it (KAI's fake GPU
operator annotates it on KWOK clusters). KWOK's stage ``kaiweb-reservation-device``
(``deploy/kube/kwok-stages.yaml``) writes that report (``run.ai/reserve_for_gpu_index``) on each
running reservation pod; B14's details say so (``reservation_stand_in``). The product waits for it
before binding, as KAI's binder does (``KAI_RESERVATION_ALLOCATION_TIMEOUT``, set to KAI's 40 s by
``b7_scale.py``). Nothing else is stood in for.

B11's pods end through ``deploy/kube/kwok-stages-complete.yaml`` (KWOK moves a Running pod labelled
``kai-scale/complete-after`` to Succeeded), which ``b7_scale.py`` has KWOK load besides its stages.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .harness import (
    GPUS_PER_NODE,
    ROOT,
    Run,
    base_tree,
    gang_job_object,
    mirror_counts,
    namespace_for,
    pod_object,
    queue_object,
    scheduled_at,
    set_up,
    start_scheduling,
    transition_time,
)

# The stage file that ends B11's pods; KWOK must load it (b7_scale.py passes it to LocalKube).
COMPLETION_STAGES = ROOT / "deploy" / "kube" / "kwok-stages-complete.yaml"
COMPLETE_AFTER_LABEL = "kai-scale/complete-after"
COMPLETE_UNTIL_LABEL = "kai-scale/complete-until"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"  # what kaiweb reads (kaiweb.cluster.backends.types)
POD_GROUP_ANNOTATION = "pod-group-name"
PODGROUP_API_VERSION = "scheduling.run.ai/v2alpha2"
# What the product writes and reads on shared GPUs (kaiweb.cluster.backends.kubernetes.gpu_sharing).
RESERVATION_SELECTOR = "app=kai-resource-reservation"
GPU_GROUP_LABEL = "runai-gpu-group"
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
SETTLE_SECONDS = 15.0  # as kaiweb.cluster.invariants: a gang is bound pod by pod


def _latest(pods: Iterable[Mapping[str, Any]]) -> float | None:
    return max((t for t in (scheduled_at(p) for p in pods) if t is not None), default=None)


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _bound_live(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and _phase(pod) not in ("Succeeded", "Failed")


# ------------------------------------------------------------------------------ B13

def pod_group_object(name: str, queue: str, sub_groups: list[tuple[str, int]], min_sub_group: int) -> dict[str, Any]:
    """A PodGroup made by hand, as KAI defines one with subgroups: ``spec.minSubGroup`` of the direct
    subgroups must each have their ``minMember`` (no ``spec.minMember`` then, as KAI's grouper writes it)."""
    return {"apiVersion": PODGROUP_API_VERSION, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace_for(queue), "labels": {"kai.scheduler/queue": queue}},
            "spec": {"queue": queue, "minSubGroup": min_sub_group,
                     "subGroups": [{"name": sg, "minMember": n} for sg, n in sub_groups]}}


def _member(pod: dict[str, Any], group: str, sub_group: str) -> dict[str, Any]:
    pod["metadata"]["annotations"][POD_GROUP_ANNOTATION] = group
    pod["metadata"]["labels"][SUBGROUP_LABEL] = sub_group
    return pod


def _broken_subgroups(pods: Iterable[Mapping[str, Any]], groups: Mapping[str, Mapping[str, Any]],
                      now: float) -> list[str]:
    """The hand-made PodGroups that hold bound pods but not whole subgroups (``minSubGroup`` of them
    satisfied, and none part-bound), ``SETTLE_SECONDS`` after their latest bind. The invariant checker
    reads ``spec.minMember`` only, so these gangs are checked here."""
    members: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        name = (pod["metadata"].get("annotations") or {}).get(POD_GROUP_ANNOTATION)
        if name in groups:
            members.setdefault(name, []).append(pod)
    out = []
    for name, spec in groups.items():
        bound = [p for p in members.get(name, []) if _bound_live(p)]
        if not bound:
            continue
        latest = _latest(bound)
        if latest is not None and now - latest < SETTLE_SECONDS:
            continue
        by_sub = Counter((p["metadata"].get("labels") or {}).get(SUBGROUP_LABEL) for p in bound)
        whole = [sg["name"] for sg in spec["subGroups"] if by_sub[sg["name"]] >= sg["minMember"]]
        part = [sg["name"] for sg in spec["subGroups"] if 0 < by_sub[sg["name"]] < sg["minMember"]]
        if len(whole) < spec["minSubGroup"] or part:
            out.append(f"PodGroup {name}: bound per subgroup {dict(by_sub)}, subgroups {spec['subGroups']}")
    return out


def mixed_queues(run: Run, scheduler: str) -> dict[str, Any]:
    """B13: 5 queues (``mixed-0`` … ``mixed-4`` under ``parent``), GPU quota N·8/5 each. Per queue one
    PodGroup made by hand (``rl-<q>``, minSubGroup 2) with subgroup ``learner``: L pods × 8 GPUs and
    subgroup ``env``: 2·L CPU-only pods (2 CPU / 4Gi), each subgroup's minMember its pod count; plus 2·L
    one-pod CPU-only jobs (``cpu-<q>-<i>``). L = max(1, N/20) (25 at N = 500: 625 pods). D timing: the
    timer ends at the latest PodScheduled over every queue (``per_queue_seconds`` has each). KAI's target
    is 120 s at N = 500 (``within_target`` is checked at N ≥ 500, only recorded below). Asserted: every
    pod scheduled; no RL gang ever part-bound (sampled while waiting, as the invariants are); the
    product's mirror read the subgroups (minSubGroup and both subgroups on the workload, each pod's
    subgroup)."""
    queues = [f"mixed-{i}" for i in range(5)]
    quota: float = run.nodes * GPUS_PER_NODE / 5
    quota = int(quota) if float(quota).is_integer() else quota
    set_up(run, base_tree([queue_object(q, "parent", gpu=(quota, -1, 1)) for q in queues]))
    learners = max(1, run.nodes // 20)
    envs = cpu_jobs = 2 * learners
    groups: dict[str, dict[str, Any]] = {}
    pods: list[dict[str, Any]] = []
    for i, queue in enumerate(queues):
        name = f"rl-{i}"
        group = pod_group_object(name, queue, [("learner", learners), ("env", envs)], 2)
        groups[name] = group["spec"]
        run.api.create(group)
        pods += [_member(pod_object(f"{name}-learner-{j}", queue, gpus=8, scheduler=scheduler), name, "learner")
                 for j in range(learners)]
        pods += [_member(pod_object(f"{name}-env-{j}", queue, gpus=0, cpu="2", memory="4Gi", scheduler=scheduler),
                         name, "env") for j in range(envs)]
        pods += [pod_object(f"cpu-{i}-{j}", queue, gpus=0, cpu="2", memory="4Gi", scheduler=scheduler)
                 for j in range(cpu_jobs)]
    count = len(pods)
    created = time.monotonic()
    run.api.create_all(pods)
    run.notes["creation_seconds"] = round(time.monotonic() - created, 1)
    if run.product is not None:
        run.notes["mirrored_pods_at_start"] = mirror_counts().get("mirrored_pods")
    t0 = time.time()
    start_scheduling(run)
    broken: dict[str, str] = {}
    state: dict[str, list[dict[str, Any]]] = {}
    ours = ("rl-", "cpu-")

    def all_scheduled() -> bool:
        state["pods"] = [p for p in run.api.pods() if p["metadata"]["name"].startswith(ours)]
        for found in _broken_subgroups(state["pods"], groups, time.time()):
            broken.setdefault(found.split(":")[0], found)
        return sum(1 for p in state["pods"] if scheduled_at(p) is not None) >= count

    finished = run.wait(all_scheduled, "every B13 pod scheduled")
    wall = time.time() - t0
    run.sample()
    final = [p for p in run.api.pods() if p["metadata"]["name"].startswith(ours)]
    for found in _broken_subgroups(final, groups, time.time() + SETTLE_SECONDS):
        broken.setdefault(found.split(":")[0], found)
    times = [t for t in (scheduled_at(p) for p in final) if t is not None]
    per_queue = {}
    for queue in queues:
        latest = _latest(p for p in final if p["metadata"]["namespace"] == namespace_for(queue))
        per_queue[queue] = round(latest - t0, 1) if latest is not None else None
    seconds = round(max(times) - t0, 1) if finished and times else None
    checks = {"all_scheduled": finished and len(times) == count and len(final) == count,
              "gangs_whole": not broken, "subgroups_mirrored": _subgroups_mirrored(run, groups, final)}
    if run.nodes >= 500:
        checks["within_target"] = seconds is not None and seconds <= 120
    return {"seconds": seconds, "wall_seconds": round(wall, 1), "pods": count, "scheduled": len(times),
            "target_seconds": 120, "per_queue_seconds": per_queue, "queue_gpu_quota": quota,
            "per_queue": {"learner_pods": learners, "learner_gpus": 8, "env_pods": envs, "cpu_jobs": cpu_jobs},
            "gpus_asked": 5 * learners * GPUS_PER_NODE, "broken_gangs": list(broken.values())[:5],
            "checks": checks}


def _subgroups_mirrored(run: Run, groups: Mapping[str, Mapping[str, Any]], pods: list[dict[str, Any]]) -> bool:
    """Whether the product's mirror holds each RL PodGroup with its minSubGroup and subgroups, and each
    of its pods with its subgroup (kaiweb.cluster.mirror reads them)."""
    if run.product is None:
        return True
    from django.db import connections

    from kaiweb.workloads.models import Pod, Workload

    try:
        rows = {w.name: w for w in Workload.objects.filter(name__in=list(groups))}
        for name, spec in groups.items():
            row = rows.get(name)
            if row is None or row.min_subgroup != spec["minSubGroup"]:
                run.notes.setdefault("mirror_problems", []).append(f"workload {name}: {row and row.min_subgroup}")
                return False
            have = {(sg.get("name"), sg.get("minMember")) for sg in row.subgroups or []}
            if have != {(sg["name"], sg["minMember"]) for sg in spec["subGroups"]}:
                run.notes.setdefault("mirror_problems", []).append(f"workload {name}: subgroups {row.subgroups}")
                return False
        want = {p["metadata"]["name"]: p["metadata"]["labels"][SUBGROUP_LABEL]
                for p in pods if SUBGROUP_LABEL in p["metadata"]["labels"]}
        got = dict(Pod.objects.filter(name__in=list(want)).values_list("name", "subgroup"))
        wrong = [n for n, sg in want.items() if got.get(n) != sg]
        if wrong:
            run.notes.setdefault("mirror_problems", []).append(f"pods without their subgroup: {wrong[:5]}")
        return not wrong
    finally:
        connections.close_all()


# ------------------------------------------------------------------------------ B14

def _reservation_report(run: Run, namespace: str, sharer_prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The reservation pods against the shared GPUs in use: one per (node, GPU group) a live bound
    sharer uses, none for a group no sharer uses, none twice."""
    response = run.api.core.list_namespaced_pod(namespace, label_selector=RESERVATION_SELECTOR,
                                                _preload_content=False, _request_timeout=120)
    held = [p for p in json.loads(response.data).get("items") or [] if not p["metadata"].get("deletionTimestamp")]
    sharers = [p for p in run.api.pods() if p["metadata"]["name"].startswith(sharer_prefixes) and _bound_live(p)]
    in_use = {((p.get("spec") or {}).get("nodeName"), (p["metadata"].get("labels") or {}).get(GPU_GROUP_LABEL))
              for p in sharers}
    count = Counter(((p.get("spec") or {}).get("nodeName"), (p["metadata"].get("labels") or {}).get(GPU_GROUP_LABEL))
                    for p in held)
    return {"reservation_pods": len(held), "shared_gpus": len(in_use),
            "sharers_without_group": sum(1 for node, group in in_use if not group),
            "orphaned": sorted(f"{n}/{g}" for n, g in set(count) - in_use),
            "missing": sorted(f"{n}/{g}" for n, g in in_use - set(count)),
            "doubled": sorted(f"{n}/{g}" for (n, g), c in count.items() if c > 1),
            "unreported": sum(1 for p in held if not (p["metadata"].get("annotations") or {}).get(GPU_INDEX_ANNOTATION))}


def _config_maps_without_device(run: Run, namespace: str) -> tuple[int, int]:
    """The sharers' ConfigMaps (GPU_PORTION set), and how many of them name no device
    (NVIDIA_VISIBLE_DEVICES): a diagnostic of what a sharer's container would be told."""
    response = run.api.core.list_namespaced_config_map(namespace, _preload_content=False, _request_timeout=120)
    maps = [m for m in json.loads(response.data).get("items") or [] if "GPU_PORTION" in (m.get("data") or {})]
    return len(maps), sum(1 for m in maps if "NVIDIA_VISIBLE_DEVICES" not in (m.get("data") or {}))


def fractions(run: Run, scheduler: str) -> dict[str, Any]:
    """B14: queue ``fractions`` (under ``parent``); N·8·1.4 one-pod jobs annotated ``gpu-fraction:
    "0.125"`` and N·8·0.35 at ``"0.5"``, no GPU limits (5,600 + 1,400 at N = 500: 700 + 700 = 1,400 GPUs'
    worth). D timing. Then asserted: every pod scheduled; the reservation pods match the shared GPUs in
    use (one per node and GPU group a bound sharer uses, none orphaned, none twice; given up to 30 s for
    the product's collection of orphans); no shared GPU over 1.0 and nothing else the invariants forbid.
    ``binds_per_second`` (pods / seconds) is recorded to set beside B1 on kube-scheduler (``--peer``).

    A **stand-in** (KWOK's ``kaiweb-reservation-device`` stage) reports each running reservation pod's
    device, as KAI's fake GPU operator does on KWOK; the product's own reservation pods, ConfigMaps and
    binds are not stood in for, and the product waits for each report before binding, as KAI's binder
    does. Asserted too: every sharer's ConfigMap names its device (``NVIDIA_VISIBLE_DEVICES``)."""
    set_up(run, base_tree([queue_object("fractions", "parent")]))
    eighths = run.nodes * GPUS_PER_NODE * 14 // 10
    halves = run.nodes * GPUS_PER_NODE * 35 // 100
    pods = ([pod_object(f"frac8-{i}", "fractions", gpus=0, scheduler=scheduler, annotations={"gpu-fraction": "0.125"})
             for i in range(eighths)]
            + [pod_object(f"frac2-{i}", "fractions", gpus=0, scheduler=scheduler, annotations={"gpu-fraction": "0.5"})
               for i in range(halves)])
    count = len(pods)
    created = time.monotonic()
    run.api.create_all(pods)
    run.notes["creation_seconds"] = round(time.monotonic() - created, 1)
    if run.product is not None:
        run.notes["mirrored_pods_at_start"] = mirror_counts().get("mirrored_pods")
    reservation_ns = os.environ.get("KAI_RESERVATION_NAMESPACE") or "kai-resource-reservation"
    prefixes = ("frac8-", "frac2-")
    t0 = time.time()
    start_scheduling(run)

    def all_scheduled() -> bool:
        return sum(1 for p in run.api.pods() if p["metadata"]["name"].startswith(prefixes)
                   and scheduled_at(p) is not None) >= count

    finished = run.wait(all_scheduled, "every fractional pod scheduled")
    wall = time.time() - t0
    run.sample()
    final = [p for p in run.api.pods() if p["metadata"]["name"].startswith(prefixes)]
    times = [t for t in (scheduled_at(p) for p in final) if t is not None]
    seconds = round(max(times) - t0, 1) if finished and times else None
    settle = time.monotonic()
    report: dict[str, Any] = {}

    def reservations_match() -> bool:
        report.update(_reservation_report(run, reservation_ns, prefixes))
        return not (report["orphaned"] or report["missing"] or report["doubled"] or report["unreported"])

    def left() -> int:
        return sum(v if isinstance(v, int) else len(v or ())
                   for v in (report.get(k) for k in ("orphaned", "missing", "doubled", "unreported")))

    # Orphans are collected, and devices reported, at their own pace: wait while that makes
    # progress, until no progress for 30 s.
    # Each look lists every pod: at 28,000 pods that takes seconds, so the pause grows with it.
    looked = time.monotonic()
    matched = reservations_match()
    pause = max(2.0, 2 * (time.monotonic() - looked))
    progress, before = time.monotonic(), left()
    while not matched and time.monotonic() - progress < 30 and time.monotonic() - settle < run.timeout:
        time.sleep(pause)
        looked = time.monotonic()
        matched = reservations_match()
        pause = max(2.0, 2 * (time.monotonic() - looked))
        if left() < before:
            progress, before = time.monotonic(), left()
    report["settle_seconds"] = round(time.monotonic() - settle, 1)
    run.sample()
    maps, without_device = (0, -1)
    with contextlib.suppress(Exception):
        maps, without_device = _config_maps_without_device(run, namespace_for("fractions"))
    return {"seconds": seconds, "wall_seconds": round(wall, 1), "pods": count, "scheduled": len(times),
            "pods_at_0.125": eighths, "pods_at_0.5": halves,
            "gpus_asked": eighths * 0.125 + halves * 0.5,
            "binds_per_second": round(len(times) / seconds, 1) if seconds else None,
            "reservations": {k: (v[:10] if isinstance(v, list) else v) for k, v in report.items()},
            "reservation_stand_in": "KWOK stage kaiweb-reservation-device reports each reservation pod's device",
            "sharer_config_maps": maps, "config_maps_without_device": without_device,
            "checks": {"all_scheduled": finished and len(times) == count and len(final) == count,
                       "reservations_match": matched,
                       "every_sharer_grouped": not report.get("sharers_without_group"),
                       "every_config_map_names_its_device": maps == count and without_device == 0}}


# ------------------------------------------------------------------------------ B11

def gang_sizes(nodes: int) -> list[int]:
    """1, 2, 4 … up to 256, and no larger than the largest power of two ≤ ``nodes``."""
    sizes, size = [], 1
    while size <= min(256, nodes):
        sizes.append(size)
        size *= 2
    return sizes


def _finished_at(pod: Mapping[str, Any]) -> float | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        at = transition_time(((status.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if at is not None:
            return at
    return None


def nccl_churn(run: Run, scheduler: str) -> dict[str, Any]:
    """B11: gangs of 1, 2, 4 … S pods × 8 GPUs (S = the largest power of two ≤ min(N, 256)), G of each
    size (G = max(2, 90·N/500): 90 at N = 500, 45,990 pods), batch Jobs in ``filler`` submitted size
    after size with the scheduler running. KWOK moves each Running pod to Succeeded 20 s + up to 40 s
    (jitter) after it started (``deploy/kube/kwok-stages-complete.yaml``). Timed from the first
    submission until the last pod finished; asserted: every pod Succeeded, none more were made (a
    replaced pod would mean one was evicted or lost) and, as always, no invariant broken (a gang whose
    pods end one by one is not broken: its Succeeded members count)."""
    set_up(run, base_tree())
    sizes = gang_sizes(run.nodes)
    per_size = max(2, round(90 * run.nodes / 500))
    total = per_size * sum(sizes)
    start_scheduling(run)
    t0 = time.time()
    for size in sizes:
        jobs = []
        for k in range(per_size):
            job = gang_job_object(f"nccl-{size}-{k}", "filler", size, gpus=8, scheduler=scheduler)
            job["spec"]["template"]["metadata"]["labels"].update({COMPLETE_AFTER_LABEL: "20s",
                                                                  COMPLETE_UNTIL_LABEL: "60s"})
            jobs.append(job)
        run.api.create_all(jobs)
    run.notes["submission_seconds"] = round(time.time() - t0, 1)
    state: dict[str, list[dict[str, Any]]] = {}

    def all_succeeded() -> bool:
        state["pods"] = [p for p in run.api.pods() if p["metadata"]["name"].startswith("nccl-")]
        return sum(1 for p in state["pods"] if _phase(p) == "Succeeded") >= total

    finished = run.wait(all_succeeded, "every B11 pod Succeeded")
    wall = time.time() - t0
    run.sample()
    final = [p for p in run.api.pods() if p["metadata"]["name"].startswith("nccl-")]
    succeeded = [p for p in final if _phase(p) == "Succeeded"]
    ends = [t for t in (_finished_at(p) for p in succeeded) if t is not None]
    scheduled = sum(1 for p in final if scheduled_at(p) is not None)
    return {"seconds": round(max(ends) - t0, 1) if finished and ends else None, "wall_seconds": round(wall, 1),
            "pods": total, "scheduled": scheduled, "succeeded": len(succeeded), "pods_made": len(final),
            "gang_sizes": sizes, "gangs_per_size": per_size, "gangs": per_size * len(sizes),
            "failed": sum(1 for p in final if _phase(p) == "Failed"),
            "checks": {"all_succeeded": finished and len(succeeded) == total, "no_pod_replaced": len(final) == total}}


SCENARIOS: dict[str, tuple[str, Callable[[Run, str], dict[str, Any]]]] = {
    "B11": ("B11 NCCL-like churn: gangs of 1 … 256 × 8 GPUs that end after 20-60 s", nccl_churn),
    "B13": ("B13 mixed: RL gangs with subgroups + CPU batches over 5 queues", mixed_queues),
    "B14": ("B14 thousands of fractional jobs (reservation pods: device report stood in for)", fractions),
}
