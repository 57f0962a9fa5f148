"""The gateway to a cluster: one protocol, two backends (`simulated`, `kubernetes`).

The scheduling cycle only talks to a `ClusterGateway`. Reads return a `Listing` (``.items``,
``.problems``, ``.resource_version``): an object the backend cannot read (a malformed
``gpu-fraction``, a negative request, a Queue with malformed resources, ...) is never raised;
it is returned in ``.problems`` as an `Unreadable` naming the field and the rule, and the other
objects are still returned. Actions are idempotent: repeating a bind or an evict that already
took effect succeeds with ``ALREADY_BOUND`` / ``ALREADY_GONE``. Failures raise a `ClusterError`.

Optional hooks the scheduling cycle calls when a backend has them:

* ``sync_into(cluster)`` in the observe step: bring the database mirror (Node, GpuDevice,
  Workload, Pod, Queue rows) up to date; the Kubernetes backend lists everything unless
  ``manage.py watch_cluster`` keeps the mirror current (see `kaiweb.cluster.mirror`);
* ``write_back(cycle)`` after apply: queue status and why-pending onto the cluster's objects;
* ``is_bound(namespace, name, uid, node)`` / ``is_gone(namespace, name, uid)``: whether a
  recorded action took effect, to reconcile a cycle that was interrupted;
* ``advance()`` / ``now()`` / ``apply(binds, evicts)``: the simulated backend's clock and bulk apply.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from django.conf import settings

from kaiweb.cluster.backends.types import (
    ActionResult,
    BindAction,
    EvictAction,
    Listing,
    ObservedNode,
    ObservedPod,
    ObservedPodGroup,
    ObservedPriorityClass,
    ObservedQueue,
    PodRef,
    QueueSpec,
    QueueStatusUpdate,
)


class ClusterError(Exception):
    """A cluster call failed. ``operation`` says what was attempted, ``status`` the HTTP status
    (0 when no answer came), and the message is meant for an operator."""

    def __init__(self, operation: str, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(f"{operation}: {message}")
        self.operation = operation
        self.status = status
        self.reason = reason
        self.detail = message


class ClusterUnavailable(ClusterError):
    """The API server kept answering 429/5xx or refused connections after the bounded retries."""


class ClusterTimeout(ClusterError):
    """The API server did not answer within the request timeout, after the bounded retries."""


class ClusterRejected(ClusterError):
    """The API server refused the request (a 4xx other than the idempotent cases)."""


@runtime_checkable
class ClusterGateway(Protocol):
    """What the scheduling cycle and the Queue sync need from a cluster."""

    def ping(self) -> str:
        """A short description of the cluster (its version); raises `ClusterError` if unreachable."""
        ...

    def list_nodes(self) -> Listing[ObservedNode]: ...

    def list_pods(self) -> Listing[ObservedPod]:
        """Pods whose ``spec.schedulerName`` is the configured scheduler name (``KAI_SCHEDULER_NAME``,
        default ``kai-scheduler``), all namespaces."""
        ...

    def list_pod_groups(self) -> Listing[ObservedPodGroup]: ...

    def list_queues(self) -> Listing[ObservedQueue]: ...

    def list_priority_classes(self) -> Listing[ObservedPriorityClass]: ...

    def bind(self, action: BindAction) -> ActionResult:
        """Place a pod on a node (and its GPU group for fractions). Binding a pod already bound
        to that node is ``ALREADY_BOUND``; bound elsewhere or gone raises `ClusterRejected`."""
        ...

    def evict(self, action: EvictAction) -> ActionResult:
        """Evict a pod with its grace period. A pod that is gone is ``ALREADY_GONE``."""
        ...

    def upsert_queue(self, spec: QueueSpec) -> ObservedQueue:
        """Create the Queue CRD or replace its spec with ``spec`` (the database's version)."""
        ...

    def delete_queue(self, name: str) -> bool:
        """Delete the Queue CRD; False when it did not exist."""
        ...

    def write_queue_status(self, status: QueueStatusUpdate) -> None: ...

    def report_pending(self, pod: PodRef | ObservedPod, reason: str, message: str) -> None:
        """Explain why a pod is pending: condition PodScheduled=False (reason Unschedulable,
        the message) and a Warning event with ``reason`` and ``message``."""
        ...


def get_gateway() -> ClusterGateway:
    """The gateway of the configured backend (``settings.KAI_CLUSTER_BACKEND``)."""
    backend = settings.KAI_CLUSTER_BACKEND
    if backend == "kubernetes":
        from kaiweb.cluster.backends.kubernetes import KubernetesGateway

        return KubernetesGateway.from_settings()
    if backend == "simulated":
        # Imported lazily: the simulated backend lives in its own module.
        from kaiweb.cluster.backends.simulated import SimulatedGateway  # type: ignore[import-not-found]

        return SimulatedGateway()  # type: ignore[no-any-return]
    raise ClusterError("get_gateway", f"KAI_CLUSTER_BACKEND must be 'simulated' or 'kubernetes', not {backend!r}")
