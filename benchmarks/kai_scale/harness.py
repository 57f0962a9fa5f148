"""The scale suite's harness: the objects it creates, the raw API calls it makes, the product's
processes, a scenario's run (invariant samples while waiting) and the suite's queue tree.

The scenario modules of this package build on it; ``benchmarks/b7_scale.py`` plays them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import urllib3  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from devkube.localkube import LocalKube  # noqa: E402

KAI_SCHEDULER = "kai-scheduler"
GPUS_PER_NODE = 8
APP_LABEL = ("app", "engine-e2e")
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
KWOK_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "type", "operator": "In", "values": ["kwok"]}]}]}}}
FILLER_PRIORITY = ("kai-scale-filler", 50)  # the suite's one preemptible priority class (value < 100)


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
        elif kind == "Topology":
            self.custom.create_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", obj,
                                                     _preload_content=False)
        elif kind == "PodGroup":  # made by hand (with subgroups): scheduling.run.ai/v2alpha2
            group, version = obj["apiVersion"].split("/")
            self.custom.create_namespaced_custom_object(group, version, meta["namespace"], "podgroups", obj,
                                                        _preload_content=False)
        else:
            raise ValueError(f"the benchmark does not create {kind}")

    def create_all(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Create every object, in parallel; returns how many."""
        items = list(objects)
        with ThreadPoolExecutor(max_workers=min(16, self.pool)) as pool:
            list(pool.map(self.create, items))
        return len(items)

    def pods(self, selector: str = f"{APP_LABEL[0]}={APP_LABEL[1]}", fields: str = "") -> list[dict[str, Any]]:
        response = self.core.list_pod_for_all_namespaces(label_selector=selector, field_selector=fields,
                                                         _preload_content=False, _request_timeout=120)
        return list(json.loads(response.data).get("items") or [])

    def unbound(self, selector: str = f"{APP_LABEL[0]}={APP_LABEL[1]}") -> list[dict[str, Any]]:
        """The selected pods no node holds yet: a light poll (only those travel), where listing every
        pod of a cluster of thousands each second would load the API server the run measures."""
        return self.pods(selector, fields="spec.nodeName=")


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

STOP_GRACE_SECONDS = 180.0


def _stop_group(process: subprocess.Popen[bytes], grace: float = STOP_GRACE_SECONDS) -> None:
    """Stop a product process as Kubernetes stops a container: SIGTERM to the main process only (a
    Celery worker then shuts down warm, letting the cycle its pool child runs end; signalling the whole
    group would kill that child mid-cycle and leave the cycle 'running'), then SIGKILL to the group
    after ``grace`` seconds (a fill cycle at 500 nodes writes back for minutes)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):  # what is left of the group (nothing after a warm shutdown)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


class Product:
    """The product's processes for one scenario: the watcher, and the scheduler (the cycles' worker, the
    what-if worker and beat)."""

    def __init__(self, env: Mapping[str, str], logs: Path) -> None:
        self.env = dict(env)
        self.logs = logs
        self.watcher: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.whatif: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "ab") as out:
            return subprocess.Popen(argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start_watcher(self) -> None:
        self.watcher = self._spawn("watcher", [sys.executable, "manage.py", "watch_cluster"])

    def start_scheduler(self) -> None:
        """The workers and beat, as the chart runs them (the cycles on "celery", the estimates on "whatif",
        each on a worker of its own); returns once the cycles' worker is ready."""
        self.worker = self._spawn("worker", [sys.executable, "-m", "celery", "-A", "kaiweb", "worker", "-l", "info",
                                             "-Q", "celery", "-n", "celery@%h", "--concurrency", "1"])
        self.whatif = self._spawn("whatif", [sys.executable, "-m", "celery", "-A", "kaiweb", "worker", "-l", "info",
                                             "-Q", "whatif", "-n", "whatif@%h", "--concurrency", "1"])
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
        for name, process in (("watcher", self.watcher), ("worker", self.worker), ("whatif", self.whatif),
                              ("beat", self.beat)):
            if process is not None and process.poll() is not None:
                tail = "\n".join(self.log(name).splitlines()[-15:])
                raise RuntimeError(f"the product's {name} exited with {process.returncode}:\n{tail}")

    def stop_beat(self) -> None:
        if self.beat is not None:
            _stop_group(self.beat)

    def stop_scheduler(self) -> None:
        """What `start_scheduler` started: beat first, so that no cycle is queued behind the one the
        worker finishes (warm shutdown), then both workers."""
        for process in (self.beat, self.worker, self.whatif):
            if process is not None:
                _stop_group(process)
        self.beat = self.worker = self.whatif = None

    def stop(self) -> None:
        self.stop_scheduler()
        if self.watcher is not None:
            _stop_group(self.watcher)


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
    cycle_seconds: float = 5.0  # the product's cycle period in this run (KAI_CYCLE_SECONDS)

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
            try:
                if done():
                    return True
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                # A loaded API server may drop one poll (its own request timeout): the next one asks again.
                self.notes["poll_errors"] = self.notes.get("poll_errors", 0) + 1
                self.notes["last_poll_error"] = f"{type(exc).__name__}: {exc}"[:200]
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


def count_scheduled(pods: Iterable[Mapping[str, Any]], prefix: str) -> int:
    return sum(1 for p in pods if p["metadata"]["name"].startswith(prefix) and scheduled_at(p) is not None)


def sanity_fills_the_cluster(run: Run, scheduler: str, extra_queues: list[dict[str, Any]],
                              sanity_gpu: tuple[float, float, float]) -> int:
    """The reclaim scenarios' set-up: ``sanity`` (with ``sanity_gpu`` quota) holds one preemptible
    one-GPU pod per GPU of the cluster, all bound before the scenario starts; returns how many."""
    queues = [q for q in base_tree(extra_queues) if q["metadata"]["name"] != "sanity"]
    set_up(run, [*queues, queue_object("sanity", "parent", gpu=sanity_gpu)])
    count = run.nodes * GPUS_PER_NODE
    run.api.create_all(pod_object(f"sanity-{i}", "sanity", scheduler=scheduler, priority_class=FILLER_PRIORITY[0])
                       for i in range(count))
    start_scheduling(run)
    if not run.wait(lambda: count_scheduled(run.api.pods(), "sanity-") >= count, "the sanity fill"):
        raise RuntimeError(f"set-up: the sanity queue's {count} pods were not all bound")
    run.notes["setup_seconds"] = round(time.monotonic() - run.started, 1)
    return count


def transition_time(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None



def mirror_counts() -> dict[str, int]:
    from django.db import connections

    from kaiweb.workloads.models import Pod, Workload

    try:
        return {"mirrored_pods": Pod.objects.count(), "mirrored_workloads": Workload.objects.count()}
    except Exception:  # noqa: BLE001 - only a diagnostic
        return {}
    finally:
        connections.close_all()


# ------------------------------------------------------------------------------ scheduler off, fillers as Jobs

# A Job's backoff limit no eviction reaches: an evicted pod counts as a failure of its Job, and a Job
# past its limit fails and deletes its other pods; with this, the Job replaces the pod instead.
EVICTIONS_TOLERATED = 1_000_000


def filler_job_object(name: str, queue: str, pods: int = 1, *, gpus: int = 1, min_member: int | None = None,
                      scheduler: str = KAI_SCHEDULER) -> dict[str, Any]:
    """A preemptible Job as KAI's fillers are (``createJobObjectForKwok``): the fillers' priority class,
    and an evicted pod replaced by its Job (a pending pod) as in KAI's suite. An evicted pod is removed
    once the Job controller has counted it and dropped its tracking finalizer (after its failure
    back-off when several of a Job's pods fail at once: seconds, not part of the scheduler's work)."""
    job = gang_job_object(name, queue, pods, gpus=gpus, min_member=min_member, scheduler=scheduler)
    job["spec"]["backoffLimit"] = EVICTIONS_TOLERATED
    job["spec"]["template"]["spec"]["priorityClassName"] = FILLER_PRIORITY[0]
    return job


def sanity_jobs_fill_the_cluster(run: Run, scheduler: str, extra_queues: list[dict[str, Any]],
                                 sanity_gpu: tuple[float, float, float], *, gpus: int = 1) -> int:
    """KAI's ``fillClusterWithJobs`` into ``sanity`` (``sanity_gpu`` quota): one-pod filler Jobs of
    ``gpus`` GPUs each (``filler_job_object``), N·8/gpus of them, all bound before the scenario goes
    on; returns how many. Pods are named ``sanity-<i>-<suffix>``."""
    queues = [q for q in base_tree(extra_queues) if q["metadata"]["name"] != "sanity"]
    set_up(run, [*queues, queue_object("sanity", "parent", gpu=sanity_gpu)])
    count = run.nodes * GPUS_PER_NODE // gpus
    run.api.create_all(filler_job_object(f"sanity-{i}", "sanity", gpus=gpus, scheduler=scheduler)
                       for i in range(count))
    start_scheduling(run)
    if not run.wait(lambda: count_scheduled(run.api.pods(), "sanity-") >= count, "the sanity fill"):
        raise RuntimeError(f"set-up: the sanity queue's {count} pods were not all bound")
    run.notes["setup_seconds"] = round(time.monotonic() - run.started, 1)
    return count


def no_cycle_running(quiet: float = 3.0, timeout: float = 120.0) -> None:
    """Return once no cycle of the scratch database has been running for ``quiet`` seconds."""
    from django.db import connections

    from kaiweb.scheduling.choices import CycleStatus
    from kaiweb.scheduling.models import SchedulingCycle

    deadline, quiet_since = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            if SchedulingCycle.objects.filter(status=CycleStatus.RUNNING).exists():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                return
            time.sleep(0.5)
    finally:
        connections.close_all()


def stop_scheduling(run: Run) -> None:
    """KAI's ``DisableScheduler`` for a "D" scenario whose set-up the scheduler placed: beat stops, the
    cycle running is let end, then the workers stop; the watcher (with the pod-grouper) keeps running.
    ``start_scheduling`` starts the workers and beat again, logging afresh (the earlier logs are kept as
    ``worker.<n>.log``, ``whatif.<n>.log`` and ``beat.<n>.log``, so the restart's readiness is read from
    its own log)."""
    product = run.product
    if product is None:
        raise RuntimeError("stop_scheduling: only the product's scheduler is stopped and started again")
    product.stop_beat()
    no_cycle_running()
    product.stop_scheduler()
    turn = 1
    while (product.logs / f"worker.{turn}.log").exists():
        turn += 1
    for name in ("worker", "whatif", "beat"):
        with contextlib.suppress(OSError):
            (product.logs / f"{name}.log").rename(product.logs / f"{name}.{turn}.log")


def evictions_by_action() -> dict[str, int]:
    """The scratch database's preemption events (evictions carried out), counted by the action that
    decided them, in the engine's names (``scheduler_core.model.EVICTING_ACTIONS``)."""
    from django.db import connections
    from django.db.models import Count

    from kaiweb.scheduling.models import PreemptionEvent

    try:
        return {row["action"]: row["n"] for row in
                PreemptionEvent.objects.values("action").annotate(n=Count("id")).order_by("action")}
    finally:
        connections.close_all()
