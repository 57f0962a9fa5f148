"""B4–B10 and B12: reclaim and consolidation over a cluster the ``sanity`` queue fills with
preemptible pods (B4–B6 one-GPU pods; B7–B10, as KAI's ``fillClusterWithJobs``, one-pod Jobs whose
evicted pods their Jobs replace), and B12's reclaim from elastic gangs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scheduler_core import model as m

from .harness import (
    FILLER_PRIORITY,
    GPUS_PER_NODE,
    Run,
    base_tree,
    count_scheduled,
    evictions_by_action,
    gang_job_object,
    namespace_for,
    pod_object,
    queue_object,
    sanity_fills_the_cluster,
    sanity_jobs_fill_the_cluster,
    scheduled_at,
    set_up,
    start_scheduling,
    stop_scheduling,
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
    average = sum(delays) / len(delays) if len(delays) == 10 else None
    # The goal: unschedulable within 2 cycles of the PodGroup's creation (a figure, not a check).
    cycles = None if average is None else round(average / run.cycle_seconds, 2)
    return {"seconds": None if average is None else round(average, 2),
            "per_gang_seconds": [round(d, 1) for d in delays], "pods": 100, "scheduled": gang_bound,
            "cycle_seconds": run.cycle_seconds, "cycles_to_unschedulable": cycles,
            "goal": {"cycles_at_most": 2, "met": cycles is not None and cycles <= 2},
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



# ------------------------------------------------------------------------------ B7–B10, B12

# KAI's Reclaim context: sanity GPU quota 0, over-quota weight 0, no limit (README: "as B4, sanity
# quota 0"). Its fair share is then 0 and a reclaiming queue's is its quota plus the whole surplus.
RECLAIM_SANITY_GPU = (0, -1, 0)
FIVE = 5  # KAI's ⌊min(8, 8/2 + 1)⌋: B8's GPUs per pod and B9's sanity pods deleted per node
PODS_PER_GANG = 10  # KAI's defaultPodsPerDistributedJob


def _reclaim_single_quota(run: Run) -> int:
    """B5's ``reclaim-single`` GPU quota: N·8 − 80 + 1 (not below 0)."""
    return max(0, run.nodes * GPUS_PER_NODE - 80 + 1)


def _named(pods: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["name"].startswith(prefix)]


def _bound_and_live(pod: dict[str, Any]) -> bool:
    """Scheduled and not being deleted (an evicted pod keeps PodScheduled until it is gone)."""
    return scheduled_at(pod) is not None and not pod["metadata"].get("deletionTimestamp")


def _sanity_bound(run: Run) -> int:
    return sum(1 for p in _named(run.api.pods(), "sanity-") if _bound_and_live(p))


def _podgroups(run: Run, queue: str) -> int:
    response = run.api.custom.list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", namespace_for(queue), "podgroups", _preload_content=False)
    return len(json.loads(response.data).get("items") or [])


def _scheduler_off_then_on(run: Run, objects: list[dict[str, Any]], prefix: str, count: int, *,
                           queue: str, groups: int = 0) -> tuple[float, bool]:
    """"D" after a set-up the scheduler placed: it is stopped (``stop_scheduling``), ``objects`` are
    created and their ``count`` pods (named ``prefix``…) awaited, and with ``groups`` that many
    PodGroups in ``queue``'s namespace (the watcher's pod-grouper keeps running, as KAI's does); then
    the timer starts just before the scheduler does. Returns (timer start, every pod scheduled)."""
    stop_scheduling(run)
    created = time.monotonic()
    run.api.create_all(objects)

    def all_there() -> bool:
        return len(_named(run.api.pods(), prefix)) >= count and (not groups or _podgroups(run, queue) >= groups)

    if not run.wait(all_there, f"the {count} {prefix}* pods created"):
        raise RuntimeError(f"the {count} {prefix}* pods (and {groups} PodGroups) were not all created")
    run.notes["creation_seconds"] = round(time.monotonic() - created, 1)
    t0 = time.time()
    start_scheduling(run)
    finished = run.wait(lambda: count_scheduled(run.api.pods(), prefix) >= count, f"every {prefix}* pod scheduled")
    return t0, finished


def _timed(run: Run, prefix: str, count: int, t0: float, finished: bool) -> dict[str, Any]:
    """The figures of a scenario timed to the latest PodScheduled among the ``prefix`` pods."""
    wall = time.time() - t0
    run.sample()
    pods = _named(run.api.pods(), prefix)
    times = [t for t in (scheduled_at(p) for p in pods) if t is not None]
    return {"seconds": round(max(times) - t0, 1) if finished and times else None, "wall_seconds": round(wall, 1),
            "pods": count, "scheduled": len(times), "pods_found": len(pods),
            "running": sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")}


def reclaim_many_single(run: Run, scheduler: str) -> dict[str, Any]:
    """B7: sanity (GPU quota 0, over-quota weight 0) fills the cluster with N·8 one-pod one-GPU Jobs;
    with the scheduler stopped, N·8 one-GPU pods are created in ``reclaim-single`` (B5's quota
    q = N·8 − 80 + 1); D: timed from just before the scheduler starts to the latest PodScheduled.
    What the quota allows: reclaim-single's fair share is q plus the whole surplus N·8 − q (sanity's
    over-quota weight is 0), i.e. N·8, so exactly N·8 pods are scheduled (4,000 at N = 500) and no
    sanity pod is left bound (its replacement stays pending). The evictions are recorded against the
    N·8 needed (a moved victim, which KAI's solver may choose, is one more), not asserted."""
    quota = _reclaim_single_quota(run)
    sanity = sanity_jobs_fill_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent",
                                                                        gpu=(quota, -1, 1))],
                                          sanity_gpu=RECLAIM_SANITY_GPU)
    count = run.nodes * GPUS_PER_NODE
    allowed = quota + (count - quota)  # q + the surplus × weight 1/(1 + 0): all N·8
    t0, finished = _scheduler_off_then_on(
        run, [pod_object(f"reclaim-{i}", "reclaim-single", scheduler=scheduler) for i in range(count)],
        "reclaim-", count, queue="reclaim-single")
    details = _timed(run, "reclaim-", count, t0, finished)
    left = _sanity_bound(run)
    details.update({"allowed_by_quota": allowed, "sanity_jobs": sanity, "sanity_bound_at_end": left,
                    "evictions_needed": allowed, "evictions_by_action": evictions_by_action(),
                    "checks": {"all_scheduled": finished and details["scheduled"] == allowed,
                               "exact_count": details["pods_found"] == count,
                               "sanity_all_reclaimed": left == sanity - allowed}})
    return details


def reclaim_distributed(run: Run, scheduler: str) -> dict[str, Any]:
    """B8: sanity full as in B7; with the scheduler stopped, max(1, ⌊N/10⌋) gangs of min(10, N) pods ×
    5 GPUs (KAI's ⌊min(8, 8/2 + 1)⌋; 50 gangs at N = 500) in ``reclaim-distributed`` (quota −1: all it
    asks for); D: timed to the latest PodScheduled. A node holds one such pod, so each reclaims 5 of
    its node's sanity pods. Asserted: every gang pod scheduled, and in the end exactly N·8 − 5·pods
    sanity pods bound (victims the solver moved rather than removed are placed again: their Jobs'
    replacements). The evictions are recorded against the 5·pods needed, not asserted."""
    sanity = sanity_jobs_fill_the_cluster(run, scheduler, [queue_object("reclaim-distributed", "parent")],
                                          sanity_gpu=RECLAIM_SANITY_GPU)
    gangs, size = max(1, run.nodes // PODS_PER_GANG), min(PODS_PER_GANG, run.nodes)
    count = gangs * size
    t0, finished = _scheduler_off_then_on(
        run, [gang_job_object(f"gang-{i}", "reclaim-distributed", size, gpus=FIVE, scheduler=scheduler)
              for i in range(gangs)],
        "gang-", count, queue="reclaim-distributed", groups=gangs)
    details = _timed(run, "gang-", count, t0, finished)
    left = sanity - FIVE * count
    placed_again = run.wait(lambda: _sanity_bound(run) >= left, "the moved sanity pods placed again")
    run.sample()
    details.update({"gangs": gangs, "pods_per_gang": size, "gpus_per_pod": FIVE, "sanity_jobs": sanity,
                    "sanity_bound_at_end": _sanity_bound(run), "evictions_needed": FIVE * count,
                    "evictions_by_action": evictions_by_action(),
                    "checks": {"all_scheduled": finished and details["scheduled"] == count,
                               "exact_count": details["pods_found"] == count,
                               "moved_pods_placed_again": placed_again and _sanity_bound(run) == left}})
    return details


def _delete_sanity_jobs_per_node(run: Run, per_node: int) -> int:
    """KAI's ``deleteJobsFromAllNodes``: the Jobs of up to ``per_node`` Running sanity pods on each node
    are deleted (background propagation), once every sanity pod runs (KWOK makes bound pods Running
    within a second or so); returns once their pods are gone. Returns how many."""

    def running(pod: dict[str, Any]) -> bool:
        return (pod.get("status") or {}).get("phase") == "Running"

    if not run.wait(lambda: all(running(p) for p in _named(run.api.pods(), "sanity-")), "every sanity pod Running"):
        raise RuntimeError("set-up: the sanity pods were not all Running")
    taken: dict[str, int] = {}
    doomed: list[str] = []
    for pod in sorted(_named(run.api.pods(), "sanity-"), key=lambda p: p["metadata"]["name"]):
        node = (pod.get("spec") or {}).get("nodeName")
        if not running(pod) or not node or taken.get(node, 0) >= per_node:
            continue
        taken[node] = taken.get(node, 0) + 1
        doomed.append(pod["metadata"]["labels"]["job-name"])
    namespace = namespace_for("sanity")
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda name: run.api.batch.delete_namespaced_job(
            name, namespace, propagation_policy="Background", _preload_content=False), doomed))
    gone = set(doomed)
    if not run.wait(lambda: not any(p["metadata"]["labels"].get("job-name") in gone
                                    for p in _named(run.api.pods(), "sanity-")), "the deleted sanity pods gone"):
        raise RuntimeError("set-up: the deleted sanity Jobs' pods were not all gone")
    return len(doomed)


def consolidate_large(run: Run, scheduler: str) -> dict[str, Any]:
    """B9: sanity full as in B7, then the Jobs of up to 5 Running sanity pods per node are deleted
    (5N GPUs free, 3 busy on every node). With the scheduler stopped, ⌊5N / (10 × 6)⌋ gangs of 10
    pods × 6 GPUs in ``reclaim-distributed`` (KAI's free GPUs over a gang's 60: 41 at N = 500; below
    N = 12, where not one such gang fits, a single gang of ⌊5N/6⌋ pods); D. No node has 6 free GPUs:
    each gang pod needs a sanity pod moved off its node (KAI's consolidation, which runs before
    reclaim). As KAI's B9 does, the ``default`` SchedulingShard gets ``max-consolidation-preemptees:
    N·8`` in its ``spec.args`` (KAI's default, 16 victim jobs, is too few for a gang of 10 moves chosen
    by its solver). Asserted: every gang pod scheduled; consolidation moved pods (PreemptionEvents of
    action ``consolidation``); and every moved pod placed again, i.e. in the end all the remaining sanity
    Jobs' pods (their replacements) are bound. Reclaim evictions are recorded, not forbidden."""
    sanity = sanity_jobs_fill_the_cluster(run, scheduler, [queue_object("reclaim-distributed", "parent")],
                                          sanity_gpu=RECLAIM_SANITY_GPU)
    deleted = _delete_sanity_jobs_per_node(run, FIVE)
    preemptees = run.nodes * GPUS_PER_NODE
    run.api.custom.create_cluster_custom_object("kai.scheduler", "v1", "schedulingshards", {
        "apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": "default"},
        "spec": {"args": {"max-consolidation-preemptees": str(preemptees)}}}, _preload_content=False)
    gpus = FIVE + 1
    free = run.nodes * GPUS_PER_NODE - (sanity - deleted)
    gangs, size = free // (PODS_PER_GANG * gpus), PODS_PER_GANG
    if gangs == 0:
        gangs, size = 1, free // gpus
    count = gangs * size
    t0, finished = _scheduler_off_then_on(
        run, [gang_job_object(f"gang-{i}", "reclaim-distributed", size, gpus=gpus, scheduler=scheduler)
              for i in range(gangs)],
        "gang-", count, queue="reclaim-distributed", groups=gangs)
    details = _timed(run, "gang-", count, t0, finished)
    left = sanity - deleted
    placed_again = run.wait(lambda: _sanity_bound(run) >= left, "the moved sanity pods placed again")
    run.sample()
    evictions = evictions_by_action()
    details.update({"gangs": gangs, "pods_per_gang": size, "gpus_per_pod": gpus, "sanity_jobs": sanity,
                    "sanity_jobs_deleted": deleted, "free_gpus_before": free,
                    "max_consolidation_preemptees": preemptees, "sanity_bound_at_end": _sanity_bound(run),
                    "evictions_needed": count, "evictions_by_action": evictions,
                    "checks": {"all_scheduled": finished and details["scheduled"] == count,
                               "exact_count": details["pods_found"] == count,
                               "consolidated": evictions.get(m.CONSOLIDATION, 0) > 0,
                               "moved_pods_placed_again": placed_again and _sanity_bound(run) == left}})
    return details


def big_reclaim_full_nodes(run: Run, scheduler: str) -> dict[str, Any]:
    """B10: as B5, but sanity (quota 0, weight 0) holds N one-pod Jobs of 8 GPUs (full-node victims)
    and the gang in ``reclaim-single`` (B5's quota; fair share N·8 as in B7) is N pods × 8 GPUs: it
    reclaims the whole cluster. Timed from the Job's creation to its last pod scheduled; asserted,
    exactly N hero pods, all scheduled, and no sanity pod left bound."""
    quota = _reclaim_single_quota(run)
    sanity = sanity_jobs_fill_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent",
                                                                        gpu=(quota, -1, 1))],
                                          sanity_gpu=RECLAIM_SANITY_GPU, gpus=GPUS_PER_NODE)
    size = run.nodes
    t0 = time.time()
    run.api.create(gang_job_object("hero", "reclaim-single", size, scheduler=scheduler))
    finished = run.wait(lambda: count_scheduled(run.api.pods("job-name=hero"), "hero-") >= size,
                        "every hero pod scheduled")
    details = _timed(run, "hero-", size, t0, finished)
    left = _sanity_bound(run)
    details.update({"sanity_jobs": sanity, "sanity_bound_at_end": left, "evictions_needed": sanity,
                    "evictions_by_action": evictions_by_action(),
                    "checks": {"all_scheduled": finished and details["scheduled"] == size,
                               "exact_count": details["pods_found"] == size,
                               "sanity_all_reclaimed": left == 0}})
    return details


def _elastic_victim(run: Run, name: str, queue: str, pods: int, min_member: int, scheduler: str) -> None:
    """KAI's ``createElasticPodGroupForKwok``: a PodGroup made by hand (``minMember`` below its pod
    count: elastic) and its bare 8-GPU pods, each naming it (``pod-group-name``; the pod-grouper leaves
    them to it). Bare pods, as in KAI: an evicted one is gone, not replaced and not held by a Job's
    finalizer."""
    namespace = namespace_for(queue)
    run.api.custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", namespace, "podgroups", {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/queue": queue}},
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": FILLER_PRIORITY[0]}},
        _preload_content=False)
    run.api.create_all(pod_object(f"{name}-{k}", queue, gpus=GPUS_PER_NODE, scheduler=scheduler,
                                  priority_class=FILLER_PRIORITY[0], annotations={"pod-group-name": name})
                       for k in range(pods))


def elastic_reclaim(run: Run, scheduler: str) -> dict[str, Any]:
    """B12: ``elastic-victim`` (GPU quota 0, over-quota weight 1, no limit) runs 2 elastic PodGroups of
    ⌊N/2⌋ bare pods × 8 GPUs with minMember max(1, ⌊N/4⌋) (``_elastic_victim``; 250 and 125 at
    N = 500), filling the cluster; then a gang Job of h = ⌊N/2⌋ pods × 8 GPUs in ``elastic-reclaim``
    (quota h·8 = N·4), timed from its creation to its last pod scheduled. Then, as KAI's
    ``waitForElasticVictimState`` (within the timeout): each victim keeps at least its minMember pods
    scheduled (shrunk, not evicted) and together they keep exactly min(victim pods, N − h)."""
    hero, victim_pods, minimum = run.nodes // 2, run.nodes // 2, max(1, run.nodes // 4)
    set_up(run, base_tree([queue_object("elastic-victim", "parent", gpu=(0, -1, 1)),
                           queue_object("elastic-reclaim", "parent", gpu=(hero * GPUS_PER_NODE, -1, 1))]))
    victims = [f"victim-{i}" for i in range(2)]
    for name in victims:
        _elastic_victim(run, name, "elastic-victim", victim_pods, minimum, scheduler)
    start_scheduling(run)
    if not run.wait(lambda: count_scheduled(run.api.pods(), "victim-") >= 2 * victim_pods, "the victims bound"):
        raise RuntimeError(f"set-up: the victims' {2 * victim_pods} pods were not all bound")
    run.notes["setup_seconds"] = round(time.monotonic() - run.started, 1)
    t0 = time.time()
    run.api.create(gang_job_object("hero", "elastic-reclaim", hero, scheduler=scheduler))
    finished = run.wait(lambda: count_scheduled(run.api.pods("job-name=hero"), "hero-") >= hero,
                        "every hero pod scheduled")
    details = _timed(run, "hero-", hero, t0, finished)
    expected = min(2 * victim_pods, run.nodes - hero)
    kept: dict[str, int] = {}

    def victims_settled() -> bool:
        pods = run.api.pods()
        kept.update({v: sum(1 for p in _named(pods, f"{v}-") if _bound_and_live(p)) for v in victims})
        return all(n >= minimum for n in kept.values()) and sum(kept.values()) == expected

    settled = run.wait(victims_settled, "the victims shrunk to what is left")
    run.sample()
    details.update({"victim_pods": victim_pods, "victim_min_member": minimum, "victims_kept": kept,
                    "victims_expected_total": expected, "evictions_needed": 2 * victim_pods - expected,
                    "evictions_by_action": evictions_by_action(),
                    "checks": {"all_scheduled": finished and details["scheduled"] == hero,
                               "exact_count": details["pods_found"] == hero,
                               "victims_shrunk_not_evicted": all(n >= minimum for n in kept.values()),
                               "victims_keep_the_rest": settled}})
    return details

SCENARIOS: dict[str, tuple[str, Callable[[Run, str], dict[str, Any]]]] = {
    "B4": ("B4 time to unschedulable (average of 10 gangs)", time_to_unschedulable),
    "B5": ("B5 reclaim for one very large job (single-GPU victims)", big_reclaim),
    "B6": ("B6 reclaim latency, single-GPU (average of 10)", reclaim_latency),
    "B7": ("B7 reclaim many single-GPU jobs (scheduler off during creation)", reclaim_many_single),
    "B8": ("B8 reclaim with distributed jobs (scheduler off during creation)", reclaim_distributed),
    "B9": ("B9 consolidate for many large jobs (scheduler off during creation)", consolidate_large),
    "B10": ("B10 reclaim for one very large job (full-node victims)", big_reclaim_full_nodes),
    "B12": ("B12 reclaim from elastic jobs (shrunk, not evicted)", elastic_reclaim),
}
