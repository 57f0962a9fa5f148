"""The namespace labels and annotations the mutating webhook reads (the queue default, whether the
namespace's project enforces our scheduler), from the API server.

One client per process, made from the settings as the gateway's (in-cluster, ``KUBECONFIG`` or
``KAI_KUBERNETES_HOST``); each namespace's labels and annotations are kept for ``KAI_GROUPER_CACHE_SECONDS``, as the
pod-grouper keeps them, and read with a short timeout: the webhook answers within the API server's
deadline even when the read fails, and a failed read only leaves the queue to the pod-grouper.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)
READ_TIMEOUT_SECONDS = 2.0
MAX_CACHED = 4096

_lock = threading.Lock()
_cache: dict[str, tuple[float, dict[str, dict[str, str]]]] = {}
_reader: Callable[[str], dict[str, dict[str, str]]] | None = None


def _api_reader() -> Callable[[str], dict[str, dict[str, str]]]:
    from kubernetes import client

    from kaiweb.cluster.backends.kubernetes.transport import load_configuration

    core = client.CoreV1Api(client.ApiClient(load_configuration(settings.KAI_KUBERNETES_HOST or None, concurrency=4)))

    def read(namespace: str) -> dict[str, dict[str, str]]:
        found: Any = core.read_namespace(namespace, _request_timeout=READ_TIMEOUT_SECONDS)
        return {"labels": {str(k): str(v) for k, v in (found.metadata.labels or {}).items()},
                "annotations": {str(k): str(v) for k, v in (found.metadata.annotations or {}).items()}}

    return read


def forget() -> None:
    """Drop the client and the cached labels (tests, and a changed configuration)."""
    global _reader
    with _lock:
        _reader = None
        _cache.clear()


def namespace_labels(namespace: str) -> dict[str, str]:
    """The namespace's labels; empty when the backend is not Kubernetes or the read failed."""
    return dict(_metadata(namespace).get("labels") or {})


def namespace_annotations(namespace: str) -> dict[str, str]:
    """The namespace's annotations; empty when the backend is not Kubernetes or the read failed."""
    return dict(_metadata(namespace).get("annotations") or {})


def _metadata(namespace: str) -> dict[str, dict[str, str]]:
    global _reader
    if settings.KAI_CLUSTER_BACKEND != "kubernetes" or not namespace:
        return {}
    now = time.monotonic()
    with _lock:
        hit = _cache.get(namespace)
        if hit is not None and hit[0] > now:
            return hit[1]
    try:
        with _lock:
            if _reader is None:
                _reader = _api_reader()
            reader = _reader
        found = reader(namespace)
    except Exception as exc:  # noqa: BLE001 - any failure only means "no default from the namespace"
        logger.warning("admission: could not read the labels of namespace %s: %s", namespace, exc)
        return {}
    with _lock:
        if len(_cache) >= MAX_CACHED:
            _cache.clear()
        _cache[namespace] = (now + float(settings.KAI_GROUPER_CACHE_SECONDS), found)
    return found
