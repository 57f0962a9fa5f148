"""B4–B6: time to unschedulable, one very large reclaim, reclaim latency; all over a cluster the
``sanity`` queue fills with preemptible one-GPU pods."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .harness import (
    GPUS_PER_NODE,
    Run,
    count_scheduled,
    gang_job_object,
    namespace_for,
    pod_object,
    queue_object,
    sanity_fills_the_cluster,
    scheduled_at,
    transition_time,
)


def time_to_unschedulable(run: Run, scheduler: str) -> dict[str, Any]:
    """B4: sanity holds the whole cluster with quota N·8−80+1 and over-quota weight 0, so at most 79
    GPUs can be reclaimed; 10 gangs of 10 pods × 8 GPUs in ``reclaim-single``, one after another,
    can never fit. Per gang: its PodGroup's ``UnschedulableOnNodePool`` condition time minus the
    PodGroup's creation; the average is the figure. No gang pod may be bound, no sanity pod evicted."""
    count = sanity_fills_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent")],
                                      sanity_gpu=(max(0, run.nodes * GPUS_PER_NODE - 80 + 1), -1, 0))
    namespace = namespace_for("reclaim-single")
    delays: list[float] = []
    for i in range(10):
        name = f"gang-{i}"
        run.api.create(gang_job_object(name, "reclaim-single", 10, scheduler=scheduler))
        seen: dict[str, float] = {}

        def unschedulable(name: str = name, seen: dict[str, float] = seen) -> bool:
            response = run.api.custom.list_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", namespace, "podgroups", _preload_content=False)
            for group in json.loads(response.data).get("items") or []:
                owners = group["metadata"].get("ownerReferences") or []
                if not any(o.get("name") == name for o in owners):
                    continue
                for condition in (group.get("status") or {}).get("schedulingConditions") or []:
                    if condition.get("type") == "UnschedulableOnNodePool":
                        created = transition_time(group["metadata"].get("creationTimestamp"))
                        at = transition_time(condition.get("lastTransitionTime"))
                        if created is not None and at is not None:
                            seen["delay"] = at - created
                            return True
            return False

        if not run.wait(unschedulable, f"{name} reported UnschedulableOnNodePool"):
            break
        delays.append(seen["delay"])
    run.sample()
    pods = run.api.pods()
    gang_bound = sum(1 for p in pods if p["metadata"]["name"].startswith("gang-") and (p.get("spec") or {}).get("nodeName"))
    left = sum(1 for p in pods if p["metadata"]["name"].startswith("sanity-"))
    return {"seconds": round(sum(delays) / len(delays), 2) if len(delays) == 10 else None,
            "per_gang_seconds": [round(d, 1) for d in delays], "pods": 100, "scheduled": gang_bound,
            "sanity_pods_left": left,
            "checks": {"every_gang_unschedulable": len(delays) == 10, "no_gang_pod_bound": gang_bound == 0,
                       "no_sanity_pod_evicted": left == count}}


def big_reclaim(run: Run, scheduler: str) -> dict[str, Any]:
    """B5: sanity (quota 0) fills the cluster; a gang of N/2 pods × 8 GPUs in ``reclaim-single``
    (quota N·8−80+1) must reclaim half of it. Timed from the Job's creation to its last pod scheduled
    (the PodGroup is the product's own, made by its pod-grouper after that)."""
    quota = run.nodes * GPUS_PER_NODE - 80 + 1
    sanity_fills_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent", gpu=(quota, -1, 1))],
                              sanity_gpu=(0, -1, 1))
    size = max(1, run.nodes // 2)
    t0 = time.time()
    run.api.create(gang_job_object("hero", "reclaim-single", size, scheduler=scheduler))

    def hero_pods() -> list[dict[str, Any]]:
        return run.api.pods("job-name=hero")

    finished = run.wait(lambda: count_scheduled(hero_pods(), "hero-") >= size, "every hero pod scheduled")
    wall = time.time() - t0
    run.sample()
    pods = hero_pods()
    times = [t for t in (scheduled_at(p) for p in pods) if t is not None]
    running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
    left = len([p for p in run.api.pods() if p["metadata"]["name"].startswith("sanity-")])
    return {"seconds": round(max(times) - t0, 1) if finished and times else None, "wall_seconds": round(wall, 1),
            "pods": size, "scheduled": len(times), "running": running,
            "sanity_pods_left": left, "sanity_pods_evicted": run.nodes * GPUS_PER_NODE - left,
            "checks": {"all_scheduled": finished and len(times) == size, "exact_count": len(pods) == size}}


def reclaim_latency(run: Run, scheduler: str) -> dict[str, Any]:
    """B6: as B5; then 10 one-pod one-GPU jobs in ``reclaim-single``, one after another, each timed
    from its creation to its PodScheduled; the average is the scenario's figure."""
    quota = run.nodes * GPUS_PER_NODE - 80 + 1
    sanity_fills_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent", gpu=(quota, -1, 1))],
                              sanity_gpu=(0, -1, 1))
    latencies: list[float] = []
    for i in range(10):
        name = f"latency-{i}"
        t0 = time.time()
        run.api.create(pod_object(name, "reclaim-single", scheduler=scheduler))
        seen: dict[str, float] = {}

        def scheduled(name: str = name, seen: dict[str, float] = seen) -> bool:
            response = run.api.core.read_namespaced_pod(name, namespace_for("reclaim-single"),
                                                        _preload_content=False)
            at = scheduled_at(json.loads(response.data))
            if at is not None:
                seen["wall"] = time.time()
            return at is not None

        if not run.wait(scheduled, f"{name} scheduled"):
            break
        latencies.append(seen["wall"] - t0)
    run.sample()
    return {"seconds": round(sum(latencies) / len(latencies), 2) if len(latencies) == 10 else None,
            "latencies": [round(x, 2) for x in latencies], "pods": 10, "scheduled": len(latencies),
            "checks": {"all_scheduled": len(latencies) == 10}}



SCENARIOS: dict[str, tuple[str, Callable[[Run, str], dict[str, Any]]]] = {
    "B4": ("B4 time to unschedulable (average of 10 gangs)", time_to_unschedulable),
    "B5": ("B5 reclaim for one very large job (single-GPU victims)", big_reclaim),
    "B6": ("B6 reclaim latency, single-GPU (average of 10)", reclaim_latency),
}
