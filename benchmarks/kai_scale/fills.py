"""B1–B3: the cluster filled with one-GPU pods (scheduler off during creation, on, and over a
never-schedulable background)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .harness import (
    GPUS_PER_NODE,
    Run,
    base_tree,
    mirror_counts,
    pod_object,
    scheduled_at,
    set_up,
    start_scheduling,
)


def fill(run: Run, *, scheduler: str, queue: str = "filler", background: int = 0,
         scheduler_during_creation: bool = False) -> dict[str, Any]:
    """B1 (scheduler off during creation), B2 (on) and B3 (with ``background`` never-schedulable pods
    in ``no-quota``): N·8 one-GPU pods; the timer ends at the latest PodScheduled among them."""
    set_up(run, base_tree())
    count = run.nodes * GPUS_PER_NODE
    if background:
        run.api.create_all(pod_object(f"background-{i}", "no-quota", scheduler=scheduler) for i in range(background))
    pods = [pod_object(f"fill-{i}", queue, scheduler=scheduler) for i in range(count)]
    t0 = 0.0
    if scheduler_during_creation:
        t0 = time.time()
        start_scheduling(run)
        run.api.create_all(pods)
    else:
        created = time.monotonic()
        run.api.create_all(pods)
        run.notes["creation_seconds"] = round(time.monotonic() - created, 1)
        if run.product is not None:  # how far the watcher had got when the scheduler starts
            run.notes["mirrored_pods_at_start"] = mirror_counts().get("mirrored_pods")
        t0 = time.time()
        start_scheduling(run)

    def all_scheduled() -> bool:
        return not any(p["metadata"]["name"].startswith("fill-") for p in run.api.unbound())

    finished = run.wait(all_scheduled, "every fill pod scheduled")
    wall = time.time() - t0
    run.sample()
    final = run.api.pods()
    filled = [p for p in final if p["metadata"]["name"].startswith("fill-")]
    times = [t for t in (scheduled_at(p) for p in filled) if t is not None]
    scheduled_background = sum(1 for p in final if p["metadata"]["name"].startswith("background-")
                               and (p.get("spec") or {}).get("nodeName"))
    checks = {"all_scheduled": finished and len(times) == count and len(filled) == count}
    if background:
        checks["background_pending"] = scheduled_background == 0
    details: dict[str, Any] = {
        "seconds": round(max(times) - t0, 1) if finished and times else None,
        "wall_seconds": round(wall, 1), "pods": count, "scheduled": len(times),
        "running": sum(1 for p in filled if (p.get("status") or {}).get("phase") == "Running"),
        "checks": checks,
    }
    if background:
        details["background_pods"] = background
        details["background_scheduled"] = scheduled_background
    return details



SCENARIOS: dict[str, tuple[str, Callable[[Run, str], dict[str, Any]]]] = {
    "B1": ("B1 fill with single-GPU jobs, scheduler off during creation",
           lambda run, scheduler: fill(run, scheduler=scheduler)),
    "B2": ("B2 fill with single-GPU jobs, scheduler running during creation",
           lambda run, scheduler: fill(run, scheduler=scheduler, scheduler_during_creation=True)),
    "B3": ("B3 fill with a pending background",
           lambda run, scheduler: fill(run, scheduler=scheduler, background=max(1, run.nodes * GPUS_PER_NODE // 10))),
}
