"""The gateway to a cluster: one protocol, two backends (`simulated`, `kubernetes`).

The scheduling cycle only talks to a `ClusterGateway`. Reads return a `Listing` (``.items``,
``.problems``, ``.resource_version``): an object the backend cannot read (a malformed
``gpu-fraction``, a negative request, a Queue with malformed resources, ...) is never raised;
it is returned in ``.problems`` as an `Unreadable` naming the field and the rule, and the other
objects are still returned. Actions are idempotent: repeating a bind or an evict that already
took effect succeeds with ``ALREADY_BOUND`` / ``ALREADY_GONE``. Failures raise a `ClusterError`.

What a backend can do beyond the protocol is declared in its ``capabilities`` (`Capability`), and
the scheduling cycle asks that set, never ``hasattr``:

* ``MIRRORED``: the cluster lives outside the database, which keeps a mirror of it
  (`kaiweb.cluster.mirror`): the cycle's observe step runs the pod-grouper and brings the mirror up to
  date, and after apply queue status, PodGroup status and why-pending go back to the cluster;
* ``RECONCILES``: ``is_bound(namespace, name, uid, node)`` / ``is_gone(namespace, name, uid)`` say
  whether a recorded action took effect, to reconcile a cycle that was interrupted;
* ``OWN_CLOCK``: ``advance()`` / ``now()``: the simulated backend's clock;
* ``BULK_APPLY``: ``apply(binds, evicts)`` carries out a cycle's actions at once.

`get_gateway(cluster)` is the one factory. Every failure of an action is a `ClusterError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from django.conf import settings

from kaiweb.cluster.backends.kubernetes.client import KubernetesGateway
from kaiweb.cluster.backends.simulated import SimulatedGateway
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
    QueueStatusUpdate,
)
from kaiweb.cluster.errors import (  # noqa: F401 - the errors are part of the gateway's contract
    Capability,
    ClusterError,
    ClusterRejected,
    ClusterTimeout,
    ClusterUnavailable,
)
from scheduler_core.model import QueueSpec


@runtime_checkable
class ClusterGateway(Protocol):
    """What the scheduling cycle and the Queue sync need from a cluster."""

    capabilities: frozenset[str]

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
        """Evict a pod with its grace period, as ``action.mode`` says: ``delete`` (as KAI: the pod is
        deleted, after the DisruptionTarget condition when ``action.disruption_target``) or ``evict``
        (the Eviction API: a PodDisruptionBudget may refuse, raised as `ClusterUnavailable` with status
        429). A pod that is gone is ``ALREADY_GONE``."""
        ...

    def upsert_queue(self, spec: QueueSpec) -> ObservedQueue:
        """Create the Queue CRD or replace its spec with ``spec`` (the database's version)."""
        ...

    def delete_queue(self, name: str) -> bool:
        """Delete the Queue CRD; False when it did not exist."""
        ...

    def write_queue_status(self, status: QueueStatusUpdate) -> None: ...

    def write_shard_conditions(self, name: str, conditions: Sequence[Mapping[str, str]]) -> bool:
        """Set kaiweb's conditions on the SchedulingShard object ``name`` (its others kept); False
        when the cluster has no such object."""
        ...

    def report_pending(self, pod: PodRef | ObservedPod, reason: str, message: str) -> None:
        """Explain why a pod is pending: condition PodScheduled=False (reason Unschedulable,
        the message) and a Warning event with ``reason`` and ``message``."""
        ...

    def report_pending_many(self, reports: Sequence[tuple[PodRef, str, str]]) -> list[ClusterError | None]:
        """`report_pending` for each ``(pod, reason, message)``, concurrently where the backend can; one
        entry per report, in order: None when written (or the pod is gone), else the error."""
        ...


def get_gateway(cluster: Any = None) -> ClusterGateway:
    """The gateway of a cluster's backend, or of the configured one (``settings.KAI_CLUSTER_BACKEND``)."""
    backend = getattr(cluster, "backend", None) or settings.KAI_CLUSTER_BACKEND
    if backend == "kubernetes":
        return KubernetesGateway.from_settings()
    if backend == "simulated":
        return SimulatedGateway(cluster)  # type: ignore[return-value]  # SimulatedGateway implements the ClusterGateway protocol
    raise ClusterError("get_gateway", f"KAI_CLUSTER_BACKEND must be 'simulated' or 'kubernetes', not {backend!r}")
