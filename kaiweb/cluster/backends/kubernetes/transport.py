"""The client's configuration (an explicit host, in-cluster, or KUBECONFIG; a connection pool as large
as the calls made at once) and the statuses the gateway's calls retry."""

from __future__ import annotations

import os

from kubernetes import client

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
# Concurrent API calls of one bulk `KubernetesGateway.apply` (KAI_BIND_CONCURRENCY).
DEFAULT_BIND_CONCURRENCY = 32
# Connections kept open beyond the bind pool: the watcher's streams and the pod-grouper's writers.
SPARE_CONNECTIONS = 16


def load_configuration(host: str | None = None, *, concurrency: int | None = None) -> client.Configuration:
    """Client configuration: an explicit host (tests), in-cluster (service account), or KUBECONFIG.

    Its urllib3 pool keeps a connection open for each of ``concurrency`` concurrent calls (default
    ``KAI_BIND_CONCURRENCY``) plus a few spare: a smaller pool would open and drop a connection (a
    TLS handshake) for every call beyond its size."""
    from kubernetes import config as kube_config

    configuration = client.Configuration()
    if host:
        configuration.host = host
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=configuration)
    else:
        # KUBECONFIG is read now, not when the client library was imported.
        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                     client_configuration=configuration)
    # The gateway retries with its own bounded backoff; urllib3's retries would multiply them.
    configuration.retries = False
    ensure_connection_pool(configuration, bind_concurrency() if concurrency is None else concurrency)
    return configuration


def bind_concurrency() -> int:
    """``KAI_BIND_CONCURRENCY`` when Django is configured, else the default; at least 1."""
    try:
        from django.conf import settings

        value = int(getattr(settings, "KAI_BIND_CONCURRENCY", DEFAULT_BIND_CONCURRENCY))
    except Exception:  # noqa: BLE001 - outside Django (a script, the fake server's tests)
        value = DEFAULT_BIND_CONCURRENCY
    return max(1, value)


def ensure_connection_pool(configuration: client.Configuration, concurrency: int) -> None:
    """Make the urllib3 pool of clients built from ``configuration`` hold ``concurrency`` calls
    at once (plus `SPARE_CONNECTIONS`). Only clients made afterwards see it: call before `ApiClient`."""
    wanted = max(1, concurrency) + SPARE_CONNECTIONS
    current = getattr(configuration, "connection_pool_maxsize", None) or 0
    configuration.connection_pool_maxsize = max(int(current), wanted)
