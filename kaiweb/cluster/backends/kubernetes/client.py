"""The Kubernetes backend of the cluster gateway, on the official client (`kubernetes` 36.0.3):
the client's configuration, the transport and `KubernetesGateway`'s reads and writes.

Every call goes through `KubernetesGateway._call`: 429, 5xx, dropped connections and timeouts are
retried with bounded exponential backoff (honouring ``Retry-After``), then raised as
`ClusterUnavailable` / `ClusterTimeout`; other 4xx answers are raised as `ClusterRejected`
unless the caller treats them as "already done" (bind/evict idempotency). What the calls return is read
by `kaiweb.cluster.backends.kubernetes.parsing`; binds and evictions are `binding.Binding`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from kaiweb.cluster.backends.kubernetes import dra
from kaiweb.cluster.backends.kubernetes.binding import DEFAULT_RESERVATION_TIMEOUT, Binding, _uid_refused
from kaiweb.cluster.backends.kubernetes.device_reports import DeviceReports
from kaiweb.cluster.backends.kubernetes.org_objects import OrgObjects
from kaiweb.cluster.backends.kubernetes.parsing import (
    KAI_GROUP,
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
    QUEUE_GROUP,
    QUEUE_PLURAL,
    QUEUE_VERSION,
    _meta,
    parse_node,
    parse_other_pod,
    parse_pod,
    parse_pod_group,
    parse_priority_class,
    parse_queue,
    parse_topology,
    plural_of,
    pod_group_carries,
)
from kaiweb.cluster.backends.kubernetes.shards import parse_shard
from kaiweb.cluster.backends.kubernetes.transport import (
    DEFAULT_BIND_CONCURRENCY,
    RETRYABLE_STATUSES,
    bind_concurrency,
    load_configuration,
)
from kaiweb.cluster.backends.types import (
    GPU_RESOURCE,
    Listing,
    ObservedNode,
    ObservedOtherPod,
    ObservedPod,
    ObservedPodGroup,
    ObservedPriorityClass,
    ObservedQueue,
    ObservedShard,
    ObservedTopology,
    PodRef,
    QueueStatusUpdate,
    ResourceAmounts,
    Unreadable,
)
from kaiweb.cluster.errors import (
    Capability,
    ClusterError,
    ClusterRejected,
    ClusterTimeout,
    ClusterUnavailable,
)
from scheduler_core import queue_crd
from scheduler_core.model import QueueSpec

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

PAGE_SIZE = 500


class KubernetesGateway(Binding, OrgObjects):
    """`ClusterGateway` on a Kubernetes API server (see the module docstring)."""

    capabilities = frozenset({Capability.MIRRORED, Capability.RECONCILES, Capability.BULK_APPLY, Capability.DRA})

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        scheduler_name: str = "kai-scheduler",
        request_timeout: float = 10.0,
        max_attempts: int = 4,
        backoff_base: float = 0.2,
        backoff_max: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        reservation_namespace: str = "kai-resource-reservation",
        reservation_image: str = "registry.k8s.io/pause:3.10",
        bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
        reservation_timeout: float = DEFAULT_RESERVATION_TIMEOUT,
    ) -> None:
        self.api_client = api_client
        self.reservation_timeout = float(reservation_timeout)
        self.bind_concurrency = max(1, int(bind_concurrency))
        self.scheduler_name = scheduler_name
        self.request_timeout = request_timeout
        self.max_attempts = max(1, max_attempts)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.reservation_namespace = reservation_namespace
        self.reservation_image = reservation_image
        self._namespaces_seen: set[str] = set()
        self._uid_precondition: bool | None = None
        self._version_lock = threading.Lock()
        # While `apply` runs: each (node, GPU group)'s reservation pod, found or made once for all the
        # sharers it binds there (a lock per key, so the others wait for the first).
        self._holders: dict[tuple[str, str], list[Any]] | None = None
        self._held: dict[tuple[str, str], Mapping[str, Any]] | None = None
        # While `apply` runs with threads that may wait for device reports: the bound on API calls.
        self._gate: threading.BoundedSemaphore | None = None
        # While `apply` waits for devices: the reservation pods' watch, from the version of their list.
        self._board: DeviceReports | None = None
        self._held_version = ""
        self._holders_lock = threading.Lock()
        self.scheduling = client.SchedulingV1Api(api_client)
        self.version = client.VersionApi(api_client)
        self.dra_api = client.ResourceV1Api(api_client)

    @classmethod
    def from_settings(cls) -> KubernetesGateway:
        from django.conf import settings

        concurrency = bind_concurrency()
        configuration = load_configuration(getattr(settings, "KAI_KUBERNETES_HOST", None) or None,
                                           concurrency=concurrency)
        return cls(client.ApiClient(configuration),
                   scheduler_name=getattr(settings, "KAI_SCHEDULER_NAME", "kai-scheduler"),
                   request_timeout=float(getattr(settings, "KAI_KUBERNETES_TIMEOUT", 10.0)),
                   reservation_namespace=settings.KAI_RESERVATION_NAMESPACE,
                   reservation_image=settings.KAI_RESERVATION_IMAGE,
                   reservation_timeout=float(getattr(settings, "KAI_RESERVATION_ALLOCATION_TIMEOUT",
                                                     DEFAULT_RESERVATION_TIMEOUT)),
                   bind_concurrency=concurrency)

    # -- transport ---------------------------------------------------------------------------

    def _backoff(self, attempt: int, exc: ApiException | None) -> float:
        delay = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        retry_after = (exc.headers or {}).get("Retry-After") if exc is not None else None
        if retry_after and str(retry_after).isdigit():
            delay = min(self.backoff_max, max(delay, float(retry_after)))
        return delay

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with the request timeout and bounded retries (module docstring)."""
        kwargs.setdefault("_request_timeout", self.request_timeout)
        retryable = kwargs.pop("_retry_statuses", RETRYABLE_STATUSES)
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except ApiException as exc:
                status = int(exc.status or 0)
                if (status in retryable or status == 0) and attempt < self.max_attempts:
                    logger.info("%s: %s from the API server, retry %d", operation, status, attempt)
                    self._sleep(self._backoff(attempt, exc))
                    continue
                raise self._error(operation, exc, attempt) from exc
            except urllib3.exceptions.NewConnectionError as exc:
                # Checked before timeouts: urllib3 derives "connection refused" from ConnectTimeoutError.
                if attempt < self.max_attempts:
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise ClusterUnavailable(operation, f"cannot reach the API server after {attempt} attempts: "
                                         f"{exc}") from exc
            except urllib3.exceptions.TimeoutError as exc:
                if attempt < self.max_attempts:
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise ClusterTimeout(operation, f"no answer within {self.request_timeout:g}s after {attempt} "
                                     "attempts") from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt < self.max_attempts:
                    self._sleep(self._backoff(attempt, None))
                    continue
                raise ClusterUnavailable(operation, f"cannot reach the API server after {attempt} attempts: "
                                         f"{exc}") from exc

    @staticmethod
    def _error(operation: str, exc: ApiException, attempts: int) -> ClusterError:
        status = int(exc.status or 0)
        reason, message = exc.reason or "", ""
        try:
            body = json.loads(exc.body) if exc.body else {}
            message = body.get("message", "") if isinstance(body, dict) else ""
            reason = body.get("reason", reason) if isinstance(body, dict) else reason
        except (ValueError, TypeError):
            message = str(exc.body or "")[:300]
        text = f"{status} {reason}: {message}".strip().rstrip(":")
        if status in RETRYABLE_STATUSES or status == 0:
            return ClusterUnavailable(operation, f"{text} (after {attempts} attempts)", status=status, reason=reason)
        return ClusterRejected(operation, text, status=status, reason=reason)

    def _json(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call with ``_preload_content=False`` and decode the JSON body ourselves (no model objects)."""
        timeout = kwargs.pop("_request_timeout", self.request_timeout)
        retryable = kwargs.pop("_retry_statuses", RETRYABLE_STATUSES)

        def fetch(**extra: Any) -> bytes:
            # The body is read inside the retried call, so a stall mid-body is retried like any timeout.
            with self._gate or contextlib.nullcontext():
                resp = fn(*args, _preload_content=False, **kwargs, **extra)
                try:
                    return bytes(resp.data or b"")
                finally:
                    resp.release_conn()

        data = self._call(operation, fetch, _request_timeout=timeout, _retry_statuses=retryable)
        try:
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise ClusterUnavailable(operation, f"the API server answered something that is not JSON: "
                                     f"{data[:120]!r}") from exc

    def list_raw(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[list[Any], str]:
        """Every item of a (possibly paginated) list, and the list's resourceVersion."""
        items: list[Any] = []
        resource_version, token, restarts = "", None, 0
        while True:
            page_args = dict(kwargs, limit=PAGE_SIZE)
            if token:
                page_args["_continue"] = token
            try:
                body = self._json(operation, fn, *args, **page_args)
            except ClusterRejected as err:
                if err.status == 410 and token and restarts < 3:
                    # The continue token expired (the snapshot was compacted): list again from the start.
                    items, resource_version, token, restarts = [], "", None, restarts + 1
                    continue
                if err.status == 404:
                    raise ClusterRejected(operation, f"{err.detail} (is the resource's CRD installed?)",
                                          status=404, reason=err.reason) from err
                raise
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            resource_version = resource_version or str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                return items, resource_version

    @staticmethod
    def _listing(raws: list[Any], rv: str, parse: Callable[[Any], Any]) -> Listing[Any]:
        items, problems = [], []
        for raw in raws:
            parsed = parse(raw)
            (problems if isinstance(parsed, Unreadable) else items).append(parsed)
        for problem in problems:
            logger.warning("%s", problem.message)
        return Listing(tuple(items), tuple(problems), rv)

    # -- reads ------------------------------------------------------------------------------

    def ping(self) -> str:
        info = self._json("ping", self.version.get_code)
        return f"Kubernetes {info.get('gitVersion', '?')}"

    def list_nodes(self) -> Listing[ObservedNode]:
        return self._listing(*self.list_raw("list nodes", self.core.list_node), parse_node)

    def pod_field_selector(self) -> str:
        return f"spec.schedulerName={self.scheduler_name}"

    def other_pod_field_selector(self) -> str:
        """Bound pods of every other scheduler, but the reservation pods of shared GPUs (their
        sharers count them). Every field is one that never changes, so a pod never leaves the
        selection while it lives: a finished one is seen finishing."""
        return (f"spec.schedulerName!={self.scheduler_name},spec.nodeName!=,"
                f"metadata.namespace!={self.reservation_namespace}")

    def list_other_pods(self) -> Listing[ObservedOtherPod]:
        raws, rv = self.list_raw("list other schedulers' pods", self.core.list_pod_for_all_namespaces,
                                 field_selector=self.other_pod_field_selector())
        # The field selector already filters; this guards against servers that ignore it.
        raws = [r for r in raws if (r.get("spec") or {}).get("schedulerName") != self.scheduler_name
                and (r.get("spec") or {}).get("nodeName")
                and (r.get("metadata") or {}).get("namespace") != self.reservation_namespace]
        return self._listing(raws, rv, parse_other_pod)

    def list_pods(self) -> Listing[ObservedPod]:
        raws, rv = self.list_raw("list pods", self.core.list_pod_for_all_namespaces,
                              field_selector=self.pod_field_selector())
        # The field selector already filters; this guards against servers that ignore it.
        raws = [r for r in raws if (r.get("spec") or {}).get("schedulerName") == self.scheduler_name]
        return self._listing(raws, rv, parse_pod)

    def list_pod_groups(self) -> Listing[ObservedPodGroup]:
        return self._listing(*self.list_raw("list PodGroups", self.custom.list_cluster_custom_object,
                                         PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL), parse_pod_group)

    def list_queues(self) -> Listing[ObservedQueue]:
        return self._listing(*self.list_raw("list Queues", self.custom.list_cluster_custom_object,
                                         QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL), parse_queue)

    def list_topologies(self) -> Listing[ObservedTopology]:
        return self._listing(*self.list_raw("list Topologies", self.custom.list_cluster_custom_object,
                                         KAI_GROUP, "v1alpha1", "topologies"), parse_topology)

    def list_shards(self) -> Listing[ObservedShard]:
        return self._listing(*self.list_raw("list SchedulingShards", self.custom.list_cluster_custom_object,
                                         KAI_GROUP, "v1", "schedulingshards"), parse_shard)

    def list_priority_classes(self) -> Listing[ObservedPriorityClass]:
        return self._listing(*self.list_raw("list PriorityClasses", self.scheduling.list_priority_class),
                             parse_priority_class)

    # -- Dynamic Resource Allocation (resource.k8s.io/v1) --------------------------------------

    def read_dra(self) -> dra.Inventory:
        """The DeviceClasses, ResourceSlices and ResourceClaims (`dra.Inventory`); empty where the
        cluster serves no ``resource.k8s.io/v1`` (404)."""
        def listed(operation: str, fn: Callable[..., Any]) -> list[Any]:
            try:
                return self.list_raw(operation, fn)[0]
            except ClusterRejected as err:
                if err.status == 404:
                    return []
                raise

        return dra.Inventory.read(listed("list DeviceClasses", self.dra_api.list_device_class),
                                  listed("list ResourceSlices", self.dra_api.list_resource_slice),
                                  self.list_resource_claims_raw())

    def list_resource_claims_raw(self) -> list[dict[str, Any]]:
        try:
            return self.list_raw("list ResourceClaims", self.dra_api.list_resource_claim_for_all_namespaces)[0]
        except ClusterRejected as err:
            if err.status == 404:
                return []
            raise

    def write_claim_status(self, claim: dra.Claim, status: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the claim's status (``allocation``, ``reservedFor``) guarded by the resourceVersion it
        was read at: a claim changed since is refused (409), never overwritten."""
        body = {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
                "metadata": {"name": claim.name, "namespace": claim.namespace,
                             "resourceVersion": claim.resource_version, "uid": claim.uid},
                "status": dict(status)}
        return dict(self._json(f"write ResourceClaim {claim.namespace}/{claim.name} status",
                               self.dra_api.replace_namespaced_resource_claim_status, claim.name, claim.namespace,
                               body, _retry_statuses=()))

    def write_claim_finalizers(self, claim: dra.Claim, finalizers: Sequence[str]) -> dict[str, Any]:
        """Set the claim's finalizers, guarded by the resourceVersion it was read at."""
        body = {"metadata": {"finalizers": list(finalizers), "resourceVersion": claim.resource_version}}
        return dict(self._json(f"write ResourceClaim {claim.namespace}/{claim.name} finalizers",
                               self.dra_api.patch_namespaced_resource_claim, claim.name, claim.namespace, body,
                               _content_type="application/merge-patch+json", _retry_statuses=()))

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise

    # -- actions ----------------------------------------------------------------------------

    def report_pending(self, pod: PodRef | ObservedPod, reason: str, message: str) -> None:
        """Condition PodScheduled=False/Unschedulable with the message, and a Warning event."""
        operation = f"report pending pod {pod.namespace}/{pod.name}"
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        try:
            self._json(operation, self.core.patch_namespaced_pod_status, pod.name, pod.namespace,
                       {"status": {"conditions": [condition]}},
                       _content_type="application/strategic-merge-patch+json")
        except ClusterRejected as err:
            if err.status == 404:
                return  # the pod is gone: nothing left to explain
            raise
        self._event(PodRef(pod.namespace, pod.name, pod.uid), "Warning", reason, message)

    def report_pending_many(self, reports: Sequence[tuple[PodRef, str, str]]) -> list[ClusterError | None]:
        """`report_pending` for each ``(pod, reason, message)``, on up to ``bind_concurrency`` concurrent
        calls (the condition, then the event, of one pod stay in order)."""

        def report(item: tuple[PodRef, str, str]) -> ClusterError | None:
            try:
                self.report_pending(*item)
            except ClusterError as err:
                return err
            return None

        return self._concurrently(report, reports, "pending")

    def _event(self, pod: PodRef, type_: str, reason: str, message: str, *, kind: str = "Pod",
               api_version: str = "v1", bump: bool = True) -> None:
        """An event on the pod (or another object). Its name derives from what it says, so a repeated
        explanation bumps ``count`` on one event (as the kubelet's aggregation does) instead of piling up."""
        digest = hashlib.sha256(f"{pod.uid}|{type_}|{reason}|{message}".encode()).hexdigest()[:16]
        name = f"{pod.name}.{digest}"
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name, namespace=pod.namespace),
            involved_object=client.V1ObjectReference(api_version=api_version, kind=kind, name=pod.name,
                                                     namespace=pod.namespace, uid=pod.uid or None),
            type=type_, reason=reason, message=message, count=1, first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component=self.scheduler_name),
            reporting_component=self.scheduler_name,
        )
        operation = f"event on {kind} {pod.namespace}/{pod.name}"
        try:
            self._json(operation, self.core.create_namespaced_event, pod.namespace, event)
        except ClusterRejected as err:
            if err.status != 409:
                raise
            if not bump:
                return  # said already: once per distinct message is enough
            current = self._json(operation, self.core.read_namespaced_event, name, pod.namespace)
            self._json(operation, self.core.patch_namespaced_event, name, pod.namespace,
                       {"count": int(current.get("count") or 1) + 1,
                        "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
                       _content_type="application/merge-patch+json")

    # -- Queue CRDs -------------------------------------------------------------------------

    def read_queue(self, name: str) -> ObservedQueue | Unreadable | None:
        try:
            raw = self._json(f"read Queue {name}", self.custom.get_cluster_custom_object,
                             QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, name)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise
        return parse_queue(raw)

    def upsert_queue(self, spec: QueueSpec) -> ObservedQueue:
        """Create the Queue, or replace its spec (status untouched) at the version just read; a
        concurrent change makes the replace conflict, and it is read and replaced once more."""
        operation = f"write Queue {spec.name}"
        for _ in range(3):
            try:
                raw = self._json(operation, self.custom.get_cluster_custom_object,
                                 QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, spec.name)
            except ClusterRejected as err:
                if err.status != 404:
                    raise
                raw = None
            body = queue_crd.write(spec)
            try:
                if raw is None:
                    created = self._json(operation, self.custom.create_cluster_custom_object,
                                         QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, body)
                else:
                    meta = _meta(raw)
                    body["metadata"] = {"name": spec.name, "resourceVersion": meta.get("resourceVersion")}
                    # Keep what others put on the object; the database only owns the spec.
                    for key in ("labels", "annotations"):
                        if meta.get(key):
                            body["metadata"][key] = meta[key]
                    created = self._json(operation, self.custom.replace_cluster_custom_object,
                                         QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, spec.name, body)
            except ClusterRejected as err:
                if err.status == 409:
                    continue  # created or changed meanwhile: read again
                raise
            parsed = parse_queue(created)
            if isinstance(parsed, Unreadable):
                raise ClusterRejected(operation, f"the server returned an unreadable Queue: {parsed.message}")
            return parsed
        raise ClusterRejected(operation, "the Queue kept changing during 3 attempts", status=409, reason="Conflict")

    def delete_queue(self, name: str) -> bool:
        try:
            self._json(f"delete Queue {name}", self.custom.delete_cluster_custom_object,
                       QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, name)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        return True

    def write_shard_conditions(self, name: str, conditions: Sequence[Mapping[str, str]]) -> bool:
        """Set these conditions (type, status, reason, message) in the SchedulingShard object's
        status, keeping its other conditions and a condition's lastTransitionTime while its status
        holds; False when there is no such object. Written only when something changed."""
        try:
            current = self._json(f"read SchedulingShard {name}", self.custom.get_cluster_custom_object,
                                 KAI_GROUP, "v1", "schedulingshards", name)
        except ClusterRejected as err:
            if err.status == 404:
                return False
            raise
        status = current.get("status") if isinstance(current.get("status"), dict) else {}
        before = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        by_type = {c.get("type"): c for c in before}
        now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        generation = _meta(current).get("generation")
        ours = {}
        for condition in conditions:
            old = by_type.get(condition["type"]) or {}
            held = old.get("status") == condition["status"] and old.get("lastTransitionTime")
            ours[condition["type"]] = {
                **condition, "lastTransitionTime": held or now,
                **({"observedGeneration": generation} if isinstance(generation, int) else {})}
        after = [ours.pop(c.get("type"), c) for c in before] + list(ours.values())
        if after == before:
            return True
        self._json(f"write SchedulingShard {name} status", self.custom.patch_cluster_custom_object_status,
                   KAI_GROUP, "v1", "schedulingshards", name, {"status": {"conditions": after}})
        return True

    def write_queue_status(self, status: QueueStatusUpdate) -> None:
        body = {"status": {
            "allocated": _quantity_text(status.allocated),
            "allocatedNonPreemptible": _quantity_text(status.allocated_non_preemptible),
            "requested": _quantity_text(status.requested),
            "childQueues": list(status.child_queues),
        }}
        self._json(f"write Queue {status.name} status", self.custom.patch_cluster_custom_object_status,
                   QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, status.name, body)

    # -- reconciliation of an interrupted cycle -------------------------------------------------

    def is_bound(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Whether that pod incarnation is bound to ``node`` (a recorded bind took effect)."""
        pod = self.read_pod(namespace, name)
        if pod is None or (uid and _meta(pod).get("uid") != uid):
            return False
        return (pod.get("spec") or {}).get("nodeName") == node

    def is_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether that pod incarnation no longer exists or is terminating (an eviction took effect)."""
        pod = self.read_pod(namespace, name)
        if pod is None or (uid and _meta(pod).get("uid") != uid):
            return True
        return bool(_meta(pod).get("deletionTimestamp"))

    # -- the pod-grouper's reads and writes ----------------------------------------------------

    def list_scheduler_pods_raw(self) -> list[dict[str, Any]]:
        """Raw pods of our scheduler that still matter (not finished), for the pod-grouper."""
        raws, _ = self.list_raw("list pods", self.core.list_pod_for_all_namespaces,
                                field_selector=self.pod_field_selector())
        return [r for r in raws if isinstance(r, dict)
                and (r.get("spec") or {}).get("schedulerName") == self.scheduler_name
                and (r.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def missing_volume_sources(self, pods: Iterable[ObservedPod]) -> dict[tuple[str, str], tuple[str, str]]:
        """(namespace, pod) → (field, what is missing) for each pending pod whose ConfigMap or claim
        cannot be had, as kube-scheduler's volume predicates find: a ConfigMap that does not exist; a
        claim that does not exist; an unbound claim whose StorageClass does not exist and which no
        PersistentVolume of that class could satisfy. One read per object, whatever the pod count."""
        seen: dict[tuple[str, str, str], Any] = {}
        readers: dict[str, Callable[..., Any]] = {
            "ConfigMap": self.core.read_namespaced_config_map,
            "PersistentVolumeClaim": self.core.read_namespaced_persistent_volume_claim,
            "StorageClass": client.StorageV1Api(self.api_client).read_storage_class,
        }

        def get(kind: str, namespace: str, name: str) -> Any:
            key = (kind, namespace, name)
            if key not in seen:
                args = (name, namespace) if namespace else (name,)
                try:
                    seen[key] = self._json(f"read {kind} {namespace}/{name}", readers[kind], *args)
                except ClusterRejected as err:
                    if err.status != 404:
                        raise
                    seen[key] = None
            return seen[key]

        volume_classes: set[str] | None = None
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for pod in pods:
            if pod.node or not (pod.config_maps or pod.claims):
                continue
            ns, key = pod.namespace, (pod.namespace, pod.name)
            for field_, name in pod.config_maps:
                if get("ConfigMap", ns, name) is None:
                    out[key] = (field_, f'configmap "{name}" not found')
                    break
            for field_, name in pod.claims if key not in out else ():
                claim = get("PersistentVolumeClaim", ns, name)
                if claim is None:
                    out[key] = (field_, f'persistentvolumeclaim "{name}" not found')
                    break
                spec = claim.get("spec") or {}
                if spec.get("volumeName") or (claim.get("status") or {}).get("phase") == "Bound":
                    continue
                klass = str(spec.get("storageClassName") or "")
                if klass and get("StorageClass", "", klass) is not None:
                    continue
                if volume_classes is None:
                    raws, _ = self.list_raw("list PersistentVolumes", self.core.list_persistent_volume)
                    volume_classes = {str((v.get("spec") or {}).get("storageClassName") or "") for v in raws
                                      if (v.get("status") or {}).get("phase") in (None, "Available")}
                if klass not in volume_classes:
                    out[key] = (field_, f'persistentvolumeclaim "{name}" cannot be bound: '
                                        f'storageclass "{klass}" not found')
                    break
        return out

    def list_pods_raw(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Raw pods of a namespace carrying all ``labels`` (any scheduler)."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        raws, _ = self.list_raw(f"list pods in {namespace}", self.core.list_namespaced_pod, namespace,
                                label_selector=selector)
        return [r for r in raws if isinstance(r, dict)]

    def list_pod_groups_raw(self) -> list[dict[str, Any]]:
        raws, _ = self.list_raw("list PodGroups", self.custom.list_cluster_custom_object, PODGROUP_GROUP,
                                PODGROUP_VERSION, PODGROUP_PLURAL)
        return [r for r in raws if isinstance(r, dict)]

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Any object by apiVersion, kind, namespace and name (None when absent or not served)."""
        group, _, version = api_version.rpartition("/")
        operation = f"read {kind} {namespace}/{name}"
        try:
            if not group:
                if kind == "Pod":
                    return self._json(operation, self.core.read_namespaced_pod, name, namespace)
                if kind == "Namespace":
                    return self._json(operation, self.core.read_namespace, name)
                return None
            plural = plural_of(kind)
            if namespace:
                return self._json(operation, self.custom.get_namespaced_custom_object, group, version, namespace,
                                  plural, name)
            return self._json(operation, self.custom.get_cluster_custom_object, group, version, plural, name)
        except ClusterRejected as err:
            if err.status == 404:
                return None
            raise

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        raw = self.get_object("v1", "Namespace", "", namespace)
        return dict(_meta(raw).get("labels") or {}) if raw else {}

    def create_pod_group(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the PodGroup (`ClusterRejected` with status 409 when it exists); the object made."""
        meta = manifest["metadata"]
        return self._json(f"write PodGroup {meta['namespace']}/{meta['name']}", self.custom.create_namespaced_custom_object,
                          PODGROUP_GROUP, PODGROUP_VERSION, meta["namespace"], PODGROUP_PLURAL, dict(manifest))

    def upsert_pod_group(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the PodGroup, or update its spec, labels and owners when they differ."""
        meta = manifest["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        operation = f"write PodGroup {namespace}/{name}"
        try:
            return self.create_pod_group(manifest)
        except ClusterRejected as err:
            if err.status != 409:
                raise
        current = self._json(operation, self.custom.get_namespaced_custom_object, PODGROUP_GROUP, PODGROUP_VERSION,
                             namespace, PODGROUP_PLURAL, name)
        wanted_meta = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
        if pod_group_carries(current, manifest):
            return current
        body = {"metadata": {**wanted_meta, "resourceVersion": _meta(current).get("resourceVersion")},
                "spec": manifest.get("spec")}
        return self._json(operation, self.custom.patch_namespaced_custom_object, PODGROUP_GROUP, PODGROUP_VERSION,
                          namespace, PODGROUP_PLURAL, name, body, _content_type="application/merge-patch+json")

    def annotate_pod_groups(self, changes: Sequence[tuple[str, str, str, Mapping[str, str | None]]]
                            ) -> list[ClusterError | None]:
        """Merge annotations into PodGroups, each change ``(namespace, name, uid, {key: text or None})``
        into that incarnation only (None removes the key), on up to ``bind_concurrency`` concurrent
        calls. One entry per change, in order: None when written or when the PodGroup is gone (or is
        another incarnation by now), else the error."""

        def annotate(change: tuple[str, str, str, Mapping[str, str | None]]) -> ClusterError | None:
            namespace, name, uid, annotations = change
            try:
                self._merge_pod_group("annotate", namespace, name, uid,
                                      {"metadata": {"annotations": dict(annotations)}})
            except ClusterError as err:
                return err
            return None

        return self._concurrently(annotate, changes, "annotate")

    def _concurrently(self, call: Callable[[_T], ClusterError | None], items: Sequence[_T],
                      name: str) -> list[ClusterError | None]:
        """``call`` on each item, on up to ``bind_concurrency`` threads; the results in order."""
        if len(items) <= 1:
            return [call(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.bind_concurrency, len(items)), thread_name_prefix=name) as pool:
            return list(pool.map(call, items))

    def write_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self._json(f"write PodGroup {namespace}/{name} status", self.custom.patch_namespaced_custom_object_status,
                   PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, {"status": dict(status)},
                   _content_type="application/merge-patch+json")

    def assign_pod_group(self, namespace: str, name: str, uid: str, *, labels: Mapping[str, str | None],
                         annotations: Mapping[str, str | None], queue: str) -> bool:
        """Merge labels and annotations (None takes a key away) and ``spec.queue`` into that PodGroup
        incarnation: where a node pool's assignment is written. False when it is gone."""
        return self._merge_pod_group("assign", namespace, name, uid, {
            "metadata": {"labels": dict(labels), "annotations": dict(annotations)}, "spec": {"queue": queue}})

    def _merge_pod_group(self, verb: str, namespace: str, name: str, uid: str, body: dict[str, Any]) -> bool:
        """Merge-patch ``body`` into that PodGroup incarnation (guarded by ``uid`` when given). False when
        it is gone or was made again under the same name (`_uid_refused`); any other refusal raises."""
        if uid:
            body["metadata"]["uid"] = uid
        try:
            self._json(f"{verb} PodGroup {namespace}/{name}", self.custom.patch_namespaced_custom_object,
                       PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, body,
                       _content_type="application/merge-patch+json")
        except ClusterRejected as err:
            if err.status == 404 or _uid_refused(err):
                return False
            raise
        return True

    def label_pod(self, namespace: str, name: str, uid: str, *, labels: Mapping[str, str],
                  annotations: Mapping[str, str]) -> bool:
        """Merge labels and annotations into that pod incarnation (False when it is gone)."""
        body = {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}}
        if uid:
            body["metadata"]["uid"] = uid
        try:
            self._json(f"label pod {namespace}/{name}", self.core.patch_namespaced_pod, name, namespace, body,
                       _content_type="application/merge-patch+json")
        except ClusterRejected as err:
            if err.status == 404 or _uid_refused(err):
                return False
            raise
        return True

    def object_event(self, ref: Mapping[str, str], type_: str, reason: str, message: str) -> None:
        """An event on any object (``ref``: apiVersion, kind, namespace, name, uid)."""
        self._event(PodRef(ref["namespace"], ref["name"], ref.get("uid", "")), type_, reason, message,
                    kind=ref.get("kind", "Pod"), api_version=ref.get("apiVersion", "v1"), bump=False)



def _quantity_text(amounts: ResourceAmounts) -> dict[str, str]:
    gpus = f"{amounts.gpus:.4f}".rstrip("0").rstrip(".")
    return {"cpu": f"{amounts.cpu_millis}m", "memory": str(amounts.memory_bytes), GPU_RESOURCE: gpus or "0"}
