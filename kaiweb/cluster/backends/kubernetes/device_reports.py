"""The devices the reservation pods report, learnt from one watch while a cycle's binds wait for them.

A sharer of a new device is bound once the device's reservation pod reports which device it holds
(``run.ai/reserve_for_gpu_index``), as KAI's binder waits for it. Reading each reservation pod again
until then costs one API call per waiting device per poll, and a fill waits for a thousand devices
at once. `DeviceReports` holds one watch on the reservation namespace instead, from the
resourceVersion of the list `apply` already made, and wakes each waiting bind when its pod reports
(or is deleted). When the watch cannot be held (refused, expired, cut), every waiter is told to read
its pod itself, as it did before; nothing is decided from a watch that may have missed an event.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

logger = logging.getLogger(__name__)

# What `wait` answers besides the pod: the pod was deleted; the watch is gone, read the pod yourself.
GONE = "gone"
READ_IT = "read it"
# A watch connection's length: the server ends it, and the next one starts from the last resourceVersion.
WATCH_SECONDS = 60


class DeviceReports:
    """One watch on the reservation pods of ``namespace`` (``selector``), from ``resource_version``.

    ``list_fn`` is the client's ``list_namespaced_pod``; ``device`` reads a pod's reported device
    ("" until it reports). Start it, `wait` for pods by name from any thread, and `stop` it."""

    def __init__(self, list_fn: Callable[..., Any], namespace: str, selector: str, resource_version: str,
                 device: Callable[[Mapping[str, Any]], str], *, request_timeout: float = 10.0) -> None:
        self._list_fn = list_fn
        self._namespace = namespace
        self._selector = selector
        self._rv = resource_version
        self._device = device
        self._request_timeout = request_timeout
        self._lock = threading.Lock()
        self._reported: dict[str, Mapping[str, Any]] = {}
        self._gone: set[str] = set()
        self._waiting: dict[str, threading.Event] = {}
        self._broken = not resource_version
        self._stopping = False
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="kai-device-reports", daemon=True)
        self.events = 0

    def start(self) -> DeviceReports:
        if not self._broken:
            self._thread.start()
        return self

    def stop(self) -> None:
        """End the watch now (its connection is shut, so a blocked read returns)."""
        with self._lock:
            self._stopping = True
            response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001 - already closed: nothing left to end
                pass
        if self._thread.is_alive():
            self._thread.join(timeout=self._request_timeout)

    def wait(self, name: str, timeout: float) -> Mapping[str, Any] | str | None:
        """The pod ``name`` once it reports its device; `GONE` once deleted; `READ_IT` when the watch
        cannot tell (the caller reads the pod); None when ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if name in self._reported:
                    return self._reported[name]
                if name in self._gone:
                    return GONE
                if self._broken:
                    return READ_IT
                event = self._waiting.setdefault(name, threading.Event())
            left = deadline - time.monotonic()
            if left <= 0 or not event.wait(left):
                return None
            with self._lock:
                if self._waiting.get(name) is event:
                    del self._waiting[name]

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        return
                self._stream_once()
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if not self._stopping:
                logger.info("reservation pods' watch ended (%s): the waiting binds read their pods", exc)
        finally:
            with self._lock:
                self._broken = True
                waiting = list(self._waiting.values())
            for event in waiting:
                event.set()

    def _stream_once(self) -> None:
        response = self._list_fn(self._namespace, label_selector=self._selector, watch=True,
                                 resource_version=self._rv, allow_watch_bookmarks=True,
                                 timeout_seconds=WATCH_SECONDS, _preload_content=False,
                                 _request_timeout=(self._request_timeout, WATCH_SECONDS + 15))
        with self._lock:
            self._response = response
            stopping = self._stopping
        try:
            if stopping:
                return
            for line in iter_resp_lines(response):
                if not line or line.isspace():
                    continue
                self._take(json.loads(line))
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()

    def _take(self, event: Any) -> None:
        if not isinstance(event, Mapping):
            return
        kind, pod = event.get("type"), event.get("object")
        if not isinstance(pod, Mapping):
            return
        if kind == "ERROR":
            raise ApiException(status=pod.get("code"), reason=f"{pod.get('reason')}: {pod.get('message')}")
        meta = pod.get("metadata") or {}
        name, rv = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
        with self._lock:
            if rv:
                self._rv = rv
            if kind == "BOOKMARK" or not name:
                return
            self.events += 1
            if kind == "DELETED" or meta.get("deletionTimestamp"):
                self._gone.add(name)
                self._reported.pop(name, None)
            elif self._device(pod):
                self._reported[name] = pod
            else:
                return
            event_ = self._waiting.pop(name, None)
        if event_ is not None:
            event_.set()
