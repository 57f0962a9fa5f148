"""The pod-grouper at work on a cluster: every pod of our scheduler gets its owner's PodGroup.

The package's other modules decide, from a pod and its owners, what PodGroup the pod belongs to
(pure, `kaiweb.cluster.podgrouper.group_pod`). This module does the cluster's part, as KAI's
pod-grouper controller does: it reads the pods and their owners through the gateway, creates or updates
each PodGroup (recomputed on every pass, so a later pod of the same owner updates minMember and
subgroups), and marks each pod with the ``pod-group-name`` annotation and its subgroup label.

It runs in two places:

* `group_pods`: one pass over the cluster's pods, in the cycle's observe step when no watcher runs
  (before the mirror reads the cluster, so a pod is scheduled in the cycle that first sees it). Owners
  and namespaces are read once per pass, and the PodGroups are listed once.
* `LiveGrouper`: ``watch_cluster``'s, fed pod by pod from the Pod watch. The watch thread only hands
  the pod over (`LiveGrouper.submit`); a few worker threads do the rest, so no API call is made inside
  the watcher's callback and the mirror sees the pod at once. No PodGroup is listed: the PodGroups come
  from the PodGroup watch (`LiveGrouper.observe`) and from what the grouper wrote itself; a PodGroup
  that is not there is read with one GET until the PodGroup watch has listed, when a create finds one
  there after all, and when a pod names it (one made by hand may be newer than its event). A namespace's labels and a pod's owners are reused for ``cache_seconds``
  (``KAI_GROUPER_CACHE_SECONDS``, 5 s; at most `CACHE_LIMIT` objects): a queue label changed on a
  namespace, or an owner that grew, is seen by the pods that arrive after that. Pods of one owner go to
  one worker, in the order they came.

A pod whose owner chain cannot be read, or whose queue is nowhere to be found, is reported (once per
pass, as a `Problem`) and left alone: the mirror then reports it as unreadable, with the field.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from django.conf import settings

from kaiweb.cluster import podgrouper
from kaiweb.cluster.backends.kubernetes.parsing import pod_group_carries
from kaiweb.cluster.backends.types import POD_GROUP_ANNOTATION
from kaiweb.cluster.errors import ClusterError, ClusterRejected
from kaiweb.cluster.podgrouper.model import PODGROUP_API_VERSION, PODGROUP_KIND

log = logging.getLogger(__name__)

# At most this many owners (and as many namespaces) are remembered by the live grouper.
CACHE_LIMIT = 10_000
# Pods one worker of the live grouper takes at once: their PodGroups are compared and written together.
BATCH = 64

Key = tuple[str, str]
K = TypeVar("K")
V = TypeVar("V")


@dataclass
class GroupingReport:
    pods: int = 0
    grouped: int = 0
    pod_groups_written: int = 0
    pods_marked: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"pods": self.pods, "grouped": self.grouped, "pod_groups_written": self.pod_groups_written,
                "pods_marked": self.pods_marked, "skipped": self.skipped, "problems": self.problems[:20]}


def _pods(gateway: Any, namespace: str, labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
    """A namespace's pods with these labels (a staged owner's siblings); none when they cannot be read."""
    try:
        return list(gateway.list_pods_raw(namespace, labels))
    except ClusterError as exc:
        log.warning("pod-grouper: %s", exc)
        return []


class _CachedLookup:
    """Owner look-ups for one pass: each object is read once however many pods it owns."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.objects: dict[tuple[str, str, str, str], Mapping[str, Any] | None] = {}
        self.namespaces: dict[str, Mapping[str, str]] = {}

    def __call__(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        key = (api_version, kind, namespace, name)
        if key not in self.objects:
            try:
                self.objects[key] = self.gateway.get_object(api_version, kind, namespace, name)
            except ClusterError as exc:
                log.warning("pod-grouper: %s", exc)
                self.objects[key] = None
        return self.objects[key]

    def pods(self, namespace: str, labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        return _pods(self.gateway, namespace, labels)

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        if namespace not in self.namespaces:
            try:
                self.namespaces[namespace] = self.gateway.namespace_labels(namespace)
            except ClusterError as exc:
                log.warning("pod-grouper: %s", exc)
                self.namespaces[namespace] = {}
        return self.namespaces[namespace]


def _needs_marking(pod: Mapping[str, Any], grouping: podgrouper.Grouping) -> bool:
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return (any(annotations.get(k) != v for k, v in grouping.pod_annotations.items())
            or any(labels.get(k) != v for k, v in grouping.pod_labels.items()))


def _existing_pod_groups(gateway: Any) -> dict[tuple[str, str], Mapping[str, Any]]:
    try:
        raws = gateway.list_pod_groups_raw()
    except ClusterError as exc:
        log.warning("pod-grouper: %s", exc)
        return {}
    return {((r.get("metadata") or {}).get("namespace", ""), (r.get("metadata") or {}).get("name", "")): r
            for r in raws if isinstance(r, Mapping)}


def _same(current: Mapping[str, Any] | None, manifest: Mapping[str, Any]) -> bool:
    """Whether the PodGroup in the cluster already says what the grouper wants (`pod_group_carries`)."""
    return pod_group_carries(current, manifest)


def _pod_key(pod: Mapping[str, Any]) -> Key:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace", "") or ""), str(meta.get("name", "") or ""))


def _plan_pods(gateway: Any, pods: list[Mapping[str, Any]], lookup: Any, report: GroupingReport
               ) -> tuple[dict[Key, dict[str, Any]], list[tuple[Mapping[str, Any], podgrouper.Grouping]],
                          dict[Key, list[Mapping[str, Any]]]]:
    """Each pod's grouping: the PodGroups wanted, the pods to mark, and which pods want each PodGroup."""
    wanted: dict[Key, dict[str, Any]] = {}
    marks: list[tuple[Mapping[str, Any], podgrouper.Grouping]] = []
    members: dict[Key, list[Mapping[str, Any]]] = {}
    for pod in sorted(pods, key=_pod_key):
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        outcome = podgrouper.group_pod(pod, lookup, scheduler_name=gateway.scheduler_name,
                                       default_queue=getattr(settings, "KAI_DEFAULT_QUEUE", "") or None,
                                       namespace_labels=lookup.namespace_labels, list_pods=lookup.pods)
        if isinstance(outcome, podgrouper.Skipped):
            report.skipped += 1
            continue
        if isinstance(outcome, podgrouper.Problem):
            meta = pod.get("metadata") or {}
            report.problems.append(f"Pod {meta.get('namespace')}/{meta.get('name')}: {outcome.message}")
            continue
        report.grouped += 1
        pg_meta = outcome.podgroup["metadata"]
        key = (pg_meta["namespace"], pg_meta["name"])
        wanted[key] = outcome.podgroup
        members.setdefault(key, []).append(pod)
        if _needs_marking(pod, outcome):
            marks.append((pod, outcome))
    return wanted, marks, members


def _mark(gateway: Any, marks: list[tuple[Mapping[str, Any], podgrouper.Grouping]], report: GroupingReport) -> None:
    for pod, grouping in marks:
        meta = pod.get("metadata") or {}
        try:
            if gateway.label_pod(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""),
                                 labels=grouping.pod_labels, annotations=grouping.pod_annotations):
                report.pods_marked += 1
        except ClusterError as exc:
            report.problems.append(f"Pod {meta.get('namespace')}/{meta.get('name')}: {exc}")


def group_pods(gateway: Any, pods: list[Mapping[str, Any]] | None = None) -> GroupingReport:
    """One pass of the pod-grouper over the cluster's pods of our scheduler, or over ``pods`` only."""
    report = GroupingReport()
    lookup = _CachedLookup(gateway)
    if pods is None:
        pods = gateway.list_scheduler_pods_raw()
    report.pods = len(pods)
    wanted, marks, _ = _plan_pods(gateway, pods, lookup, report)
    existing = _existing_pod_groups(gateway) if wanted else {}
    for (namespace, name), manifest in sorted(wanted.items()):
        if _same(existing.get((namespace, name)), manifest):
            continue
        try:
            gateway.upsert_pod_group(manifest)
            report.pod_groups_written += 1
        except ClusterError as exc:
            report.problems.append(f"PodGroup {namespace}/{name}: {exc}")
    _mark(gateway, marks, report)
    for problem in report.problems:
        log.warning("pod-grouper: %s", problem)
    return report


def wants_grouping(event: Any) -> bool:
    """Whether a watch event brings a pod the pod-grouper must look at: a new pod of ours (a staged
    owner may have grown), or one that is not in a PodGroup yet."""
    raw = getattr(event, "raw", None)
    if getattr(event, "kind", "") != "Pod" or event.type not in ("ADDED", "MODIFIED") or not raw:
        return False
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    return event.type == "ADDED" or not (meta.get("annotations") or {}).get(POD_GROUP_ANNOTATION)


# ----------------------------------------------------------------------------------- the live grouper


def _resource_version(raw: Mapping[str, Any] | None) -> str:
    return str(((raw or {}).get("metadata") or {}).get("resourceVersion", "") or "")


def _older(candidate: str, than: str) -> bool:
    """Whether resourceVersion ``candidate`` is older than ``than`` (etcd's revisions are integers;
    anything else is taken as newer, as the last word)."""
    return candidate.isdigit() and than.isdigit() and int(candidate) < int(than)


class PodGroupCache:
    """The cluster's PodGroups by (namespace, name): what the PodGroup watch delivered and what the
    grouper wrote, the newer by resourceVersion winning. Once the watch has listed (``synced``), a
    PodGroup that is not here does not exist; before that, the caller reads it."""

    def __init__(self) -> None:
        self._items: dict[Key, Mapping[str, Any]] = {}
        self._lock = threading.Lock()
        self.synced = False

    def __len__(self) -> int:
        return len(self._items)

    def observe(self, event: Any) -> None:
        """Take a PodGroup `WatchEvent` (SYNCED: the list is complete)."""
        if event.type == "SYNCED":
            self.synced = True
            return
        key = (event.namespace, event.name)
        if event.type == "DELETED":
            with self._lock:
                held = self._items.get(key)
                # One made again (by us) after the deletion this event reports is kept.
                if held is None or not _older(event.resource_version, _resource_version(held)):
                    self._items.pop(key, None)
            return
        if event.raw:
            self.put(event.raw)

    def put(self, raw: Mapping[str, Any]) -> None:
        key = _pod_key(raw)
        with self._lock:
            held = self._items.get(key)
            if held is None or not _older(_resource_version(raw), _resource_version(held)):
                self._items[key] = raw

    def forget(self, key: Key) -> None:
        with self._lock:
            self._items.pop(key, None)

    def get(self, key: Key) -> tuple[bool, Mapping[str, Any] | None]:
        """(whether the answer is known, the PodGroup or None)."""
        with self._lock:
            raw = self._items.get(key)
        return (raw is not None or self.synced), raw


class _Expiring(Generic[K, V]):
    """A bounded map whose entries are good for ``ttl`` seconds (least recently used dropped first)."""

    def __init__(self, ttl: float, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.limit = max(1, limit)
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> tuple[bool, V | None]:
        with self._lock:
            held = self._items.get(key)
            if held is None:
                return False, None
            if self._clock() - held[0] > self.ttl:
                del self._items[key]
                return False, None
            self._items.move_to_end(key)
            return True, held[1]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = (self._clock(), value)
            self._items.move_to_end(key)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)


class _LiveLookup:
    """The pod-grouper's reads for the live grouper: PodGroups from the `PodGroupCache` (one GET when
    it cannot say), owners and namespace labels from the expiring caches (read on a miss)."""

    def __init__(self, grouper: LiveGrouper, pods: list[Mapping[str, Any]]) -> None:
        self.grouper = grouper
        self.gateway = grouper.gateway
        # The PodGroups these pods name already: one the cache lacks may be one made by hand whose
        # event is still on its way, so its absence is confirmed with a GET.
        self.named = {(_pod_key(p)[0], str(((p.get("metadata") or {}).get("annotations") or {})
                                           .get(POD_GROUP_ANNOTATION))) for p in pods}

    def __call__(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        g = self.grouper
        if (api_version, kind) == (PODGROUP_API_VERSION, PODGROUP_KIND):
            known, raw = g.pod_groups.get((namespace, name))
            if known and (raw is not None or (namespace, name) not in self.named):
                return raw
            return g.read_pod_group((namespace, name))
        key = (api_version, kind, namespace, name)
        hit, held = g.objects.get(key)
        if hit:
            return held
        g.count("owner_reads")
        try:
            found: Mapping[str, Any] | None = self.gateway.get_object(api_version, kind, namespace, name)
        except ClusterError as exc:
            log.warning("pod-grouper: %s", exc)
            return None  # not remembered: the next pod asks again
        if found is not None:
            g.objects.put(key, found)
        return found

    def pods(self, namespace: str, labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        return _pods(self.gateway, namespace, labels)

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        g = self.grouper
        hit, held = g.namespaces.get(namespace)
        if hit and held is not None:
            return held
        g.count("namespace_reads")
        try:
            found: Mapping[str, str] = self.gateway.namespace_labels(namespace)
        except ClusterError as exc:
            log.warning("pod-grouper: %s", exc)
            return {}
        g.namespaces.put(namespace, found)
        return found


class _Lane:
    """One worker's pods waiting, by (namespace, name): a pod handed over again before its turn keeps
    its place and takes the newer state."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: dict[Key, Mapping[str, Any]] = {}
        self.busy = False


class LiveGrouper:
    """``watch_cluster``'s pod-grouper (see the module docstring): `submit` from the Pod watch,
    `observe` from the PodGroup watch, `start` / `drain` / `stop` around the watch."""

    def __init__(self, gateway: Any, *, workers: int = 8, cache_seconds: float = 5.0,
                 cache_limit: int = CACHE_LIMIT, clock: Callable[[], float] = time.monotonic) -> None:
        self.gateway = gateway
        self.pod_groups = PodGroupCache()
        self.objects: _Expiring[tuple[str, str, str, str], Mapping[str, Any]] = _Expiring(cache_seconds, cache_limit,
                                                                                          clock)
        self.namespaces: _Expiring[str, Mapping[str, str]] = _Expiring(cache_seconds, cache_limit, clock)
        self._lanes = [_Lane() for _ in range(max(1, workers))]
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._counts_lock = threading.Lock()
        self.counts: dict[str, int] = {"pods": 0, "grouped": 0, "skipped": 0, "problems": 0,
                                       "pod_groups_written": 0, "pods_marked": 0, "pod_group_reads": 0,
                                       "owner_reads": 0, "namespace_reads": 0}

    @classmethod
    def from_settings(cls, gateway: Any) -> LiveGrouper:
        return cls(gateway, workers=int(getattr(settings, "KAI_GROUPER_WORKERS", 8)),
                   cache_seconds=float(getattr(settings, "KAI_GROUPER_CACHE_SECONDS", 5.0)))

    def count(self, name: str, n: int = 1) -> None:
        with self._counts_lock:
            self.counts[name] = self.counts.get(name, 0) + n

    # -- the watch's side ---------------------------------------------------------------------------

    def start(self) -> LiveGrouper:
        if not self._threads:
            self._threads = [threading.Thread(target=self._work, args=(lane,), name=f"pod-grouper-{i}", daemon=True)
                             for i, lane in enumerate(self._lanes)]
            for t in self._threads:
                t.start()
        return self

    def submit(self, pod: Mapping[str, Any]) -> None:
        """Hand a pod over (no API call): pods of one first owner go to the same worker, in order."""
        meta = pod.get("metadata") or {}
        refs = meta.get("ownerReferences")
        owner = refs[0].get("uid") or refs[0].get("name") if isinstance(refs, list) and refs \
            and isinstance(refs[0], Mapping) else None
        key = _pod_key(pod)
        lane = self._lanes[zlib.crc32(f"{key[0]}/{owner or key[1]}".encode()) % len(self._lanes)]
        with lane.cond:
            lane.waiting[key] = pod
            lane.cond.notify()

    def observe(self, event: Any) -> None:
        """Take a PodGroup watch event into the PodGroup cache."""
        if getattr(event, "kind", "") == "PodGroup":
            self.pod_groups.observe(event)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every pod handed over is grouped; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for lane in self._lanes:
            with lane.cond:
                while lane.waiting or lane.busy:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    lane.cond.wait(left if left is not None else 1.0)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Finish what was handed over (for at most ``timeout`` seconds), then end the workers."""
        self.drain(timeout)
        self._stopping.set()
        for lane in self._lanes:
            with lane.cond:
                lane.cond.notify_all()
        for t in self._threads:
            t.join(timeout=1.0)
        self._threads = []

    # -- the workers' side --------------------------------------------------------------------------

    def _work(self, lane: _Lane) -> None:
        while True:
            with lane.cond:
                while not lane.waiting and not self._stopping.is_set():
                    lane.cond.wait()
                if not lane.waiting:
                    return
                keys = list(lane.waiting)[:BATCH]
                batch = [lane.waiting.pop(k) for k in keys]
                lane.busy = True
            try:
                self.group(batch)
            except Exception:  # noqa: BLE001 - one bad batch must not end the worker
                log.exception("pod-grouper: grouping %d pods failed", len(batch))
            finally:
                with lane.cond:
                    lane.busy = False
                    lane.cond.notify_all()

    def read_pod_group(self, key: Key) -> Mapping[str, Any] | None:
        """One GET of a PodGroup the cache cannot answer for; what it finds is remembered."""
        self.count("pod_group_reads")
        try:
            raw: Mapping[str, Any] | None = self.gateway.get_object(PODGROUP_API_VERSION, PODGROUP_KIND, key[0], key[1])
        except ClusterError as exc:
            log.warning("pod-grouper: %s", exc)
            return None
        if raw is not None:
            self.pod_groups.put(raw)
        return raw

    def group(self, pods: list[Mapping[str, Any]]) -> GroupingReport:
        """Group these pods now (in the calling thread): the PodGroups that differ from the cache are
        written, then the pods are marked."""
        report = GroupingReport(pods=len(pods))
        lookup = _LiveLookup(self, pods)
        wanted, marks, members = _plan_pods(self.gateway, pods, lookup, report)
        for key, manifest in sorted(wanted.items()):
            self._write(key, manifest, members[key], report)
        _mark(self.gateway, marks, report)
        for problem in report.problems:
            log.warning("pod-grouper: %s", problem)
        for name in ("pods", "grouped", "skipped", "pod_groups_written", "pods_marked"):
            self.count(name, getattr(report, name))
        self.count("problems", len(report.problems))
        return report

    def _write(self, key: Key, manifest: dict[str, Any], pods: list[Mapping[str, Any]],
               report: GroupingReport) -> None:
        known, current = self.pod_groups.get(key)
        if known and _same(current, manifest):
            return
        try:
            if known and current is None:
                try:
                    written = self.gateway.create_pod_group(manifest)
                except ClusterRejected as err:
                    if err.status != 409:
                        raise
                    # There after all (made meanwhile): read it and decide again from what it says.
                    self.pod_groups.forget(key)
                    if self.read_pod_group(key) is None:
                        raise
                    again, _, _ = _plan_pods(self.gateway, pods, _LiveLookup(self, pods), GroupingReport())
                    manifest = again.get(key, manifest)
                    _, current = self.pod_groups.get(key)
                    if _same(current, manifest):
                        return
                    written = self.gateway.upsert_pod_group(manifest)
            else:
                written = self.gateway.upsert_pod_group(manifest)
        except ClusterError as exc:
            report.problems.append(f"PodGroup {key[0]}/{key[1]}: {exc}")
            return
        if isinstance(written, Mapping) and written.get("metadata"):
            self.pod_groups.put(written)
        report.pod_groups_written += 1
