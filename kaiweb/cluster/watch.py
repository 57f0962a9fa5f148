"""List + watch of nodes, pods (ours, and other schedulers' bound ones), PodGroups and Queues,
keeping a mirror of the cluster current.

One `ResourceWatch` per kind: it lists (remembering each object's resourceVersion and the list's
resourceVersion), then watches from there with ``allow_watch_bookmarks``. BOOKMARK events only move
the resourceVersion forward. A ``410 Gone`` (the server compacted the history we asked for)
triggers a re-list that is *diffed* against what was already handed out, so the callback sees
each change once: objects that appeared, changed or vanished while the watch was broken come
as ADDED / MODIFIED / DELETED, unchanged ones are not repeated. The SYNCED event that ends a list
carries the keys (namespace, name) of everything the list held, so a mirror started afresh can drop
what it kept from before. Other failures (dropped streams,
5xx, timeouts) reconnect from the last resourceVersion with bounded backoff.

The callback receives `WatchEvent` objects and nothing here touches Django models, so the loop
is tested against the fake API server alone; ``manage.py watch_cluster`` runs it in its own
process (Celery never holds a watch open).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.kubernetes.parsing import (
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
    QUEUE_GROUP,
    QUEUE_PLURAL,
    QUEUE_VERSION,
    parse_node,
    parse_other_pod,
    parse_pod,
    parse_pod_group,
    parse_queue,
)
from kaiweb.cluster.backends.types import Unreadable
from kaiweb.cluster.errors import ClusterError

logger = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED, SYNCED = "ADDED", "MODIFIED", "DELETED", "SYNCED"
KINDS = ("Node", "Pod", "OtherPod", "PodGroup", "Queue")


@dataclass(frozen=True)
class WatchEvent:
    """One change handed to the callback. ``obj`` is the parsed observed object (for DELETED, its
    last state); ``problem`` is set instead when the object is unreadable. SYNCED marks the end
    of a (re-)list: the mirror of that kind is complete as of ``resource_version``, and ``obj`` is
    the frozenset of the (namespace, name) keys the list held."""

    kind: str
    type: str
    namespace: str
    name: str
    resource_version: str
    obj: Any = None
    problem: Unreadable | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


Callback = Callable[[WatchEvent], None]


def log_event(event: WatchEvent) -> None:
    """The default callback: one log line per change."""
    where = f"{event.namespace}/{event.name}" if event.namespace else event.name
    if event.problem is not None:
        logger.warning("%s %s %s unreadable: %s", event.type, event.kind, where, event.problem.message)
    else:
        logger.info("%s %s %s rv=%s", event.type, event.kind, where or "*", event.resource_version)


@dataclass(frozen=True)
class ResourceKind:
    """How to list/watch one kind with the official client and parse its objects."""

    kind: str
    list_fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    parse: Callable[[Mapping[str, Any]], Any]


def resource_kinds(gateway: KubernetesGateway, kinds: Iterable[str] = KINDS) -> list[ResourceKind]:
    table = {
        "Node": ResourceKind("Node", gateway.core.list_node, (), {}, parse_node),
        "Pod": ResourceKind("Pod", gateway.core.list_pod_for_all_namespaces, (),
                            {"field_selector": gateway.pod_field_selector()}, parse_pod),
        # Bound pods of other schedulers: what they hold on their nodes is not free.
        "OtherPod": ResourceKind("OtherPod", gateway.core.list_pod_for_all_namespaces, (),
                                 {"field_selector": gateway.other_pod_field_selector()}, parse_other_pod),
        "PodGroup": ResourceKind("PodGroup", gateway.custom.list_cluster_custom_object,
                                 (PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL), {}, parse_pod_group),
        "Queue": ResourceKind("Queue", gateway.custom.list_cluster_custom_object,
                              (QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL), {}, parse_queue),
    }
    unknown = set(kinds) - set(table)
    if unknown:
        raise ValueError(f"kinds: unknown kind(s) {sorted(unknown)}; choose from {list(KINDS)}")
    return [table[k] for k in kinds]


def _key(raw: Mapping[str, Any]) -> tuple[str, str]:
    meta = raw.get("metadata") or {}
    return (meta.get("namespace", "") or "", meta.get("name", "") or "")


class ResourceWatch:
    """List + watch of one kind; see the module docstring."""

    def __init__(
        self,
        gateway: KubernetesGateway,
        kind: ResourceKind,
        callback: Callback = log_event,
        *,
        timeout_seconds: int = 300,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.gateway = gateway
        self.kind = kind
        self.callback = callback
        self.timeout_seconds = timeout_seconds
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self.resource_version = ""  # "" → the next step lists
        self.known: dict[tuple[str, str], str] = {}  # (namespace, name) → resourceVersion handed out
        self._last: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.relists = 0
        self.errors = 0
        self._stopping = False
        self._response: Any = None  # the live watch connection, for stop() to shut down

    def _emit(self, type_: str, raw: Mapping[str, Any]) -> None:
        parsed = self.kind.parse(raw)
        ns, name = _key(raw)
        problem = parsed if isinstance(parsed, Unreadable) else None
        rv = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        self.callback(WatchEvent(self.kind.kind, type_, ns, name, rv, None if problem else parsed, problem, raw))

    def relist(self) -> None:
        """List, and hand out only the difference from what the callback has already seen."""
        raws, rv = self.gateway.list_raw(f"list {self.kind.kind}s", self.kind.list_fn, *self.kind.args,
                                      **self.kind.kwargs)
        current = {_key(r): r for r in raws}
        for key in sorted(current):
            raw = current[key]
            version = str((raw.get("metadata") or {}).get("resourceVersion", ""))
            if key not in self.known:
                self._emit(ADDED, raw)
            elif self.known[key] != version:
                self._emit(MODIFIED, raw)
            self.known[key], self._last[key] = version, raw
        for key in sorted(set(self.known) - set(current)):
            self._emit(DELETED, self._last.get(key) or {"metadata": {"namespace": key[0], "name": key[1]}})
            del self.known[key]
            self._last.pop(key, None)
        self.resource_version = rv
        self.relists += 1
        self.callback(WatchEvent(self.kind.kind, SYNCED, "", "", rv, frozenset(current)))

    def _handle(self, event: Mapping[str, Any]) -> None:
        type_, raw = event.get("type"), event.get("raw_object") or event.get("object") or {}
        rv = str((raw.get("metadata") or {}).get("resourceVersion", "")) if isinstance(raw, Mapping) else ""
        if type_ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if type_ not in (ADDED, MODIFIED, DELETED) or not isinstance(raw, Mapping):
            return
        key = _key(raw)
        if type_ == DELETED:
            if key in self.known:
                self._emit(DELETED, raw)
                del self.known[key]
                self._last.pop(key, None)
        elif self.known.get(key) != rv:
            # After a reconnect the server may replay what was already handed out: skip those.
            self._emit(ADDED if key not in self.known else MODIFIED, raw)
            self.known[key], self._last[key] = rv, raw
        # Advance only after the callback took the event: a failing callback replays it.
        if rv:
            self.resource_version = rv

    def stream_once(self, timeout_seconds: int | None = None) -> None:
        """One watch connection from `resource_version` until the server ends it.

        Each line is parsed as JSON and nothing more: the parsers read the raw object, so the
        client's model deserialization (a third of the watch threads' time at 500 nodes) is skipped. Raises
        `ApiException` (410 included, from an ERROR event) and transport errors; `step` handles them."""
        timeout = max(1, int(timeout_seconds or self.timeout_seconds))
        response = self.kind.list_fn(
            *self.kind.args, watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
            timeout_seconds=timeout, _preload_content=False,
            # A silent connection is noticed a little after the server should have closed it.
            _request_timeout=(self.gateway.request_timeout, timeout + 15), **self.kind.kwargs,
        )
        self._response = response
        try:
            if self._stopping:  # stop() came while the connection was being made
                return
            for line in iter_resp_lines(response):
                if self._stopping:
                    break
                if not line or line.isspace():
                    continue
                event = json.loads(line)
                if not isinstance(event, Mapping):
                    continue
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiException(status=status.get("code"),
                                       reason=f"{status.get('reason')}: {status.get('message')}")
                self._handle(event)
        finally:
            self._response = None
            response.close()  # releases the connection even when the callback raised
            response.release_conn()

    def stop(self) -> None:
        """Ends the watch now: a connection waiting for its next line is shut down from here (a quiet
        kind would otherwise hold its thread, and a pod being stopped, for up to ``timeout_seconds``)."""
        self._stopping = True
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed, or closing in its own thread
                response.shutdown()

    def step(self, timeout_seconds: int | None = None) -> bool:
        """List if needed, else one watch connection. Returns False after a failure (the caller
        backs off); a 410 Gone re-lists at once."""
        try:
            if not self.resource_version:
                self.relist()
            else:
                self.stream_once(timeout_seconds)
            return True
        except ApiException as exc:
            if exc.status == 410:
                logger.info("%s watch from rv %s expired (410 Gone): re-listing", self.kind.kind,
                            self.resource_version)
                self.resource_version = ""
                try:
                    self.relist()
                    return True
                except ClusterError as err:
                    logger.warning("%s re-list failed: %s", self.kind.kind, err)
                    self.errors += 1
                    return False
            logger.warning("%s watch failed: %s %s", self.kind.kind, exc.status, exc.reason)
        except (ClusterError, urllib3.exceptions.HTTPError, OSError) as exc:
            if self._stopping:  # stop() shut the connection down
                return True
            logger.warning("%s watch interrupted: %s", self.kind.kind, exc)
        self.errors += 1
        return False

    def run(self, stop: threading.Event, deadline: float | None = None) -> None:
        """Steps until ``stop`` is set or the monotonic ``deadline`` passes, backing off after
        consecutive failures (base × 2^n, capped)."""
        failures = 0
        self._stopping = False
        while not stop.is_set() and not self._stopping:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            timeout = self.timeout_seconds if left is None else max(1, min(self.timeout_seconds, int(left)))
            try:
                ok = self.step(timeout)
            except Exception:  # the callback failed: back off, then the event comes again
                logger.exception("%s watch callback failed; retrying from rv %s", self.kind.kind,
                                 self.resource_version)
                self.errors += 1
                ok = False
            if ok:
                failures = 0
                continue
            failures += 1
            delay = min(self.backoff_max, self.backoff_base * 2 ** (failures - 1))
            if left is not None:
                delay = min(delay, max(0.0, left))
            if self._sleep is time.sleep:
                stop.wait(delay)  # wakes at once when asked to stop
            else:
                self._sleep(delay)


class ClusterWatcher:
    """Watches several kinds, one thread each; the callback is called under one lock."""

    def __init__(
        self,
        gateway: KubernetesGateway,
        callback: Callback = log_event,
        *,
        kinds: Iterable[str] = KINDS,
        timeout_seconds: int = 300,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self._lock = threading.Lock()
        self._callback = callback

        def locked(event: WatchEvent) -> None:
            with self._lock:
                self._callback(event)

        self.watches = [ResourceWatch(gateway, k, locked, timeout_seconds=timeout_seconds,
                                      backoff_base=backoff_base, backoff_max=backoff_max)
                        for k in resource_kinds(gateway, kinds)]
        self.stop_event = threading.Event()

    def run_once(self, timeout_seconds: int = 1, *, settle: Callable[[], object] | None = None) -> None:
        """List every kind, then one watch pass each (bounded by ``timeout_seconds``). ``settle`` runs
        between the two (``watch_cluster --once`` lets its pod-grouper finish there, so the pass sees
        what the grouper wrote)."""
        for w in self.watches:
            w.step()
        if settle is not None:
            settle()
        for w in self.watches:
            w.step(timeout_seconds)

    def run(self, max_seconds: float | None = None) -> None:
        """Run until `stop()` (or a signal) or for ``max_seconds``."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        threads = [threading.Thread(target=w.run, args=(self.stop_event, deadline), name=f"watch-{w.kind.kind}",
                                    daemon=True) for w in self.watches]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.5)
        finally:
            self.stop()
            until = time.monotonic() + 5  # stop() shut the connections down: the threads end at once
            for t in threads:
                t.join(timeout=max(0.0, until - time.monotonic()))

    def stop(self) -> None:
        self.stop_event.set()
        for w in self.watches:
            w.stop()
