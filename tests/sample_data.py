"""A deterministic, realistic dataset for the pages: views tests, browser tests and render timing.

It writes what the scheduling cycle would have recorded (queue tree, nodes with GPUs, workloads
with pods placed on devices, cycles with phase timings, decisions, preemptions, why-pending
reasons, per-cycle queue status and usage buckets) straight into the database with bulk inserts,
so a page can be looked at with 16 nodes or with 500 nodes and 4000 workloads without running the
engine. Same arguments, same rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduler_core import model as m
from scheduler_core import reasons as reason_codes

# The demo tree (as deploy/examples/queues.yaml) plus a few more teams, so a bigger
# dataset also has a deeper, wider tree. (name, parent, priority, gpu quota, gpu limit, weight)
TREE: list[tuple[str, str | None, int, float, float, float]] = [
    ("department-a", None, 100, 48, -1, 1),
    ("department-b", None, 100, 48, -1, 1),
    ("team-inference", "department-a", 200, 16, 32, 1),
    ("team-research-a", "department-a", 100, 24, -1, 2),
    ("team-vision", "department-a", 100, 8, -1, 1),
    ("team-training", "department-b", 100, 32, -1, 2),
    ("team-research-b", "department-b", 50, 8, 24, 1),
    ("team-nlp", "department-b", 100, 8, -1, 1),
]

# The engine's reason codes (scheduler_core.reasons) and message shapes.
PENDING_REASONS = [
    (reason_codes.QUEUE_OVER_LIMIT, "queue {queue} would exceed its GPU limit of {limit:g} GPUs: {alloc:g} GPUs allocated + "
     "{req:g} GPUs requested",
     lambda q, alloc, req: {"queue": q["name"], "resource": "gpu", "limit": q["limit"], "allocated": alloc,
                            "requested": req}),
    (reason_codes.NO_NODE_FITS, "gang of {n} × {g:g} GPUs: only {free} node(s) have {g:g} GPUs free",
     lambda q, alloc, req: {"pods": 4, "gpus_per_pod": 8, "nodes_with_room": 1}),
    (reason_codes.RECLAIM_PREFIX + reason_codes.RECLAIMER_OVER_FAIR_SHARE, "reclaim: queue {queue} would hold {over:g} GPUs (allocated {alloc:g} GPUs + "
     "job {req:g} GPUs) > its fair share {fair:g} GPUs",
     lambda q, alloc, req: {"queue": q["name"], "resource": "gpu", "allocated": alloc, "request": req,
                            "fair_share": q["fair"]}),
    (reason_codes.NON_PREEMPTIBLE_OVER_QUOTA, "non-preemptible job would take queue {queue} over its GPU quota of {quota:g} "
     "GPUs: {alloc:g} GPUs already used by non-preemptible jobs + {req:g} GPUs requested",
     lambda q, alloc, req: {"queue": q["name"], "resource": "gpu", "quota": q["quota"],
                            "allocated_non_preemptible": alloc, "requested": req}),
]


@dataclass
class Built:
    """What was created, for tests to pick objects from."""

    cluster: Any
    shard: Any
    queues: dict[str, Any]
    nodes: int
    workloads: int
    cycles: int
    preemptions: int


def _leaf_names(tree: list[tuple[str, str | None, int, float, float, float]]) -> list[str]:
    parents = {p for _, p, *_ in tree if p}
    return [n for n, *_ in tree if n not in parents]


@transaction.atomic
def build_dataset(
    nodes: int = 16, gpus_per_node: int = 8, workloads: int = 120, cycles: int = 48, seed: int = 7,
    now: datetime | None = None, extra_departments: int = 0, tag: str = "",
) -> Built:
    """Create the dataset. `extra_departments` adds departments of three teams each (wider tree);
    `tag` prefixes node and workload names so a second call adds rows instead of clashing."""
    from kaiweb.cluster.models import Cluster, GpuDevice, Node, SchedulingShard
    from kaiweb.queues.models import PriorityClass, Queue
    from kaiweb.scheduling.models import (
        Decision,
        PendingReason,
        PreemptionEvent,
        QueueStatus,
        SchedulingCycle,
    )
    from kaiweb.usage.models import UsageBucket
    from kaiweb.workloads.models import Pod, Workload

    rng = random.Random(seed)
    now = now or timezone.now().replace(microsecond=0)
    cluster, _ = Cluster.objects.get_or_create(name="default", defaults={"backend": "simulated"})
    shard, _ = SchedulingShard.objects.get_or_create(cluster=cluster, name="default",
                                                     defaults={"partition_label_value": ""})
    shard.k_value, shard.usage_half_life_seconds, shard.usage_window_seconds = 1.0, 4 * 3600, 24 * 3600
    shard.save()
    SchedulingShard.objects.get_or_create(cluster=cluster, name="pool-b", defaults={"partition_label_value": "pool-b"})
    for name, (value, preemptible) in {"train": (50, True), "build-preemptible": (75, True),
                                       "build": (100, False), "inference": (125, False)}.items():
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value, "preemptible": preemptible})
    classes = {pc.name: pc for pc in PriorityClass.objects.all()}

    # ------------------------------------------------------------ queues
    tree = list(TREE)
    for d in range(extra_departments):
        dep = f"department-x{d + 1}"
        tree.append((dep, None, 100, 16, -1, 1))
        for t in range(3):
            tree.append((f"team-x{d + 1}-{t + 1}", dep, rng.choice([50, 100, 100, 200]), 4, -1, 1))
    queues: dict[str, Any] = {}
    for name, parent, prio, quota, limit, weight in tree:
        q, _ = Queue.objects.update_or_create(
            name=name,
            defaults={
                "parent": queues.get(parent) if parent else None, "priority": prio,
                "display_name": name.replace("-", " ").title(),
                "gpu_quota": quota, "gpu_limit": limit, "gpu_over_quota_weight": weight,
                "cpu_quota": quota * 16000, "cpu_limit": -1, "memory_quota": quota * 128000, "memory_limit": -1,
            },
        )
        queues[name] = q
    leaves = [queues[n] for n in _leaf_names(tree)]

    # ------------------------------------------------------------ nodes and devices
    products = [("NVIDIA-H100-80GB-HBM3", 81559), ("NVIDIA-A100-SXM4-40GB", 40960)]
    node_rows = []
    for i in range(nodes):
        product, mem = products[0] if i % 4 else products[1]
        labels = {"nvidia.com/gpu.product": product, "topology.kubernetes.io/zone": f"zone-{'ab'[i % 2]}",
                  "rack": f"r{i // 8 + 1}"}
        if i % 5 == 4:
            # A second node pool, scheduled by its own shard; the default shard sees unlabelled nodes.
            labels["kai.scheduler/node-pool"] = "pool-b"
        node_rows.append(Node(
            cluster=cluster, name=f"{tag}gpu-node-{i + 1:03d}", labels=labels,
            allocatable_cpu=128000, allocatable_memory=1024 * 10**9, allocatable_gpu=gpus_per_node,
            gpu_product=product, gpu_memory_mib=mem, topology={"zone": f"zone-{'ab'[i % 2]}", "rack": f"r{i // 8 + 1}"},
            ready=(i % 37 != 36), unschedulable=(i % 53 == 52), observed_at=now,
        ))
    Node.objects.bulk_create(node_rows, ignore_conflicts=True)
    node_objs = list(Node.objects.filter(cluster=cluster).order_by("name"))
    GpuDevice.objects.bulk_create(
        [GpuDevice(node=n, index=g, uuid=f"GPU-{n.name}-{g}", product=n.gpu_product, memory_mib=n.gpu_memory_mib,
                   healthy=not (g == 7 and n.name.endswith("9")))
         for n in node_objs for g in range(int(n.allocatable_gpu))],
        ignore_conflicts=True,
    )

    # ------------------------------------------------------------ workloads and pods
    free = {n.pk: int(n.allocatable_gpu) for n in node_objs if n.ready and not n.unschedulable}
    node_ids = list(free)
    wl_rows: list[Workload] = []
    plans: list[tuple[int, int, float, str, Any]] = []  # (pods, gpus per pod, fraction, state, node)
    for i in range(workloads):
        q = leaves[i % len(leaves)] if i % 7 else rng.choice(leaves)
        kind = rng.random()
        if kind < 0.15:
            n_pods, per_pod, frac, pc = 1, 0, rng.choice([0.25, 0.5, 0.5, 0.75]), "inference"
        elif kind < 0.55:
            n_pods, per_pod, frac, pc = 1, rng.choice([1, 1, 2, 4]), 0.0, "train"
        else:
            n_pods, per_pod, frac, pc = rng.choice([2, 4]), rng.choice([1, 2, 4, 8]), 0.0, rng.choice(["train", "build"])
        roll = rng.random()
        state = "running" if roll < 0.55 else "pending" if roll < 0.8 else "completed" if roll < 0.92 else "evicted"
        submitted = now - timedelta(minutes=rng.randint(1, 60 * 30))
        wl_rows.append(Workload(
            cluster=cluster, namespace=q.name.replace("team-", "ns-"), name=f"{tag}{pc}-job-{i + 1:05d}", uid=f"uid-{tag}{i + 1}",
            queue=q, priority_class=classes[pc], min_member=n_pods, state=state, submitted_at=submitted,
            last_start_at=submitted + timedelta(minutes=2) if state in ("running", "completed") else None,
            finished_at=submitted + timedelta(hours=1) if state == "completed" else None,
            labels={"app": pc},
        ))
        plans.append((n_pods, per_pod, frac, state, q))
    Workload.objects.bulk_create(wl_rows)
    wl_objs = list(Workload.objects.filter(cluster=cluster).order_by("id"))

    pod_rows: list[Pod] = []
    frac_groups: dict[int, tuple[str, float]] = {}  # node id -> (group, used)
    ni = 0
    for wl, (n_pods, per_pod, frac, state, _q) in zip(wl_objs[-workloads:], plans):
        for p in range(n_pods):
            node = None
            group = ""
            pod_state = "Pending"
            if state == "running" and node_ids:
                need = per_pod if not frac else 0
                for _ in range(len(node_ids)):
                    cand = node_ids[ni % len(node_ids)]
                    if frac:
                        g, used = frac_groups.get(cand, ("", 1.0))
                        if used + frac <= 1.0:
                            frac_groups[cand] = (g, used + frac)
                            node, group = cand, g
                            break
                        if free[cand] >= 1:
                            free[cand] -= 1
                            g = f"{cand}-shared-{free[cand]}"
                            frac_groups[cand] = (g, frac)
                            node, group = cand, g
                            break
                    elif free[cand] >= need:
                        free[cand] -= need
                        node = cand
                        break
                    ni += 1
                pod_state = "Running" if node else "Pending"
            elif state == "completed":
                pod_state = "Succeeded"
            pod_rows.append(Pod(
                workload=wl, name=f"{wl.name}-{p}", gpu=per_pod if not frac else 0,
                gpu_fraction=frac or None, cpu=4000 * max(per_pod, 1), memory=32 * 10**9 * max(per_pod, 1),
                state=pod_state, node_id=node, gpu_groups=[group] if group else [],
                started_at=wl.last_start_at if node else None,
            ))
    Pod.objects.bulk_create(pod_rows, batch_size=2000)

    # ------------------------------------------------------------ cycles, decisions, preemptions, status
    cycle_rows = []
    for c in range(cycles):
        started = now - timedelta(minutes=30 * (cycles - c))
        snap, alloc, recl, pre, apply_ = (rng.uniform(0.004, 0.02), rng.uniform(0.01, 0.09),
                                          rng.uniform(0.0, 0.04), rng.uniform(0.0, 0.02), rng.uniform(0.002, 0.01))
        total = snap + alloc + recl + pre + apply_
        cycle_rows.append(SchedulingCycle(
            shard=shard, trigger="beat", started_at=started, finished_at=started + timedelta(seconds=total),
            status="failed" if c % 41 == 40 else "succeeded",
            phase_durations={"snapshot": snap, "allocate": alloc, "reclaim": recl, "preempt": pre, "apply": apply_},
            duration_seconds=total, jobs_considered=rng.randint(5, 60), binds=rng.randint(0, 12),
            pipelined=rng.randint(0, 2), evictions=rng.randint(0, 3), pending=rng.randint(0, 25),
            error="database unavailable during record" if c % 41 == 40 else "",
        ))
    last_id = SchedulingCycle.objects.order_by("-id").values_list("id", flat=True).first() or 0
    SchedulingCycle.objects.bulk_create(cycle_rows)
    cycle_objs = list(SchedulingCycle.objects.filter(shard=shard, id__gt=last_id).order_by("started_at", "id"))

    new_wls = wl_objs[-workloads:] if workloads else []
    running = [w for w in new_wls if w.state == "running"]
    pending = [w for w in new_wls if w.state == "pending"]
    decisions, events = [], []
    actions = m.EVICTING_ACTIONS
    for k, cyc in enumerate(cycle_objs):
        for j in range(min(cyc.binds, 3)):
            if running:
                w = running[(k * 3 + j) % len(running)]
                decisions.append(Decision(cycle=cyc, kind="bind", status="applied", workload=w, workload_ref=str(w),
                                          pod_name=f"{w.name}-0", reason="allocated", message="bound to a node",
                                          idempotency_key=f"sample-{tag}{seed}-{cyc.pk}-b{j}"))
        if k % 3 == 0 and running and len(wl_objs) > 1:
            victim = running[k % len(running)]
            preemptor = (pending or running)[(k * 7) % len(pending or running)]
            action = actions[k % len(actions)]
            figures_v = {"allocated": {"gpu": 20}, "fair_share": {"gpu": 14}, "quota": {"gpu": victim.queue.gpu_quota}}
            figures_p = {"allocated": {"gpu": 4}, "fair_share": {"gpu": 10}, "quota": {"gpu": preemptor.queue.gpu_quota}}
            events.append(PreemptionEvent(
                cycle=cyc, at=cyc.started_at, action=action,
                preemptor=None if action == m.STALE_GANG_EVICTION else preemptor, victim=victim,
                preemptor_ref="" if action == m.STALE_GANG_EVICTION else str(preemptor), victim_ref=str(victim),
                preemptor_queue=None if action == m.STALE_GANG_EVICTION else preemptor.queue, victim_queue=victim.queue,
                reason={m.RECLAIM: reason_codes.RECLAIM, m.PREEMPT: reason_codes.PREEMPT, m.CONSOLIDATION: reason_codes.CONSOLIDATION,
                        m.STALE_GANG_EVICTION: reason_codes.STALE_GANG}[action],
                message={m.RECLAIM: f"queue {victim.queue} is over its fair share (20 > 14 GPUs); "
                                    f"{preemptor.queue} is below its share (4 < 10)",
                         m.PREEMPT: f"{preemptor} (priority {preemptor.priority_class.value}) preempts a lower "
                                    f"priority workload in {victim.queue}",
                         m.CONSOLIDATION: "moved to free a whole node for a gang",
                         m.STALE_GANG_EVICTION: "gang below its minimum member count for longer than the grace period"}[action],
                preemptor_queue_figures={} if action == m.STALE_GANG_EVICTION else figures_p, victim_queue_figures=figures_v,
            ))
    Decision.objects.bulk_create(decisions)
    PreemptionEvent.objects.bulk_create(events)

    # Per-queue status for every cycle: fair share near quota, allocation drifting around it.
    # In name order, and by position rather than by row id: the same seed gives the same figures
    # whatever ids the database hands out.
    all_queues = list(Queue.objects.filter(name__in=[t[0] for t in tree]).order_by("name"))
    status_rows = []
    for k, cyc in enumerate(cycle_objs):
        for position, q in enumerate(all_queues):
            base = max(q.gpu_quota, 1)
            fair = base * (1 + 0.25 * ((k + position) % 4) / 3)
            alloc = max(0.0, fair * (0.7 + 0.5 * rng.random()))
            req = alloc + rng.randint(0, 8)
            status_rows.append(QueueStatus(
                queue=q, cycle=cyc, recorded_at=cyc.started_at,
                allocated={"gpu": round(alloc, 2), "cpu": round(alloc * 8000), "memory": round(alloc * 64000)},
                allocated_non_preemptible={"gpu": round(alloc / 4, 2), "cpu": 0, "memory": 0},
                requested={"gpu": round(req, 2), "cpu": round(req * 8000), "memory": round(req * 64000)},
                fair_share={"gpu": round(fair, 2), "cpu": round(fair * 16000), "memory": round(fair * 128000)},
                pending={"gpu": round(req - alloc, 2), "cpu": 0, "memory": 0},
                pending_workloads=rng.randint(0, 6), running_workloads=rng.randint(0, 12),
            ))
    # A cycle counts a queue's whole subtree: a parent's workloads are its leaves' (the draws above
    # are kept, so the rest of the data is what the seed always gave).
    kids: dict[int, list[int]] = {}
    for q in all_queues:
        if q.parent_id is not None:
            kids.setdefault(q.parent_id, []).append(q.pk)
    per_cycle = len(all_queues)
    for start in range(0, len(status_rows), per_cycle or 1):
        rows = {r.queue.pk: r for r in status_rows[start:start + per_cycle]}

        def subtree(pk: int, rows: dict[int, QueueStatus] = rows) -> tuple[int, int]:
            if pk not in kids:
                return rows[pk].pending_workloads, rows[pk].running_workloads
            counts = [subtree(child) for child in kids[pk] if child in rows]
            rows[pk].pending_workloads = sum(c[0] for c in counts)
            rows[pk].running_workloads = sum(c[1] for c in counts)
            return rows[pk].pending_workloads, rows[pk].running_workloads

        for q in all_queues:
            if q.parent_id is None or q.parent_id not in rows:
                subtree(q.pk)
    QueueStatus.objects.bulk_create(status_rows, batch_size=2000)

    last = cycle_objs[-1] if cycle_objs else None
    reasons = []
    for i, w in enumerate(pending):
        code, template, details = PENDING_REASONS[i % len(PENDING_REASONS)]
        q = {"name": w.queue.name, "limit": w.queue.gpu_limit if w.queue.gpu_limit >= 0 else 32, "fair": 12.0,
             "quota": w.queue.gpu_quota}
        msg = template.format(queue=w.queue.name, n=4, g=8, free=1, alloc=16, req=8, over=24, **q)
        if last is not None:
            reasons.append(PendingReason(workload=w, cycle=last, recorded_at=last.started_at, reason=code,
                                         message=msg, details=details(q, 16, 8), is_current=True))
            if i % 2 == 0 and len(cycle_objs) > 1:
                reasons.append(PendingReason(workload=w, cycle=cycle_objs[-2], recorded_at=cycle_objs[-2].started_at,
                                             reason=reason_codes.NO_NODE_FITS, message="1 pod(s) asking 8 GPUs each: no node has 8 free GPUs",
                                             details={}, is_current=False))
    PendingReason.objects.bulk_create(reasons, batch_size=2000)

    # Hourly GPU usage buckets over the last two days for every leaf queue.
    start = (now - timedelta(hours=48)).replace(minute=0, second=0)
    UsageBucket.objects.bulk_create([
        UsageBucket(queue=q, resource=res, start=start + timedelta(hours=h), width_seconds=3600,
                    value=max(0.0, (q.gpu_quota or 2) * (0.6 + 0.6 * rng.random())) * 3600 * (16000 if res == "cpu" else 1))
        for q in leaves for h in range(48) for res in ("gpu", "cpu")
    ], ignore_conflicts=True, batch_size=2000)

    return Built(cluster=cluster, shard=shard, queues=queues, nodes=len(node_objs), workloads=len(wl_objs),
                 cycles=len(cycle_objs), preemptions=len(events))


def query_counts_before_and_after_more_data(client: Any, url: str, **more: Any) -> tuple[int, int]:
    """The queries of one GET of ``url`` before and after ``build_dataset(**more)`` adds data
    (tagged "more-"); a first GET, not counted, warms the session and the user's role cache."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)
    with CaptureQueriesContext(connection) as small:
        client.get(url)
    build_dataset(tag="more-", **more)
    with CaptureQueriesContext(connection) as large:
        client.get(url)
    return len(small.captured_queries), len(large.captured_queries)
