"""T1–T4: the topology cluster. The nodes are laid out as KAI's tree, zone → block → rack, on the label
keys ``cloud.provider.com/topology-{zone,block,rack}``, two nodes per rack, described by the
``Topology`` (``kai.scheduler/v1alpha1``) ``e2e-topology-tree``; a distributed job with and without a
preferred rack, disaggregated inference (PodGroups with subgroups) filling the tree and then
reclaiming it, and a hero job reclaiming a whole zone.

The tree follows ``--nodes``. KAI's is 4 zones × 8 blocks × 8 racks × 2 nodes = 512 nodes; below
that, starting from 1 × 1 × 1 racks, the counts are doubled in the order zone, block, rack, zone,
block, rack, block, rack (up to 4, 8, 8) for as long as the tree stays within N nodes:

    N      16     32     64     128    256    512
    tree   2×2×2  4×2×2  4×4×2  4×4×4  4×8×4  4×8×8   (zones × blocks × racks, 2 nodes a rack)

so at N = 16 every level already has two children. N ≥ 500 (KAI's default N is 500) gives KAI's
512-node tree. The scenario makes the cluster the tree: the nodes ``play()`` made are labelled (in
parallel), those beyond the tree are deleted and those it lacks are created, then the Topology is
created; the scheduler starts only once the product's mirror has every tree node with its labels.
Each scenario's sizes follow the tree (KAI's figures at 512 nodes in brackets):

* T1: one gang Job of (tree nodes) pods × 2 GPUs [512], preferred level rack; D; all scheduled.
* T2: the same without a constraint; D; all scheduled.
* T3: ``sanity`` (GPU quota 0, over-quota weight 1, no limit) holds (tree GPUs / 32) [128] PodGroups,
  made by hand, each ``minSubGroup: 3`` and required zone, of three subgroups: ``prefill`` 2 × 8 GPUs
  (required rack), ``decode`` 4 × 4 GPUs (preferred block), ``frontend`` 2 × CPU-only; each
  subgroup's minMember is its pod count; the pods name their PodGroup (``pod-group-name``) and
  subgroup (``kai.scheduler/subgroup-name``). They fill every GPU (allocate: D). Then one more such
  PodGroup in ``topology-reclaim`` (GPU quota: half the tree's GPUs [2,048]) must reclaim its room,
  timed from its creation to its last pod scheduled. Asserted: every pod scheduled; each group's
  prefill pods in one rack, each group in one zone.
* T4: ``sanity`` (quota 0) is filled with one-GPU pods, one per GPU of the tree [4,096]; a hero gang
  Job of (GPUs of a zone / 8) [128] pods × 8 GPUs, required zone, in ``topology-reclaim``; timed from
  its submission; all hero pods scheduled, all in one zone.

Besides, each scenario checks that the product mirrored the Topology (``topology_mirrored``): a
constraint on a topology the scheduler does not know keeps its pods pending.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .harness import (
    FILLER_PRIORITY,
    GPUS_PER_NODE,
    Run,
    base_tree,
    count_scheduled,
    gang_job_object,
    mirror_counts,
    namespace_for,
    pod_object,
    queue_object,
    sanity_fills_the_cluster,
    scheduled_at,
    set_up,
    start_scheduling,
)

TOPOLOGY = "e2e-topology-tree"
ZONE, BLOCK, RACK = (f"cloud.provider.com/topology-{level}" for level in ("zone", "block", "rack"))
LEVELS = (ZONE, BLOCK, RACK)
NODES_PER_RACK = 2
FULL_SHAPE = (4, 8, 8)  # zones, blocks per zone, racks per block
KAI_DEFAULT_NODES = 500  # KAI's NODE_COUNT default; its topology tree is the full one
# The tree grows by doubling one level at a time, in this order, up to FULL_SHAPE.
_GROWTH = ((0, 2), (1, 2), (2, 2), (0, 4), (1, 4), (2, 4), (1, 8), (2, 8))
NODE_PREFIX = "kwok-node-"  # as `LocalKube.create_kwok_nodes` names them
POD_GROUP_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"


# ------------------------------------------------------------------------------ the tree

@dataclass(frozen=True)
class Tree:
    zones: int
    blocks: int  # per zone
    racks: int  # per block

    @property
    def nodes(self) -> int:
        return self.zones * self.blocks * self.racks * NODES_PER_RACK

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    @property
    def zone_gpus(self) -> int:
        return self.gpus // self.zones

    def labels(self, index: int) -> dict[str, str]:
        """The three labels of the tree's node ``index`` (0-based): racks fill blocks, blocks fill zones."""
        rack = index // NODES_PER_RACK
        zone, rest = divmod(rack, self.blocks * self.racks)
        block, in_block = divmod(rest, self.racks)
        return {ZONE: f"zone{zone + 1}", BLOCK: f"block{block + 1}", RACK: f"rack{in_block + 1}"}

    def describe(self) -> str:
        return f"{self.zones} zones × {self.blocks} blocks × {self.racks} racks × {NODES_PER_RACK} nodes"


def tree_for(nodes: int) -> Tree:
    """The largest tree of at most ``nodes`` nodes grown as the module says; KAI's full tree at N ≥ 500."""
    limit = FULL_SHAPE[0] * FULL_SHAPE[1] * FULL_SHAPE[2] * NODES_PER_RACK if nodes >= KAI_DEFAULT_NODES else nodes
    shape = [1, 1, 1]
    for level, count in _GROWTH:
        grown = list(shape)
        grown[level] = count
        if grown[0] * grown[1] * grown[2] * NODES_PER_RACK > limit:
            break
        shape = grown
    return Tree(*shape)


def topology_object() -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": TOPOLOGY},
            "spec": {"levels": [{"nodeLabel": key} for key in LEVELS]}}


def constraint(*, required: str | None = None, preferred: str | None = None) -> dict[str, str]:
    out = {"topology": TOPOLOGY}
    if required:
        out["requiredTopologyLevel"] = required
    if preferred:
        out["preferredTopologyLevel"] = preferred
    return out


def _mirrored_tree_nodes(tree: Tree) -> tuple[int, int]:
    """(mirrored nodes, of which labelled as the tree says) in the scratch database."""
    from django.db import connections

    from kaiweb.cluster.models import Node

    try:
        rows = list(Node.objects.values_list("name", "labels"))
    finally:
        connections.close_all()
    good = 0
    for name, labels in rows:
        index = _index(name)
        if index is not None and index < tree.nodes and all((labels or {}).get(k) == v
                                                           for k, v in tree.labels(index).items()):
            good += 1
    return len(rows), good


def topology_mirrored() -> bool:
    """Whether the product's mirror holds the Topology, with its three levels."""
    from django.db import connections

    from kaiweb.cluster.models import Topology

    try:
        return Topology.objects.filter(name=TOPOLOGY, levels=list(LEVELS)).exists()
    except Exception:  # noqa: BLE001 - only a check
        return False
    finally:
        connections.close_all()


def _index(node_name: str) -> int | None:
    tail = node_name.removeprefix(NODE_PREFIX)
    return int(tail) if node_name.startswith(NODE_PREFIX) and tail.isdigit() else None


def topology_cluster(run: Run) -> Tree:
    """Make the cluster the tree (label, delete, create nodes), create the Topology, and wait until
    the product has mirrored every tree node with its labels. Sets ``run.nodes`` to the tree's nodes."""
    tree = tree_for(run.nodes)
    started = time.monotonic()
    if tree.nodes > run.nodes:
        run.kube.create_kwok_nodes(tree.nodes - run.nodes, start=run.nodes, timeout=180.0)
    extra = [f"{NODE_PREFIX}{i}" for i in range(tree.nodes, run.nodes)]
    core = run.api.core

    def label(index: int) -> None:
        core.patch_node(f"{NODE_PREFIX}{index}", {"metadata": {"labels": tree.labels(index)}}, _preload_content=False)

    def delete(name: str) -> None:
        core.delete_node(name, _preload_content=False)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(label, range(tree.nodes)))
        list(pool.map(delete, extra))
    run.api.create(topology_object())
    run.notes["topology"] = {"tree": tree.describe(), "nodes": tree.nodes, "gpus": tree.gpus,
                             "nodes_created": max(0, tree.nodes - run.nodes), "nodes_deleted": len(extra)}
    run.nodes = tree.nodes
    if run.product is not None:
        def mirrored() -> bool:
            total, good = _mirrored_tree_nodes(tree)
            return total == tree.nodes and good == tree.nodes

        if not run.wait(mirrored, "the mirror has the labelled tree"):
            total, good = _mirrored_tree_nodes(tree)
            raise RuntimeError(f"set-up: the mirror holds {total} nodes, {good} of {tree.nodes} labelled as the tree")
    run.notes["topology"]["labelling_seconds"] = round(time.monotonic() - started, 1)
    return tree


# ------------------------------------------------------------------------------ placement facts

def _node_of(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def _domain(tree: Tree, node: str | None, depth: int) -> tuple[str, ...] | None:
    """The node's domain at ``depth`` (0 zone, 1 block, 2 rack) as the path of label values."""
    index = None if node is None else _index(node)
    if index is None or index >= tree.nodes:
        return None
    labels = tree.labels(index)
    return tuple(labels[k] for k in LEVELS[: depth + 1])


def _domains(tree: Tree, pods: Iterable[Mapping[str, Any]], depth: int) -> set[tuple[str, ...] | None]:
    return {_domain(tree, _node_of(p), depth) for p in pods}


def _in_one(tree: Tree, pods: list[Mapping[str, Any]], depth: int) -> bool:
    found = _domains(tree, pods, depth)
    return bool(pods) and len(found) == 1 and None not in found


def _wait_for_job_pods(run: Run, job: str, count: int) -> None:
    """Before a D timer starts: the job controller has made every pod and the pod-grouper has put
    each in a PodGroup (both keep running while the scheduler is off)."""
    def grouped() -> bool:
        pods = run.api.pods(f"job-name={job}")
        return len(pods) >= count and all(POD_GROUP_ANNOTATION in (p["metadata"].get("annotations") or {})
                                           for p in pods)

    if not run.wait(grouped, f"the {count} pods of Job {job} made and grouped"):
        raise RuntimeError(f"set-up: Job {job}'s {count} pods were not all made and grouped")


def _timed_result(pods: list[dict[str, Any]], count: int, t0: float, finished: bool) -> dict[str, Any]:
    times = [t for t in (scheduled_at(p) for p in pods) if t is not None]
    return {"seconds": round(max(times) - t0, 1) if finished and times else None, "pods": count,
            "scheduled": len(times),
            "running": sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")}


# ------------------------------------------------------------------------------ T1, T2

def distributed_job(run: Run, scheduler: str, *, preferred: bool) -> dict[str, Any]:
    """T1 (``preferred``: the Job asks for rack as its preferred level) and T2 (no constraint): one gang
    Job of (tree nodes) pods × 2 GPUs, half the tree's GPUs; D; all scheduled. Reported besides: the
    racks the pods landed on, against the fewest that hold them."""
    set_up(run, base_tree())
    tree = topology_cluster(run)
    size = tree.nodes
    job = gang_job_object("distributed", "filler", size, gpus=2, scheduler=scheduler)
    if preferred:
        job["metadata"]["annotations"].update({"kai.scheduler/topology": TOPOLOGY,
                                               "kai.scheduler/topology-preferred-placement": RACK})
    run.api.create(job)
    _wait_for_job_pods(run, "distributed", size)
    if run.product is not None:
        run.notes["mirrored_pods_at_start"] = mirror_counts().get("mirrored_pods")
    t0 = time.time()
    start_scheduling(run)

    def pods() -> list[dict[str, Any]]:
        return run.api.pods("job-name=distributed")

    finished = run.wait(lambda: count_scheduled(pods(), "distributed-") >= size, "every pod of the job scheduled")
    run.sample()
    final = pods()
    details = _timed_result(final, size, t0, finished)
    per_rack = GPUS_PER_NODE * NODES_PER_RACK // 2
    details.update({
        "racks_used": len(_domains(tree, [p for p in final if _node_of(p)], 2)),
        "racks_fewest": -(-size // per_rack),
        "topology_mirrored": topology_mirrored(),
        "checks": {"all_scheduled": finished and details["scheduled"] == size and len(final) == size,
                   "topology_mirrored": topology_mirrored()},
    })
    return details


# ------------------------------------------------------------------------------ T3

PREFILL, DECODE, FRONTEND = ("prefill", 2, 8), ("decode", 4, 4), ("frontend", 2, 0)  # (name, pods, GPUs each)
GROUP_GPUS = PREFILL[1] * PREFILL[2] + DECODE[1] * DECODE[2]  # 32
GROUP_PODS = PREFILL[1] + DECODE[1] + FRONTEND[1]  # 8


def inference_group(name: str, queue: str, scheduler: str, priority_class: str | None) -> list[dict[str, Any]]:
    """One disaggregated-inference deployment: its PodGroup (made by hand) and its 8 pods."""
    spec: dict[str, Any] = {
        "queue": queue, "minSubGroup": 3, "topologyConstraint": constraint(required=ZONE),
        "subGroups": [
            {"name": PREFILL[0], "minMember": PREFILL[1], "topologyConstraint": constraint(required=RACK)},
            {"name": DECODE[0], "minMember": DECODE[1], "topologyConstraint": constraint(preferred=BLOCK)},
            {"name": FRONTEND[0], "minMember": FRONTEND[1]},
        ]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": namespace_for(queue)}, "spec": spec}
    pods = []
    for sub, count, gpus in (PREFILL, DECODE, FRONTEND):
        for i in range(count):
            pod = pod_object(f"{name}-{sub}-{i}", queue, gpus=gpus, cpu=None if gpus else "2",
                             memory=None if gpus else "4Gi", scheduler=scheduler, priority_class=priority_class,
                             annotations={POD_GROUP_ANNOTATION: name})
            pod["metadata"]["labels"].update({SUBGROUP_LABEL: sub, "kai-scale/inference": name})
            pods.append(pod)
    return [group, *pods]


def _group_checks(tree: Tree, pods: list[dict[str, Any]]) -> dict[str, bool | int]:
    """Per inference group: its prefill pods in one rack, all its pods in one zone, its decode pods
    in one block (preferred only: counted, not asserted)."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        by_group.setdefault(p["metadata"]["labels"]["kai-scale/inference"], []).append(p)
    prefill_ok = zone_ok = decode_in_block = 0
    for members in by_group.values():
        sub = {name: [p for p in members if p["metadata"]["labels"].get(SUBGROUP_LABEL) == name]
               for name in (PREFILL[0], DECODE[0], FRONTEND[0])}
        prefill_ok += _in_one(tree, sub[PREFILL[0]], 2)
        zone_ok += _in_one(tree, members, 0)
        decode_in_block += _in_one(tree, sub[DECODE[0]], 1)
    return {"groups": len(by_group), "prefill_in_one_rack": prefill_ok, "group_in_one_zone": zone_ok,
            "decode_in_one_block": decode_in_block}


def disaggregated_inference(run: Run, scheduler: str) -> dict[str, Any]:
    """T3: allocate (D) then reclaim, as the module says."""
    quota = tree_for(run.nodes).gpus // 2
    queues = [q for q in base_tree([queue_object("topology-reclaim", "parent", gpu=(quota, -1, 1))])
              if q["metadata"]["name"] != "sanity"]
    set_up(run, [*queues, queue_object("sanity", "parent", gpu=(0, -1, 1))])
    tree = topology_cluster(run)
    groups = tree.gpus // GROUP_GPUS
    objects = [o for g in range(groups) for o in inference_group(f"inference-{g}", "sanity", scheduler,
                                                                 FILLER_PRIORITY[0])]
    created = time.monotonic()
    run.api.create_all(o for o in objects if o["kind"] == "PodGroup")  # before their pods
    run.api.create_all(o for o in objects if o["kind"] == "Pod")
    run.notes["creation_seconds"] = round(time.monotonic() - created, 1)
    count = groups * GROUP_PODS
    if run.product is not None:
        run.notes["mirrored_pods_at_start"] = mirror_counts().get("mirrored_pods")
    t0 = time.time()
    start_scheduling(run)

    def inference_pods() -> list[dict[str, Any]]:
        return run.api.pods("kai-scale/inference")

    allocated = run.wait(lambda: count_scheduled(inference_pods(), "inference-") >= count,
                         "every inference pod scheduled")
    run.sample()
    first = [p for p in inference_pods() if p["metadata"]["name"].startswith("inference-")]
    allocate = _timed_result(first, count, t0, allocated)
    allocate.update(_group_checks(tree, first))

    reclaim: dict[str, Any] = {"pods": GROUP_PODS, "scheduled": 0, "seconds": None}
    reclaimed = False
    if allocated:
        t1 = time.time()
        run.api.create_all(o for o in inference_group("reclaimer", "topology-reclaim", scheduler, None)
                           if o["kind"] == "PodGroup")
        run.api.create_all(o for o in inference_group("reclaimer", "topology-reclaim", scheduler, None)
                           if o["kind"] == "Pod")
        reclaimed = run.wait(lambda: count_scheduled(inference_pods(), "reclaimer-") >= GROUP_PODS,
                             "every reclaimer pod scheduled")
        run.sample()
        final = inference_pods()
        mine = [p for p in final if p["metadata"]["name"].startswith("reclaimer-")]
        reclaim = _timed_result(mine, GROUP_PODS, t1, reclaimed)
        reclaim.update(_group_checks(tree, mine))
        left = [p for p in final if p["metadata"]["name"].startswith("inference-")]
        reclaim["sanity_pods_left"] = len(left)
        reclaim["sanity_groups_left_whole"] = sum(
            1 for g in range(groups) if sum(1 for p in left if p["metadata"]["labels"]["kai-scale/inference"]
                                            == f"inference-{g}") == GROUP_PODS)
    mirrored = topology_mirrored()
    return {
        "seconds": allocate["seconds"], "pods": count, "scheduled": allocate["scheduled"],
        "reclaim_seconds": reclaim["seconds"], "groups": groups, "allocate": allocate, "reclaim": reclaim,
        "topology_mirrored": mirrored,
        "checks": {
            "all_scheduled": allocated and allocate["scheduled"] == count and len(first) == count,
            "prefill_in_one_rack": allocate["prefill_in_one_rack"] == groups,
            "group_in_one_zone": allocate["group_in_one_zone"] == groups,
            "reclaimer_scheduled": reclaimed and reclaim["scheduled"] == GROUP_PODS,
            "reclaimer_prefill_in_one_rack": reclaim.get("prefill_in_one_rack") == 1,
            "reclaimer_in_one_zone": reclaim.get("group_in_one_zone") == 1,
            "topology_mirrored": mirrored,
        },
    }


# ------------------------------------------------------------------------------ T4

def hero_reclaims_a_zone(run: Run, scheduler: str) -> dict[str, Any]:
    """T4: sanity (quota 0) fills the tree with one-GPU pods; a hero gang of (zone GPUs / 8) pods × 8
    GPUs, required zone, in ``topology-reclaim`` (quota half the tree's GPUs); from its submission to
    its last pod scheduled; all of it in one zone."""
    tree = topology_cluster(run)  # before the sanity fill starts the scheduler
    size = tree.zone_gpus // GPUS_PER_NODE
    sanity_fills_the_cluster(run, scheduler,
                             [queue_object("topology-reclaim", "parent", gpu=(tree.gpus // 2, -1, 1))],
                             sanity_gpu=(0, -1, 1))
    job = gang_job_object("hero", "topology-reclaim", size, scheduler=scheduler)
    job["metadata"]["annotations"].update({"kai.scheduler/topology": TOPOLOGY,
                                           "kai.scheduler/topology-required-placement": ZONE})
    t0 = time.time()
    run.api.create(job)

    def hero_pods() -> list[dict[str, Any]]:
        return run.api.pods("job-name=hero")

    finished = run.wait(lambda: count_scheduled(hero_pods(), "hero-") >= size, "every hero pod scheduled")
    wall = time.time() - t0
    run.sample()
    pods = hero_pods()
    details = _timed_result(pods, size, t0, finished)
    left = sum(1 for p in run.api.pods() if p["metadata"]["name"].startswith("sanity-"))
    zones = sorted("/".join(d) for d in _domains(tree, [p for p in pods if _node_of(p)], 0) if d)
    mirrored = topology_mirrored()
    details.update({
        "wall_seconds": round(wall, 1), "hero_zones": zones, "sanity_pods_left": left,
        "sanity_pods_evicted": tree.gpus - left, "sanity_pods_evicted_at_least": tree.zone_gpus,
        "topology_mirrored": mirrored,
        "checks": {"all_scheduled": finished and details["scheduled"] == size, "exact_count": len(pods) == size,
                   "in_one_zone": _in_one(tree, pods, 0), "topology_mirrored": mirrored},
    })
    return details


SCENARIOS: dict[str, tuple[str, Callable[[Run, str], dict[str, Any]]]] = {
    "T1": ("T1 distributed job, preferred topology (rack)",
           lambda run, scheduler: distributed_job(run, scheduler, preferred=True)),
    "T2": ("T2 distributed job, no topology", lambda run, scheduler: distributed_job(run, scheduler, preferred=False)),
    "T3": ("T3 disaggregated inference (subgroups): allocate, then reclaim", disaggregated_inference),
    "T4": ("T4 hero job reclaims a zone", hero_reclaims_a_zone),
}
