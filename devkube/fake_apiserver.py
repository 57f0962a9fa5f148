"""A fake Kubernetes API server on loopback, for quick runs of the gateway with the official client.

For tests and for ``manage.py cluster_scenarios --apiserver fake``: nothing a deployment uses. The
real API server (`devkube.localkube`) is the reference; this one is fast and in-process.

It serves, from memory, the part of the API that `KubernetesGateway` and the watcher call:

* lists (all namespaces and namespaced) with ``labelSelector`` / ``fieldSelector`` for nodes,
  pods, events, priority classes, Queues (``scheduling.run.ai/v2``) and PodGroups
  (``scheduling.run.ai/v2alpha2``), and single-object GET;
* ``?watch=1`` as a chunked stream of newline-delimited JSON events (ADDED, MODIFIED, DELETED,
  BOOKMARK) from a given resourceVersion; a resourceVersion older than the compacted history
  gets an ERROR event carrying a 410 ``Status``, as etcd compaction does on a real server;
* the Binding subresource (``pods/{name}/binding`` and ``bindings``), which answers with a
  ``Status`` object exactly like the real server (the client cannot deserialise it into a
  ``V1Binding``), refuses a pod already bound and copies the Binding's annotations to the pod;
* the Eviction subresource (marks the pod terminating for its grace period, deletes it at once
  for grace 0), with the UID precondition; a pod's DELETE the same way (and at once when the pod is
  not bound, as the real server does), no PodDisruptionBudgets either way;
* pod status patches (strategic merge: conditions merge by ``type``; a ``metadata.uid`` that is not
  the pod's is refused with 422, as the real server does), pod patches, events,
  CRD create / replace / merge-patch / delete and the ``status`` subresource.

Every write bumps one monotonically increasing resourceVersion, shared by all kinds (as etcd's
revision is). Fault injection: the next N requests fail with a given status, hang past the
client's timeout, or a watch stream ends abruptly without the closing chunk.

Usage in a test::

    def test_something(kube_apiserver):            # the fixture below
        kube_apiserver.add_node("gpu-1", gpus=8)
        api = kubernetes.client.CoreV1Api(kube_apiserver.api_client)

or, without the fixture, ``with FakeKubeApiServer() as server: ...``. ``register(plural, kind,
api_version, namespaced)`` serves a further kind (a custom resource, a workload owner).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kaiweb.cluster.backends.types import OBSERVER_HEADER

# (group/version prefix, plural) → kind metadata. Core resources use the "" group.
_KINDS: dict[str, dict[str, Any]] = {
    "nodes": {"prefix": "/api/v1", "kind": "Node", "apiVersion": "v1", "namespaced": False},
    "pods": {"prefix": "/api/v1", "kind": "Pod", "apiVersion": "v1", "namespaced": True},
    "events": {"prefix": "/api/v1", "kind": "Event", "apiVersion": "v1", "namespaced": True},
    "namespaces": {"prefix": "/api/v1", "kind": "Namespace", "apiVersion": "v1", "namespaced": False},
    "configmaps": {"prefix": "/api/v1", "kind": "ConfigMap", "apiVersion": "v1", "namespaced": True},
    "priorityclasses": {
        "prefix": "/apis/scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "apiVersion": "scheduling.k8s.io/v1",
        "namespaced": False,
    },
    "queues": {
        "prefix": "/apis/scheduling.run.ai/v2",
        "kind": "Queue",
        "apiVersion": "scheduling.run.ai/v2",
        "namespaced": False,
    },
    "podgroups": {
        "prefix": "/apis/scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "namespaced": True,
    },
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `Status` object as the real server sends with errors (and with a few successes)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised inside the handler; becomes a `Status` response."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what CRDs accept)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch, except lists of conditions merge by ``type`` (the only list we patch)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key == "conditions" and isinstance(value, list):
            merged = [dict(c) for c in result.get(key) or []]
            for cond in value:
                for i, existing in enumerate(merged):
                    if existing.get("type") == cond.get("type"):
                        merged[i] = _strategic_merge_patch(existing, cond)
                        break
                else:
                    merged.append(copy.deepcopy(cond))
            result[key] = merged
        else:
            result[key] = _strategic_merge_patch(result.get(key), value)
    return result


def _dig(obj: dict[str, Any], dotted: str) -> Any:
    node: Any = obj
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _matches_labels(obj: dict[str, Any], selector: str) -> bool:
    """Equality, inequality and existence terms (``a=b``, ``a!=b``, ``a``, ``!a``), comma-joined."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _matches_fields(obj: dict[str, Any], selector: str) -> bool:
    """Field selectors on dotted paths (``spec.schedulerName=kai-scheduler``, ``spec.nodeName=``)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        negate = "!=" in term
        key, value = term.split("!=" if negate else "=", 1)
        actual = _dig(obj, key.strip().lstrip("="))
        actual = "" if actual is None else str(actual)
        if (actual == value.strip()) == negate:
            return False
    return True


@dataclass
class _HistoryEntry:
    rv: int
    plural: str
    type: str  # ADDED / MODIFIED / DELETED / BOOKMARK
    obj: dict[str, Any]


@dataclass
class _Fault:
    remaining: int
    kind: str  # "status" | "hang"
    status: int = 500
    seconds: float = 0.0
    path_contains: str = ""
    method: str = ""
    retry_after: str | None = None


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any = None


@dataclass
class FakeState:
    """The in-memory store: objects keyed by (plural, namespace, name), plus the event history."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    history: list[_HistoryEntry] = field(default_factory=list)
    rv: int = 1
    compacted_rv: int = 0  # watches from a resourceVersion below this get 410 Gone


def pod_manifest(
    name: str, *, namespace: str = "default", queue: str | None = "team-a",
    scheduler: str = "kai-scheduler", requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None, node: str | None = None,
    priority_class: str | None = None, pod_group: str | None = None,
) -> dict[str, Any]:
    """The test pods' manifest (metadata and spec), one container asking for ``requests`` / ``limits``
    (1 CPU by default), in ``queue`` and ``pod_group`` when given; the fake and the real API server's
    helpers both make their pods from it."""
    labels = dict(labels or {})
    if queue is not None:
        labels["kai.scheduler/queue"] = queue
    annotations = dict(annotations or {})
    if pod_group:
        annotations["pod-group-name"] = pod_group
    resources: dict[str, Any] = {"requests": dict(requests if requests is not None else {"cpu": "1"})}
    if limits:
        resources["limits"] = dict(limits)
    spec: dict[str, Any] = {"schedulerName": scheduler,
                            "containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": spec}


class ObjectHelpers:
    """The test objects both the fake and the real API server's helpers make, through their ``put``."""

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def add_queue(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.put("queues", {"metadata": {"name": name}, "spec": spec})

    def add_pod_group(self, name: str, spec: dict[str, Any], *, namespace: str = "default") -> dict[str, Any]:
        return self.put("podgroups", {"metadata": {"name": name, "namespace": namespace}, "spec": spec})

    def add_priority_class(self, name: str, value: int, *, global_default: bool = False) -> dict[str, Any]:
        return self.put("priorityclasses", {"metadata": {"name": name}, "value": value,
                                            "globalDefault": global_default})


class FakeKubeApiServer(ObjectHelpers):
    """The fake server. Start with ``start()`` (or as a context manager); stop with ``stop()``."""

    def __init__(self, *, watch_timeout_cap: float = 0.2) -> None:
        # A watch ends after min(timeoutSeconds, cap) seconds; the small cap keeps tests fast.
        self.watch_timeout_cap = watch_timeout_cap
        self.state = FakeState()
        self.requests: list[RequestRecord] = []
        self.evictions: list[dict[str, Any]] = []
        self.deletions: list[dict[str, Any]] = []  # every pod DELETE that took effect: namespace, name, grace
        self.bindings: list[dict[str, Any]] = []
        self._faults: list[_Fault] = []
        self._break_watches: list[int] = []  # each entry: end the next watch abruptly after N events
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._api_client: Any = None
        self.kinds: dict[str, dict[str, Any]] = copy.deepcopy(_KINDS)

    def register(self, plural: str, kind: str, api_version: str, *, namespaced: bool) -> None:
        """Serve a further kind under its group's path (idempotent)."""
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        self.kinds.setdefault(plural, {"prefix": prefix, "kind": kind, "apiVersion": api_version,
                                       "namespaced": namespaced})

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeKubeApiServer:
        server = self

        class Handler(_Handler):
            fake = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval makes stop() quick (shutdown waits for the next poll).
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        if self._api_client is not None:
            self._api_client.close()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "the fake server is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def configuration(self, *, request_timeout: float | None = None) -> Any:
        """A client `Configuration` for this server (no auth, no urllib3-level retries)."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        # The gateway owns retrying; urllib3's own retries would hide what the tests observe.
        config.retries = False
        return config

    @property
    def api_client(self) -> Any:
        """A configured `kubernetes.client.ApiClient`, closed when the server stops."""
        if self._api_client is None:
            from kubernetes import client

            self._api_client = client.ApiClient(self.configuration())
        return self._api_client

    # -- fault injection -----------------------------------------------------------------------

    def fail_next(
        self, count: int = 1, *, status: int = 500, path_contains: str = "", method: str = "",
        retry_after: str | None = None,
    ) -> None:
        """The next ``count`` matching requests answer ``status`` (500, 429, 503, ...)."""
        with self._lock:
            self._faults.append(_Fault(count, "status", status=status, path_contains=path_contains,
                                       method=method.upper(), retry_after=retry_after))

    def hang_next(self, count: int = 1, *, seconds: float = 5.0, path_contains: str = "", method: str = "") -> None:
        """The next ``count`` matching requests stall ``seconds`` before answering (past a client timeout)."""
        with self._lock:
            self._faults.append(_Fault(count, "hang", seconds=seconds, path_contains=path_contains,
                                       method=method.upper()))

    def clear_faults(self) -> None:
        """Forget every fault not yet taken: the server answers normally again."""
        with self._lock:
            self._faults.clear()

    def break_next_watch(self, after_events: int = 0) -> None:
        """The next watch stream is cut (no closing chunk) after sending ``after_events`` events."""
        with self._lock:
            self._break_watches.append(after_events)

    def compact(self) -> int:
        """Forget the history up to now: watches from an older resourceVersion get 410 Gone."""
        with self._lock:
            self.state.compacted_rv = self.state.rv
            self.state.history = [e for e in self.state.history if e.rv > self.state.rv]
            return self.state.rv

    def bookmark(self, plural: str) -> int:
        """Send a BOOKMARK at the current resourceVersion to watches of ``plural`` that asked for them."""
        with self._lock:
            meta = self.kinds[plural]
            obj = {"kind": meta["kind"], "apiVersion": meta["apiVersion"],
                   "metadata": {"resourceVersion": str(self.state.rv)}}
            self.state.history.append(_HistoryEntry(self.state.rv, plural, "BOOKMARK", obj))
            self._lock.notify_all()
            return self.state.rv

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.path_contains in path and fault.method in ("", method):
                    fault.remaining -= 1
                    return fault
            return None

    # -- store ---------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self.state.rv

    def _record(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        # Caller holds the lock.
        self.state.history.append(_HistoryEntry(self.state.rv, plural, event, copy.deepcopy(obj)))
        self._lock.notify_all()

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (no preconditions): the test-side way to change the cluster."""
        with self._lock:
            meta = self.kinds[plural]
            obj = copy.deepcopy(obj)
            md = obj.setdefault("metadata", {})
            ns = md.get("namespace", "") if meta["namespaced"] else ""
            if meta["namespaced"]:
                md["namespace"] = ns = ns or "default"
            key = (plural, ns, md["name"])
            existing = self.state.objects.get(key)
            obj.setdefault("kind", meta["kind"])
            obj.setdefault("apiVersion", meta["apiVersion"])
            md.setdefault("uid", existing["metadata"]["uid"] if existing else str(uuid.uuid4()))
            md.setdefault("creationTimestamp",
                          existing["metadata"]["creationTimestamp"] if existing else _now())
            self.state.rv += 1
            md["resourceVersion"] = str(self.state.rv)
            self.state.objects[key] = obj
            self._record(plural, "MODIFIED" if existing else "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            if self.kinds[plural]["namespaced"]:
                namespace = namespace or "default"
            obj = self.state.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def remove(self, plural: str, name: str, namespace: str = "") -> bool:
        with self._lock:
            if self.kinds[plural]["namespaced"]:
                namespace = namespace or "default"
            obj = self.state.objects.pop((plural, namespace, name), None)
            if obj is None:
                return False
            self.state.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.state.rv)
            self._record(plural, "DELETED", obj)
            return True

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for (p, ns, _), o in sorted(self.state.objects.items())
                    if p == plural and (namespace is None or ns == namespace)]

    def complete_terminations(self) -> int:
        """Delete every pod that is terminating (its grace period is taken as elapsed)."""
        with self._lock:
            doomed = [k for k, o in self.state.objects.items()
                      if k[0] == "pods" and o["metadata"].get("deletionTimestamp")]
        for _, ns, name in doomed:
            self.remove("pods", name, ns)
        return len(doomed)

    def play_kubelets(self) -> dict[str, int]:
        """What KWOK's stages do on the real server (`LocalKube(kwok=True)`), at once: terminating
        pods go away (`complete_terminations`) and bound Pending pods become Running and Ready."""
        deleted = self.complete_terminations()
        started = 0
        with self._lock:
            for key, pod in list(self.state.objects.items()):
                if key[0] != "pods" or not pod["spec"].get("nodeName"):
                    continue
                if ((pod.get("status") or {}).get("phase") or "Pending") != "Pending":
                    continue
                now = _now()
                running = copy.deepcopy(pod)
                running["status"] = _strategic_merge_patch(running.get("status") or {}, {
                    "phase": "Running", "startTime": now,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]})
                self.put("pods", running)
                started += 1
        return {"deleted": deleted, "started": started}

    # -- builders for tests --------------------------------------------------------------------

    def add_node(
        self, name: str, *, cpu: str = "64", memory: str = "512Gi", gpus: int = 8, pods: str = "110",
        labels: dict[str, str] | None = None, ready: bool = True, unschedulable: bool = False,
        extra_allocatable: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra_allocatable or {})}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        return self.put("nodes", {
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {
                "allocatable": allocatable,
                "capacity": dict(allocatable),
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        })

    def add_pod(self, name: str, *, phase: str = "Pending", **fields: Any) -> dict[str, Any]:
        """A pod as `pod_manifest` writes it, in ``phase``."""
        return self.put("pods", {**pod_manifest(name, **fields), "status": {"phase": phase}})

    # -- request handling (called from handler threads) ----------------------------------------

    def route(self, method: str, path: str) -> tuple[str, str, str, str]:
        """(plural, namespace, name, subresource) for a request path, or ApiError 404."""
        for plural, meta in self.kinds.items():
            prefix = meta["prefix"]
            if not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1:].split("/")
            namespace = ""
            if rest[0] == "namespaces" and len(rest) >= 3:
                namespace, rest = rest[1], rest[2:]
            if rest[0] == "bindings" and plural == "pods":
                return "pods", namespace, "", "bindings"
            if rest[0] != plural:
                continue
            name = rest[1] if len(rest) > 1 else ""
            sub = rest[2] if len(rest) > 2 else ""
            return plural, namespace, name, sub
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, dict[str, Any]]:
        plural, namespace, name, sub = self.route(method, path)
        meta = self.kinds[plural]
        if meta["namespaced"] and name and not namespace:
            raise ApiError(404, "NotFound", f"{plural} {name!r} needs a namespace in the path")
        if method == "GET":
            if name:
                obj = self.get(plural, name, namespace)
                if obj is None:
                    raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
                return 200, obj
            return 200, self._list_body(plural, namespace or None, query)
        if method == "POST" and sub == "bindings":
            return self._bind(namespace, body.get("metadata", {}).get("name", ""), body)
        if method == "POST" and sub == "binding":
            return self._bind(namespace, name, body)
        if method == "POST" and sub == "eviction":
            return self._evict(namespace, name, body)
        if method == "POST" and not name:
            return self._create(plural, namespace, body)
        if method == "PUT" and name:
            return self._replace(plural, namespace, name, body, status_only=sub == "status")
        if method == "PATCH" and name:
            return self._patch(plural, namespace, name, body, status_only=sub == "status")
        if method == "DELETE" and name and plural == "pods":
            return self._delete_pod(namespace, name, query, body)
        if method == "DELETE" and name:
            return self._delete(plural, namespace, name)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _list_body(self, plural: str, namespace: str | None, query: dict[str, list[str]]) -> dict[str, Any]:
        with self._lock:
            items = self._select(plural, namespace, query)
            rv = self.state.rv
        meta = self.kinds[plural]
        list_meta: dict[str, Any] = {"resourceVersion": str(rv)}
        # Pagination: ``limit`` and an opaque ``continue`` token (here "offset:resourceVersion").
        limit = int((query.get("limit") or ["0"])[0] or 0)
        token = (query.get("continue") or [""])[0]
        offset = 0
        if token:
            offset_text, _, token_rv = token.partition(":")
            if int(token_rv) < self.state.compacted_rv:
                raise ApiError(410, "Expired", "the provided continue parameter is too old")
            offset, list_meta["resourceVersion"] = int(offset_text), token_rv
        if limit:
            if offset + limit < len(items):
                list_meta["continue"] = f"{offset + limit}:{list_meta['resourceVersion']}"
            items = items[offset:offset + limit]
        return {"kind": meta["kind"] + "List", "apiVersion": meta["apiVersion"], "metadata": list_meta,
                "items": items}

    def _select(self, plural: str, namespace: str | None, query: dict[str, list[str]],
                objs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        labels = (query.get("labelSelector") or [""])[0]
        fields = (query.get("fieldSelector") or [""])[0]
        candidates = self.list(plural, namespace) if objs is None else objs
        return [o for o in candidates
                if (namespace is None or o["metadata"].get("namespace", "") == namespace)
                and _matches_labels(o, labels) and _matches_fields(o, fields)]

    def _create(self, plural: str, namespace: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{plural}: metadata.name: Required value")
        if self.kinds[plural]["namespaced"]:
            body.setdefault("metadata", {})["namespace"] = namespace or "default"
        if self.get(plural, name, namespace) is not None:
            raise ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists')
        for key in ("resourceVersion", "uid", "creationTimestamp"):
            body["metadata"].pop(key, None)
        return 201, self.put(plural, body)

    def _replace(self, plural: str, namespace: str, name: str, body: dict[str, Any],
                 *, status_only: bool) -> tuple[int, dict[str, Any]]:
        with self._lock:
            current = self.get(plural, name, namespace)
            if current is None:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": '
                               "the object has been modified; please apply your changes to the latest version")
            if status_only:
                current["status"] = body.get("status", {})
                new = current
            else:
                new = copy.deepcopy(body)
                new["metadata"] = {**current["metadata"], **{k: v for k, v in body.get("metadata", {}).items()
                                                           if k in ("labels", "annotations")}}
                if "status" in current:
                    new["status"] = current["status"]  # a spec replace leaves status alone
            return 200, self.put(plural, new)

    def _patch(self, plural: str, namespace: str, name: str, body: Any,
               *, status_only: bool) -> tuple[int, dict[str, Any]]:
        with self._lock:
            current = self.get(plural, name, namespace)
            if current is None:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            wanted_rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                # A resourceVersion in a patch is a precondition, as on a real server.
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": '
                               "the object has been modified; please apply your changes to the latest version")
            merge = _strategic_merge_patch if plural in ("pods", "nodes") else _merge_patch
            uid = ((body or {}).get("metadata") or {}).get("uid")
            if uid and uid != current["metadata"]["uid"]:  # the uid cannot change, as on a real server
                raise ApiError(422, "Invalid", f'{self.kinds[plural]["kind"]} "{name}" is invalid: metadata.uid: '
                               f'Invalid value: "{uid}": field is immutable')
            if status_only:
                current["status"] = merge(current.get("status") or {}, (body or {}).get("status") or {})
                new = current
            else:
                patch = dict(body or {})
                patch.pop("status", None)
                new = merge(current, patch)
                new["metadata"]["uid"] = current["metadata"]["uid"]
            return 200, self.put(plural, new)

    def _delete(self, plural: str, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        obj = self.get(plural, name, namespace)
        if obj is None or not self.remove(plural, name, namespace):
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        return 200, _status(200, "", f'{plural} "{name}" deleted')

    def _delete_pod(self, namespace: str, name: str, query: dict[str, list[str]],
                    body: Any) -> tuple[int, dict[str, Any]]:
        """A pod's DELETE with its options (body or query): the UID precondition, then terminating for
        the grace period, or gone at once for grace 0 or a pod not bound to a node."""
        options = body if isinstance(body, dict) else {}
        grace = options.get("gracePeriodSeconds")
        if grace is None and (query.get("gracePeriodSeconds") or [""])[0]:
            grace = int(query["gracePeriodSeconds"][0])
        with self._lock:
            pod = self.get("pods", name, namespace)
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            uid = (options.get("preconditions") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on Pod "{name}": the UID in the '
                               f"precondition ({uid}) does not match the UID in record ({pod['metadata']['uid']}). "
                               "The object might have been deleted and then recreated")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            if not pod["spec"].get("nodeName"):
                grace = 0
            self.deletions.append({"namespace": namespace, "name": name, "grace": grace})
            if grace == 0:
                self.remove("pods", name, namespace)
            elif not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = _now()
                pod["metadata"]["deletionGracePeriodSeconds"] = grace
                pod = self.put("pods", pod)
        return 200, pod

    def _bind(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        target = ((body or {}).get("target") or {}).get("name")
        if not target:
            raise ApiError(422, "Invalid", "Binding.target.name: Required value")
        with self._lock:
            pod = self.get("pods", name, namespace)
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            uid = ((body or {}).get("metadata") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                               f"UID in object meta: {pod['metadata']['uid']}")
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host")
            bound = pod["spec"].get("nodeName")
            if bound:
                # The real server refuses a second binding even to the same node.
                raise ApiError(409, "Conflict", f"pod {name} is already assigned to node \"{bound}\"")
            pod["spec"]["nodeName"] = target
            annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            pod["status"] = _strategic_merge_patch(pod.get("status") or {}, {"conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]})
            self.put("pods", pod)
            self.bindings.append({"namespace": namespace, "name": name, "node": target,
                                  "annotations": dict(annotations)})
        return 201, _status(201, "", "")

    def _evict(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        options = (body or {}).get("deleteOptions") or {}
        grace = options.get("gracePeriodSeconds")
        with self._lock:
            pod = self.get("pods", name, namespace)
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            uid = (options.get("preconditions") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                               f"UID in object meta: {pod['metadata']['uid']}")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            self.evictions.append({"namespace": namespace, "name": name, "grace": grace})
            if grace == 0:
                self.remove("pods", name, namespace)
            elif not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = _now()
                pod["metadata"]["deletionGracePeriodSeconds"] = grace
                self.put("pods", pod)
        return 201, _status(201, "", "")

    # -- watch ---------------------------------------------------------------------------------

    def watch_events(self, plural: str, namespace: str | None, query: dict[str, list[str]]) -> Iterator[dict[str, Any]]:
        """Events for one watch request, ending when its time is up or the server stops."""
        rv_text = (query.get("resourceVersion") or [""])[0]
        bookmarks = (query.get("allowWatchBookmarks") or ["false"])[0].lower() == "true"
        timeout = float((query.get("timeoutSeconds") or ["300"])[0])
        deadline = time.monotonic() + min(timeout, self.watch_timeout_cap)
        initial: list[dict[str, Any]] = []
        with self._lock:
            if rv_text in ("", "0"):
                # No resourceVersion: synthetic ADDED for the current state, then changes.
                initial = [{"type": "ADDED", "object": o} for o in self._select(plural, namespace, query)]
                cursor = len(self.state.history)
            else:
                since = int(rv_text)
                if since < self.state.compacted_rv:
                    initial = [{"type": "ERROR", "object": _status(
                        410, "Expired", f"too old resource version: {since} ({self.state.compacted_rv})")}]
                    cursor = -1
                else:
                    cursor = next((i for i, e in enumerate(self.state.history) if e.rv > since),
                                  len(self.state.history))
        yield from initial
        if cursor < 0:
            return
        while not self._stopping.is_set():
            with self._lock:
                while cursor >= len(self.state.history) and not self._stopping.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._lock.wait(left)
                if self._stopping.is_set():
                    return
                entry = self.state.history[cursor]
                cursor += 1
            if entry.plural != plural:
                continue
            if entry.type == "BOOKMARK":
                if bookmarks:
                    yield {"type": "BOOKMARK", "object": copy.deepcopy(entry.obj)}
                continue
            if self._select(plural, namespace, query, [entry.obj]):
                yield {"type": entry.type, "object": copy.deepcopy(entry.obj)}

    def take_watch_break(self) -> int | None:
        with self._lock:
            return self._break_watches.pop(0) if self._break_watches else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKubeApiServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out separately: no 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass  # quiet: pytest shows what matters

    def _send_json(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        try:
            self._serve(method)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout passed during an injected hang): nothing to answer.
            self.close_connection = True

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        # An observer's reads (the invariant checks) are not the product's traffic: neither logged
        # nor given the injected faults.
        observer = bool(self.headers.get(OBSERVER_HEADER))
        if not observer:
            self.fake.requests.append(RequestRecord(method, parts.path, query, body))
        fault = None if observer else self.fake._take_fault(method, parts.path)
        if fault is not None and fault.kind == "hang":
            self.fake._stopping.wait(fault.seconds)
        elif fault is not None:
            reason = "TooManyRequests" if fault.status == 429 else HTTPStatus(fault.status).phrase.replace(" ", "")
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            self._send_json(fault.status, _status(fault.status, reason, f"injected fault: {fault.status}"), headers)
            return
        try:
            if parts.path.rstrip("/") == "/version":
                self._send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})
                return
            if method == "GET" and (query.get("watch") or [""])[0].lower() in ("1", "true"):
                plural, namespace, _, _ = self.fake.route(method, parts.path)
                self._stream(plural, namespace or None, query)
                return
            code, out = self.fake.handle(method, parts.path, query, body)
        except ApiError as err:
            self._send_json(err.code, _status(err.code, err.reason, err.message))
            return
        self._send_json(code, out)

    def _stream(self, plural: str, namespace: str | None, query: dict[str, list[str]]) -> None:
        cut_after = self.fake.take_watch_break()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        try:
            for event in self.fake.watch_events(plural, namespace, query):
                if cut_after is not None and sent >= cut_after:
                    # An abrupt end: no terminating chunk, the connection just drops.
                    self.close_connection = True
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                sent += 1
            if cut_after is not None and sent >= cut_after:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - the base class's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")


__all__: list[str] = ["FakeKubeApiServer", "RequestRecord"]
