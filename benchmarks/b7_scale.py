"""B7 — KAI's scale suite on KWOK nodes, through the product as its chart runs it: one JSON object.

The scenarios are those of ``../shared/corpus/kai-scale/README.md`` (KAI's ``test/e2e/scale``,
restated), played at any ``--nodes N``. For each scenario:

* the cluster: a fresh `LocalKube` (real etcd + kube-apiserver + controller-manager) with KWOK and N
  fake GPU nodes (8 ``nvidia.com/gpu``, 32 CPU, 256Gi, 110 pods; ``deploy/kube/kwok-stages.yaml``
  makes bound pods Running);
* the product, as separate processes on a scratch Postgres database (``kaiweb_b7_<pid>``, copied from a
  migrated template, dropped at the end) and Redis: ``manage.py watch_cluster`` all along, and the
  scheduler, i.e. a Celery worker (``-Q celery,whatif --concurrency 1``) and beat, with
  ``KAI_CLUSTER_BACKEND=kubernetes`` and ``KUBECONFIG`` pointing at the LocalKube;
* the queues (Queue CRDs), namespaces and pods as the scenario says. "D" scenarios create them with
  the scheduler stopped and start the timer just before starting it; the timer ends at the latest
  ``PodScheduled`` transition among the counted pods.

The invariants are checked every ``--sample-seconds`` while waiting and once at the end with
``kaiweb.cluster.invariants.check_cluster`` (node over allocatable, a shared GPU over 1.0, a pod
bound twice, a gang below minMember), and every ``SchedulingCycle`` row must have ended
``succeeded``. A scenario passes when its own assertions hold and nothing was violated.

``--peer`` also plays B1 with ``schedulerName: default-scheduler`` on kube-scheduler (same Kubernetes
version, same machine, a fresh LocalKube) and adds it to the results as ``B1/kube-scheduler``.

Scenarios so far: B1, B2, B3 (fills), B4 (time to unschedulable), B5 (one very large reclaim), B6
(reclaim latency). T1–T4, B7–B14 are not written yet.

    python benchmarks/b7_scale.py --nodes 20 --scenarios B1,B2,B3,B4,B5 --json
    python benchmarks/b7_scale.py --nodes 500 --scenarios B1 --peer

Needs ``make kube`` (kube-apiserver, etcd, controller-manager, kwok; kube-scheduler for ``--peer``),
DATABASE_URL on Postgres and Redis (REDIS_URL; database 13 of that server is used and flushed, so
run one at a time per Redis server).
Exits 0 when every scenario passed, 1 when one failed, 2 when it could not run at all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from b5_control_plane import drop_database, prepare_database, recreate_database, redis_reachable  # noqa: E402

from kaiweb.cluster.localkube import (  # noqa: E402
    NO_KWOK,
    NO_SCHEDULER,
    LocalKube,
    LocalKubeError,
    find_binaries,
    find_tool,
)

CRDS = ROOT / "deploy" / "kubernetes" / "crds.yaml"
# One pair per run, so two runs on one Postgres server do not drop each other's (both are dropped at the end).
SCRATCH_DB, TEMPLATE_DB = f"kaiweb_b7_{os.getpid()}", f"kaiweb_b7_{os.getpid()}_template"
# The Redis database the product's broker uses here (flushed): one run at a time per database.
BROKER_DB = int(os.environ.get("KAI_B7_BROKER_DB", "13"))
KAI_SCHEDULER = "kai-scheduler"
GPUS_PER_NODE = 8
APP_LABEL = ("app", "engine-e2e")
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
KWOK_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "type", "operator": "In", "values": ["kwok"]}]}]}}}
FILLER_PRIORITY = ("kai-scale-filler", 50)  # the suite's one preemptible priority class (value < 100)
MAX_VIOLATIONS_LISTED = 20


# ------------------------------------------------------------------------------ objects

def queue_object(name: str, parent: str | None = None, *, gpu: tuple[float, float, float] = (-1, -1, 1),
                 priority: int | None = None) -> dict[str, Any]:
    """A Queue CRD; ``gpu`` is (quota, limit, over-quota weight), CPU and memory unlimited."""
    quota, limit, weight = gpu
    spec: dict[str, Any] = {"resources": {
        "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": weight},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def namespace_for(queue: str) -> str:
    return f"kai-{queue}"


def pod_object(name: str, queue: str, *, gpus: float = 1, cpu: str | None = None, memory: str | None = None,
               scheduler: str = KAI_SCHEDULER, priority_class: str | None = None,
               annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One pod as the suite makes it: ``sleep infinity``, limits only, never restarted, grace 0,
    tolerating the KWOK taint and requiring a KWOK node."""
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(int(gpus))
    if cpu:
        limits["cpu"] = cpu
    if memory:
        limits["memory"] = memory
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "tolerations": [KWOK_TOLERATION], "affinity": KWOK_AFFINITY,
        "containers": [{"name": "main", "image": "ubuntu", "command": ["sleep", "infinity"],
                        "resources": {"limits": limits}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace_for(queue), "annotations": dict(annotations or {}),
                         "labels": {APP_LABEL[0]: APP_LABEL[1], "kai.scheduler/queue": queue}},
            "spec": spec}


def gang_job_object(name: str, queue: str, pods: int, *, gpus: int = 8, min_member: int | None = None,
                    scheduler: str = KAI_SCHEDULER) -> dict[str, Any]:
    """A batch Job of ``pods`` pods (parallelism = completions) whose PodGroup needs ``min_member``."""
    template = pod_object("unused", queue, gpus=gpus, scheduler=scheduler)
    template["metadata"].pop("name")
    template["metadata"].pop("namespace")
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace_for(queue),
                         "labels": {"kai.scheduler/queue": queue},
                         "annotations": {"kai.scheduler/batch-min-member": str(min_member or pods)}},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"metadata": template["metadata"], "spec": template["spec"]}}}


class Api:
    """The few raw calls the benchmark makes: JSON in, JSON out, no model classes (they take seconds
    per thousand objects), a connection pool wide enough for parallel creation."""

    def __init__(self, kube: LocalKube, pool: int = 32) -> None:
        from kubernetes import client

        config = kube.configuration()
        config.connection_pool_maxsize = pool
        self.api_client = client.ApiClient(config)
        self.core = client.CoreV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.scheduling = client.SchedulingV1Api(self.api_client)
        self.pool = pool

    def close(self) -> None:
        self.api_client.close()

    def create(self, obj: Mapping[str, Any]) -> None:
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "Pod":
            self.core.create_namespaced_pod(meta["namespace"], obj, _preload_content=False)
        elif kind == "Job":
            self.batch.create_namespaced_job(meta["namespace"], obj, _preload_content=False)
        elif kind == "Namespace":
            self.core.create_namespace(obj, _preload_content=False)
        elif kind == "Queue":
            self.custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", obj, _preload_content=False)
        elif kind == "PriorityClass":
            self.scheduling.create_priority_class(obj, _preload_content=False)
        else:
            raise ValueError(f"the benchmark does not create {kind}")

    def create_all(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Create every object, in parallel; returns how many."""
        items = list(objects)
        with ThreadPoolExecutor(max_workers=min(16, self.pool)) as pool:
            list(pool.map(self.create, items))
        return len(items)

    def pods(self, selector: str = f"{APP_LABEL[0]}={APP_LABEL[1]}") -> list[dict[str, Any]]:
        response = self.core.list_pod_for_all_namespaces(label_selector=selector, _preload_content=False,
                                                         _request_timeout=120)
        return list(json.loads(response.data).get("items") or [])


def scheduled_at(pod: Mapping[str, Any]) -> float | None:
    """The epoch of the pod's ``PodScheduled=True`` transition, or None when it is not scheduled."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else time.time()
    return None


# ------------------------------------------------------------------------------ invariants

def check_invariants(api_client: Any) -> list[str]:
    """Every invariant the cluster breaks now (`kaiweb.cluster.invariants.check_cluster`), as sentences."""
    from kaiweb.cluster.invariants import check_cluster

    return [str(v) for v in check_cluster(api_client)]


# ------------------------------------------------------------------------------ the product

def _stop_group(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


class Product:
    """The product's processes for one scenario: the watcher, and the scheduler (worker + beat)."""

    def __init__(self, env: Mapping[str, str], logs: Path) -> None:
        self.env = dict(env)
        self.logs = logs
        self.watcher: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "ab") as out:
            return subprocess.Popen(argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start_watcher(self) -> None:
        self.watcher = self._spawn("watcher", [sys.executable, "manage.py", "watch_cluster"])

    def start_scheduler(self) -> None:
        """Worker and beat, as the chart runs them; returns once the worker is ready."""
        self.worker = self._spawn("worker", [sys.executable, "-m", "celery", "-A", "kaiweb", "worker", "-l", "info",
                                             "-Q", "celery,whatif", "--concurrency", "1"])
        self.beat = self._spawn("beat", [sys.executable, "-m", "celery", "-A", "kaiweb", "beat", "-l", "info",
                                         "-s", str(self.logs / "beat-schedule")])
        deadline = time.monotonic() + 90
        while " ready." not in self.log("worker"):
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not start; see {self.logs / 'worker.log'}")
            time.sleep(0.1)

    def log(self, name: str) -> str:
        try:
            return (self.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def check_alive(self) -> None:
        for name, process in (("watcher", self.watcher), ("worker", self.worker), ("beat", self.beat)):
            if process is not None and process.poll() is not None:
                tail = "\n".join(self.log(name).splitlines()[-15:])
                raise RuntimeError(f"the product's {name} exited with {process.returncode}:\n{tail}")

    def stop_beat(self) -> None:
        if self.beat is not None:
            _stop_group(self.beat)

    def stop(self) -> None:
        # Beat first, so that no cycle is queued behind the one the worker finishes (warm shutdown).
        for process in (self.beat, self.worker, self.watcher):
            if process is not None:
                _stop_group(process)


# ------------------------------------------------------------------------------ a scenario run

@dataclass
class Run:
    """What a scenario needs: the cluster, the product, the invariant samples."""

    name: str
    nodes: int
    kube: LocalKube
    api: Api
    product: Product | None
    sample_seconds: float
    timeout: float
    violations: dict[str, int] = field(default_factory=dict)
    checker_errors: list[str] = field(default_factory=list)
    samples: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    first_seen: dict[str, float] = field(default_factory=dict)
    evidence: Path | None = None

    def sample(self) -> None:
        self.samples += 1
        try:
            found = check_invariants(self.api.api_client)
        except Exception as exc:  # noqa: BLE001 - a checker failure is recorded, not fatal
            self.checker_errors.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        for violation in found:
            if violation not in self.violations:
                self.first_seen[violation] = round(time.monotonic() - self.started, 1)
                if self.evidence is not None:
                    self._keep_evidence(violation)
            self.violations[violation] = self.violations.get(violation, 0) + 1

    def _keep_evidence(self, violation: str) -> None:
        """With --keep-logs: the pods of the node a new violation names, as the API server has them."""
        assert self.evidence is not None
        words = violation.split()
        node = words[words.index("node") + 1] if "node" in words[:-1] else None
        if node is None:
            return
        with contextlib.suppress(Exception):
            response = self.api.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                                 _preload_content=False)
            pods = [{"name": f"{p['metadata']['namespace']}/{p['metadata']['name']}",
                     "phase": (p.get("status") or {}).get("phase"),
                     "deletionTimestamp": p["metadata"].get("deletionTimestamp"),
                     "creationTimestamp": p["metadata"].get("creationTimestamp"),
                     "scheduled_at": next((c.get("lastTransitionTime") for c in (p.get("status") or {}).get("conditions") or []
                                           if c.get("type") == "PodScheduled"), None),
                     "limits": [c.get("resources", {}).get("limits") for c in p["spec"].get("containers") or []]}
                    for p in json.loads(response.data).get("items") or []]
            self.evidence.mkdir(parents=True, exist_ok=True)
            target = self.evidence / f"violation-{len(self.first_seen)}-{node}.json"
            target.write_text(json.dumps({"violation": violation, "seconds": self.first_seen[violation],
                                          "pods": pods}, indent=1))

    def wait(self, done: Callable[[], bool], what: str) -> bool:
        """Call ``done`` until it holds, sampling the invariants every ``sample_seconds``; False on timeout."""
        deadline = time.monotonic() + self.timeout
        next_sample = time.monotonic()
        while True:
            if self.product is not None:
                self.product.check_alive()
            if done():
                return True
            if time.monotonic() >= next_sample:
                self.sample()
                next_sample = time.monotonic() + self.sample_seconds
            if time.monotonic() > deadline:
                self.notes.setdefault("timed_out", []).append(what)
                return False
            time.sleep(max(0.5, min(2.0, self.sample_seconds / 2)))


def base_tree(extra: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The suite's queues: root ``parent`` with ``filler``, ``sanity`` and ``no-quota`` (GPU 0/0/0)."""
    return [queue_object("parent"), queue_object("filler", "parent"), queue_object("sanity", "parent"),
            queue_object("no-quota", "parent", gpu=(0, 0, 0)), *extra]


def set_up(run: Run, queues: list[dict[str, Any]]) -> None:
    """Queues, one namespace per leaf queue (labelled with it), and the fillers' priority class."""
    parents = {q["spec"].get("parentQueue") for q in queues}
    leaves = [q["metadata"]["name"] for q in queues if q["metadata"]["name"] not in parents]
    run.api.create_all(queues)
    run.api.create_all({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace_for(q), "labels": {"kai.scheduler/queue": q}}}
                       for q in leaves)
    name, value = FILLER_PRIORITY
    run.api.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value, "preemptionPolicy": "PreemptLowerPriority",
                    "description": "kai-scale fillers (preemptible)"})


def start_scheduling(run: Run) -> None:
    if run.product is not None:
        run.product.start_scheduler()
    else:
        run.kube.start_scheduler()


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
            run.notes["mirrored_pods_at_start"] = _mirror_counts().get("mirrored_pods")
        t0 = time.time()
        start_scheduling(run)
    state: dict[str, list[dict[str, Any]]] = {}

    def all_scheduled() -> bool:
        state["pods"] = run.api.pods()
        return sum(1 for p in state["pods"] if p["metadata"]["name"].startswith("fill-")
                   and scheduled_at(p) is not None) >= count

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


def _count_scheduled(pods: Iterable[Mapping[str, Any]], prefix: str) -> int:
    return sum(1 for p in pods if p["metadata"]["name"].startswith(prefix) and scheduled_at(p) is not None)


def _sanity_fills_the_cluster(run: Run, scheduler: str, extra_queues: list[dict[str, Any]],
                              sanity_gpu: tuple[float, float, float]) -> int:
    """The reclaim scenarios' set-up: ``sanity`` (with ``sanity_gpu`` quota) holds one preemptible
    one-GPU pod per GPU of the cluster, all bound before the scenario starts; returns how many."""
    queues = [q for q in base_tree(extra_queues) if q["metadata"]["name"] != "sanity"]
    set_up(run, [*queues, queue_object("sanity", "parent", gpu=sanity_gpu)])
    count = run.nodes * GPUS_PER_NODE
    run.api.create_all(pod_object(f"sanity-{i}", "sanity", scheduler=scheduler, priority_class=FILLER_PRIORITY[0])
                       for i in range(count))
    start_scheduling(run)
    if not run.wait(lambda: _count_scheduled(run.api.pods(), "sanity-") >= count, "the sanity fill"):
        raise RuntimeError(f"set-up: the sanity queue's {count} pods were not all bound")
    run.notes["setup_seconds"] = round(time.monotonic() - run.started, 1)
    return count


def _transition(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def time_to_unschedulable(run: Run, scheduler: str) -> dict[str, Any]:
    """B4: sanity holds the whole cluster with quota N·8−80+1 and over-quota weight 0, so at most 79
    GPUs can be reclaimed; 10 gangs of 10 pods × 8 GPUs in ``reclaim-single``, one after another,
    can never fit. Per gang: its PodGroup's ``UnschedulableOnNodePool`` condition time minus the
    PodGroup's creation; the average is the figure. No gang pod may be bound, no sanity pod evicted."""
    count = _sanity_fills_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent")],
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
                        created = _transition(group["metadata"].get("creationTimestamp"))
                        at = _transition(condition.get("lastTransitionTime"))
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
    _sanity_fills_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent", gpu=(quota, -1, 1))],
                              sanity_gpu=(0, -1, 1))
    size = max(1, run.nodes // 2)
    t0 = time.time()
    run.api.create(gang_job_object("hero", "reclaim-single", size, scheduler=scheduler))

    def hero_pods() -> list[dict[str, Any]]:
        return run.api.pods("job-name=hero")

    finished = run.wait(lambda: _count_scheduled(hero_pods(), "hero-") >= size, "every hero pod scheduled")
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
    _sanity_fills_the_cluster(run, scheduler, [queue_object("reclaim-single", "parent", gpu=(quota, -1, 1))],
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
    "B1": ("B1 fill with single-GPU jobs, scheduler off during creation",
           lambda run, scheduler: fill(run, scheduler=scheduler)),
    "B2": ("B2 fill with single-GPU jobs, scheduler running during creation",
           lambda run, scheduler: fill(run, scheduler=scheduler, scheduler_during_creation=True)),
    "B3": ("B3 fill with a pending background",
           lambda run, scheduler: fill(run, scheduler=scheduler, background=max(1, run.nodes * GPUS_PER_NODE // 10))),
    "B4": ("B4 time to unschedulable (average of 10 gangs)", time_to_unschedulable),
    "B5": ("B5 reclaim for one very large job (single-GPU victims)", big_reclaim),
    "B6": ("B6 reclaim latency, single-GPU (average of 10)", reclaim_latency),
}


# ------------------------------------------------------------------------------ the whole run

@dataclass
class Settings:
    nodes: int
    sample_seconds: float
    timeout: float
    cycle_seconds: float | None
    work: Path
    broker: str
    keep_logs: bool


def _product_env(settings: Settings, kube: LocalKube, database_url: str, logs: Path) -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=database_url, REDIS_URL=settings.broker, CELERY_BROKER_URL=settings.broker,
               KAI_CLUSTER_BACKEND="kubernetes", KUBECONFIG=str(kube.kubeconfig), KAI_KUBERNETES_HOST="",
               KAI_VAR_DIR=str(logs / "var"), DJANGO_SETTINGS_MODULE="kaiweb.settings", DJANGO_DEBUG="false",
               DJANGO_SECRET_KEY="b7-benchmark-only", DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
               PYTHONUNBUFFERED="1")
    if settings.cycle_seconds:
        env["KAI_CYCLE_SECONDS"] = str(settings.cycle_seconds)
    return env


CYCLE_END_SECONDS = 120.0


def _let_cycles_end() -> None:
    """Wait (at most CYCLE_END_SECONDS) until no cycle of the scratch database is running."""
    from django.db import connections

    from kaiweb.scheduling.choices import CycleStatus
    from kaiweb.scheduling.models import SchedulingCycle

    deadline = time.monotonic() + CYCLE_END_SECONDS
    quiet_since = None  # a task the worker had already taken may still start a cycle: wait for quiet
    try:
        while time.monotonic() < deadline:
            if SchedulingCycle.objects.filter(status=CycleStatus.RUNNING).exists():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= 3.0:
                return
            time.sleep(0.5)
    finally:
        connections.close_all()


def _cycles_report() -> tuple[dict[str, Any], list[str]]:
    """The scratch database's cycles: counts, binds, and every one that did not end `succeeded`."""
    from django.db import connections

    from kaiweb.scheduling.choices import CycleStatus
    from kaiweb.scheduling.models import SchedulingCycle

    # A cycle still running when the pods are all scheduled (it writes status back after its binds)
    # is given time to end before it is judged.
    deadline = time.monotonic() + CYCLE_END_SECONDS
    try:
        while True:
            rows = list(SchedulingCycle.objects.order_by("pk").values(
                "pk", "status", "binds", "evictions", "error", "duration_seconds", "jobs_considered", "pipelined",
                "pending"))
            if all(r["status"] != CycleStatus.RUNNING for r in rows) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        connections.close_all()
    bad = [f"cycle {r['pk']} ended {r['status']}: {(r['error'] or '').strip()[:200]}"
           for r in rows if r["status"] != CycleStatus.SUCCEEDED]
    durations = sorted(r["duration_seconds"] or 0.0 for r in rows)
    return {"cycles": len(rows), "binds": sum(r["binds"] for r in rows),
            "evictions": sum(r["evictions"] for r in rows),
            "cycle_seconds_max": round(durations[-1], 2) if durations else None,
            "binds_per_cycle_max": max((r["binds"] for r in rows), default=0),
            "last_cycles": _last_cycles(rows)}, bad


def _unscheduled_sample(kube: LocalKube, limit: int = 3) -> list[str]:
    """A few pods left unbound at the end, with what the scheduler said on them (PodScheduled's message)."""
    api = Api(kube, pool=2)
    try:
        out = []
        for pod in api.pods():
            if (pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"].startswith("background-"):
                continue
            said = [f"{c.get('reason')}: {c.get('message')}" for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"]
            out.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: {'; '.join(said) or 'no condition'}"[:400])
            if len(out) >= limit:
                break
        return out
    finally:
        api.close()


def _last_cycles(rows: list[dict[str, Any]], limit: int = 4) -> list[str]:
    return [f"cycle {r['pk']} {r['status']}: considered {r['jobs_considered']}, binds {r['binds']}, "
            f"pipelined {r['pipelined']}, evictions {r['evictions']}, pending {r['pending']}" for r in rows[-limit:]]


def _mirror_counts() -> dict[str, int]:
    from django.db import connections

    from kaiweb.workloads.models import Pod, Workload

    try:
        return {"mirrored_pods": Pod.objects.count(), "mirrored_workloads": Workload.objects.count()}
    except Exception:  # noqa: BLE001 - only a diagnostic
        return {}
    finally:
        connections.close_all()


def play(settings: Settings, key: str, *, peer: bool, kube: LocalKube) -> dict[str, Any]:
    """One scenario on `kube` (reset to empty first); returns its result object."""
    title, body = SCENARIOS[key]
    test_name = f"{key}/kube-scheduler" if peer else key
    logs = settings.work / test_name.replace("/", "-")
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    kube.reset()
    kube.install_crds(CRDS)
    kube.create_kwok_nodes(settings.nodes, timeout=max(180.0, settings.nodes * 0.5))
    nodes_seconds = time.monotonic() - started
    api = Api(kube)
    product = None
    if not peer:
        database_url = recreate_database(SCRATCH_DB, TEMPLATE_DB)
        _flush_broker(settings.broker)
        product = Product(_product_env(settings, kube, database_url, logs), logs)
        product.start_watcher()
    run = Run(test_name, settings.nodes, kube, api, product, settings.sample_seconds, settings.timeout,
              evidence=logs if settings.keep_logs else None)
    error = None
    details: dict[str, Any] = {}
    try:
        details = body(run, "default-scheduler" if peer else KAI_SCHEDULER)
    except Exception as exc:  # noqa: BLE001 - one scenario failing does not end the run
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if product is not None:
            # A cycle writes status back after its binds: no new one is dispatched, and the one
            # running is let end before the worker stops, so no cycle is cut short.
            product.stop_beat()
            _flush_broker(settings.broker)
            _let_cycles_end()
            product.stop()
        api.close()
    with contextlib.suppress(Exception):  # diagnostics only
        details["unscheduled_sample"] = _unscheduled_sample(kube)
    bad_cycles: list[str] = []
    if not peer:
        cycles, bad_cycles = _cycles_report()
        details.update(cycles)
        details.update(_mirror_counts())
    # Each with how many samples saw it and when first (seconds into the scenario, set-up included).
    violations = [f"{v} (in {n} of {run.samples} samples, first at {run.first_seen[v]}s)"
                  for v, n in sorted(run.violations.items())] + bad_cycles
    details.update({
        "nodes": settings.nodes, "gpus": settings.nodes * GPUS_PER_NODE,
        "scheduler": "kube-scheduler" if peer else "kaiweb (watch_cluster + celery worker + beat)",
        "invariant_violations": len(violations),
        "violations": violations[:MAX_VIOLATIONS_LISTED],
        "invariant_samples": run.samples,
        "nodes_ready_seconds": round(nodes_seconds, 1), **run.notes,
    })
    details.setdefault("seconds", None)
    details.setdefault("pods", 0)
    if run.checker_errors:
        details["checker_errors"] = run.checker_errors[:5]
    if error:
        details["error"] = error
    if not settings.keep_logs:
        details["logs"] = None
    else:
        details["logs"] = str(logs)
    checks = details.get("checks") or {}
    passed = error is None and not violations and bool(checks) and all(checks.values())
    details["description"] = title
    return {"test_name": test_name, "status": "passed" if passed else "failed", "details": details}


def _flush_broker(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def _broker_url() -> str:
    base = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    return urlunparse(urlparse(base)._replace(path=f"/{BROKER_DB}"))


@contextlib.contextmanager
def _scratch_databases(work: Path, keep: bool) -> Iterator[None]:
    """The migrated template every scenario's database is copied from; both dropped at the end,
    but with ``keep`` (``--keep-logs``) the last scenario's database stays for a post-mortem."""
    prepare_database(None, work, name=TEMPLATE_DB)
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        for name in (TEMPLATE_DB,) if keep else (SCRATCH_DB, TEMPLATE_DB):
            with contextlib.suppress(Exception):
                drop_database(name)
        if keep:
            print(f"b7: the last scenario's database is kept as {SCRATCH_DB}", file=sys.stderr)


def _print_table(out: dict[str, Any]) -> None:
    print(f"B7 on {out['nodes']} KWOK nodes ({out['nodes'] * GPUS_PER_NODE} GPUs)")
    for result in out["results"]:
        d = result["details"]
        seconds = "-" if d.get("seconds") is None else f"{d['seconds']:.1f}s"
        print(f"  {result['test_name']:<18} {result['status']:<7} {seconds:>8}  pods {d.get('scheduled', '?')}/"
              f"{d.get('pods')}  violations {d['invariant_violations']}"
              + (f"  cycles {d['cycles']} (max {d.get('binds_per_cycle_max')} binds)" if "cycles" in d else "")
              + (f"  error: {d['error']}" if d.get("error") else ""))
        for violation in d.get("violations") or []:
            print(f"      ! {violation}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500, help="KWOK nodes, 8 GPUs each (KAI's default: 500)")
    parser.add_argument("--scenarios", default="B1", help=f"comma-separated, of {','.join(SCENARIOS)}")
    parser.add_argument("--json", action="store_true", help="print one JSON object (else a table)")
    parser.add_argument("--peer", action="store_true",
                        help="also B1 on kube-scheduler (schedulerName: default-scheduler), on a fresh cluster")
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="invariant check period while waiting")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a scenario may wait for its pods")
    parser.add_argument("--cycle-seconds", type=float, default=None,
                        help="KAI_CYCLE_SECONDS for the product (default: the product's own default)")
    parser.add_argument("--keep-logs", metavar="DIR", default=None,
                        help="keep every process's log under DIR (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    keys = [k.strip().upper() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown or not keys:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")

    problem = _preflight(args.peer)
    if problem:
        print(json.dumps({"benchmark": "B7", "error": problem}) if args.json else f"b7: {problem}",
              file=sys.stdout if args.json else sys.stderr)
        return 2
    bin_dir = find_binaries()
    assert bin_dir is not None

    with contextlib.ExitStack() as stack:
        if args.keep_logs:
            work = Path(args.keep_logs).resolve()
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kaiweb-b7-")))
        settings = Settings(args.nodes, args.sample_seconds, args.timeout, args.cycle_seconds, work,
                            _broker_url(), bool(args.keep_logs))
        stack.enter_context(_scratch_databases(work, bool(args.keep_logs)))
        # This process reads the scratch database (the cycles) with the product's own models.
        os.environ.update(DATABASE_URL=urlunparse(urlparse(os.environ["DATABASE_URL"])._replace(path=f"/{SCRATCH_DB}")),
                          DJANGO_SETTINGS_MODULE="kaiweb.settings", KAI_VAR_DIR=str(work / "var"))
        import django

        django.setup()
        results = []
        kube = stack.enter_context(LocalKube(bin_dir, kwok=True, workdir=work / "kube"))
        for key in keys:
            results.append(play(settings, key, peer=False, kube=kube))
        kube.stop()
        if args.peer:
            with LocalKube(bin_dir, kwok=True, workdir=work / "kube-peer") as peer_kube:
                results.append(play(settings, "B1", peer=True, kube=peer_kube))
        out = {"benchmark": "B7", "nodes": args.nodes, "gpus": args.nodes * GPUS_PER_NODE,
               "kubernetes": kube.version, "results": results}
        if args.json:
            print(json.dumps(out))
        else:
            _print_table(out)
    return 0 if all(r["status"] == "passed" for r in results) else 1


def _preflight(peer: bool) -> str | None:
    bin_dir = find_binaries()
    if bin_dir is None:
        return "no kube-apiserver/etcd binaries: run `make kube`"
    if find_tool("kwok", bin_dir) is None:
        return NO_KWOK
    if peer and find_tool("kube-scheduler", bin_dir) is None:
        return NO_SCHEDULER
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return "DATABASE_URL must point at Postgres (the product's processes share the scratch database)"
    if not redis_reachable(_broker_url()):
        return f"Redis is not reachable at {_broker_url()} (REDIS_URL's server, database {BROKER_DB})"
    return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LocalKubeError as exc:
        print(f"b7: the local cluster failed: {exc}", file=sys.stderr)
        sys.exit(2)
