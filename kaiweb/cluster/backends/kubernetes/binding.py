"""A cycle's actions carried out on the API server, as KAI's binder does: evictions (Eviction API or
delete, per the shard), then binds through the Binding subresource, on up to ``bind_concurrency``
concurrent calls; a fraction of a GPU is bound onto a reservation pod that holds its device (found or
made once per node and group for all the sharers of a cycle), and the device's group goes on the pod as
KAI's label. `Binding` is the part of `KubernetesGateway` that does it, on the gateway's transport
(`KubernetesGateway._call`)."""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from kaiweb.cluster.backends.kubernetes import device_reports, gpu_sharing
from kaiweb.cluster.backends.kubernetes.device_reports import DeviceReports
from kaiweb.cluster.backends.kubernetes.parsing import _meta
from kaiweb.cluster.backends.kubernetes.transport import RETRYABLE_STATUSES
from kaiweb.cluster.backends.types import (
    BIND_KEY_ANNOTATION,
    DISRUPTION_TARGET,
    EVICT_BY_DELETE,
    EVICT_BY_EVICTION_API,
    EVICTION_MODES,
    GPU_FRACTION_NUM_DEVICES_ANNOTATION,
    GPU_GROUP_LABEL,
    GPU_MEMORY_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    MULTI_GPU_GROUP_PREFIX,
    PREEMPTION_BY_SCHEDULER,
    ActionOutcome,
    ActionResult,
    BindAction,
    EvictAction,
    PodRef,
)
from kaiweb.cluster.errors import (
    ClusterError,
    ClusterRejected,
    ClusterUnavailable,
)

logger = logging.getLogger(__name__)

# How long a sharer's bind waits for a new reservation pod to report its device (KAI's binder flag
# --resource-reservation-allocation-timeout, whose default is 40 s); 0 binds without waiting, which
# the default reservation image (pause, reporting no device) needs.
DEFAULT_RESERVATION_TIMEOUT = 0.0
# While binds may wait for device reports: a thread per device waiting (a wait holds a thread, not an
# API call), at most this many per allowed API call beyond them. More devices in flight than the node
# agents report within the timeout fail their binds (a fill of 1,400 devices with all of them in flight
# timed out 822 on KWOK); fewer leave the agents idle.
WAITING_DEVICES_PER_CALL = 8

# How an action has its event written: at once (`bind`, `evict`) or queued behind the actions (`apply`).
_Later = Callable[[Callable[[], None]], None]


def _at_once(note: Callable[[], None]) -> None:
    note()


def _in_turns(binds: Sequence[BindAction]) -> list[int]:
    """The binds' indexes, the first sharer of each device (node and groups) first, then the second
    of each, and so on; binds sharing nothing keep their place in the first turn."""
    turn: dict[tuple[str, tuple[str, ...]], int] = {}
    ranked = []
    for i, b in enumerate(binds):
        key = (b.node, b.gpu_groups)
        ranked.append((turn.get(key, 0) if b.gpu_groups else 0, i))
        if b.gpu_groups:
            turn[key] = turn.get(key, 0) + 1
    return [i for _, i in sorted(ranked)]


_RESERVATION_SELECTOR = f"{gpu_sharing.APP_LABEL}={gpu_sharing.RESERVATION_APP}"


def _reported_device(pod: Mapping[str, Any]) -> str:
    """The device a reservation pod reports holding (``run.ai/reserve_for_gpu_index``), "" until then."""
    return str((_meta(pod).get("annotations") or {}).get(gpu_sharing.GPU_INDEX_ANNOTATION) or "")


class _DeviceNotReported(ClusterRejected):
    """A reservation pod did not report its device in time, or was deleted first: every sharer of its
    group in the apply fails with it."""


class Binding:
    """The binds and evictions of `KubernetesGateway` (see the module docstring)."""

    def apply(self, binds: Sequence[BindAction] = (), evicts: Sequence[EvictAction] = ()
              ) -> list[ActionResult | Exception]:
        """A cycle's actions at once, as KAI's binder carries them out: the evictions, then the binds,
        each set on up to ``bind_concurrency`` concurrent API calls (the binds start once every
        eviction has its answer, so a bind onto what an eviction frees comes after it).

        One entry per action, evictions first, each in the order given: the `ActionResult`, or the
        exception the action raised, as `evict` and `bind` called one after another give. The events
        that say what was done (``Scheduled``, the eviction's reason) are queued behind the actions
        in the same pool: no action waits for an event, and an event that cannot be written is logged.

        Shared-GPU binds that may wait for a device report (``reservation_timeout``) start in turns,
        the first sharer of every device before the second of any, and run on more threads than
        ``bind_concurrency`` while the API calls stay within it: a sharer waiting for its device
        holds a thread, not an API call, and the sharers of one device do not fill the pool."""
        if not binds and not evicts:
            return []
        notes: list[Future[None]] = []
        guard = threading.Lock()
        sharing = any(b.gpu_groups for b in binds)
        waits = sharing and self.reservation_timeout > 0
        devices = len({(b.node, b.gpu_groups) for b in binds if b.gpu_groups}) if waits else 0
        workers = min(self.bind_concurrency + min(devices, WAITING_DEVICES_PER_CALL * self.bind_concurrency),
                      max(len(binds), len(evicts)))
        self._holders = {}
        self._held = self._reservations_held() if sharing else None
        self._gate = threading.BoundedSemaphore(self.bind_concurrency) if waits else None
        if waits and self._held is not None:
            self._board = DeviceReports(
                self.core.list_namespaced_pod, self.reservation_namespace, _RESERVATION_SELECTOR,
                self._held_version, _reported_device, request_timeout=self.request_timeout).start()
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-apply") as pool:

                def later(note: Callable[[], None]) -> None:
                    with guard:
                        notes.append(pool.submit(note))

                results = self._all(pool, self._evict, evicts, later)
                results += self._all(pool, self._bind, binds, later, order=_in_turns(binds) if waits else None)
                for done in notes:
                    exc = done.exception()
                    if exc is not None:
                        logger.warning("an event after apply was not written: %s", exc)
        finally:
            if self._board is not None:
                self._board.stop()
            self._holders = self._held = self._gate = self._board = None
        return results

    def _reservations_held(self) -> dict[tuple[str, str], Mapping[str, Any]] | None:
        """The live reservation pods by (node, GPU group), listed once for a whole `apply` (one
        list instead of one per group: each is a read of every reservation pod, so a fill making
        thousands of groups would read them thousands of times). None when they cannot be listed
        now: each group is then looked up on its own."""
        ns = self.reservation_namespace
        try:
            self._ensure_namespace(ns, "list reservation pods")
            held, self._held_version = self.list_raw("list reservation pods", self.core.list_namespaced_pod, ns,
                                                     label_selector=_RESERVATION_SELECTOR)
        except ClusterError as exc:
            logger.warning("reservation pods not listed before the binds, looked up one by one: %s", exc)
            return None
        index: dict[tuple[str, str], Mapping[str, Any]] = {}
        for r in held:
            node = (r.get("spec") or {}).get("nodeName")
            group = (_meta(r).get("labels") or {}).get(GPU_GROUP_LABEL)
            if node and group and not _meta(r).get("deletionTimestamp"):
                index.setdefault((node, group), r)
        return index

    @staticmethod
    def _all(pool: ThreadPoolExecutor, fn: Callable[[Any, _Later], ActionResult], actions: Sequence[Any],
             later: _Later, order: Sequence[int] | None = None) -> list[ActionResult | Exception]:
        """Each action's result (or error) in the order given; submitted in ``order`` (indexes)."""
        submitted = {i: pool.submit(fn, actions[i], later) for i in (order if order is not None else range(len(actions)))}
        futures = [submitted[i] for i in range(len(actions))]
        results: list[ActionResult | Exception] = []
        for future in futures:
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001 - the action's failure is its result, as on the serial path
                results.append(exc)
        return results

    def bind(self, action: BindAction) -> ActionResult:
        """Bind through the Binding subresource (its ``Scheduled`` event written before returning)."""
        return self._bind(action, _at_once)

    def _bind(self, action: BindAction, later: _Later) -> ActionResult:
        """Bind through the Binding subresource; ``later`` writes the ``Scheduled`` event.

        For a shared GPU the still-unbound pod first gets the labels of its GPU groups, as KAI's
        binder writes them (`gpu_sharing.group_labels`: one device, ``runai-gpu-group``; several, one
        ``runai-gpu-group/<group>`` each), guarded by its resourceVersion, and each group its
        reservation pod; the Binding carries the decision's idempotency key and GPU portion as
        annotations, which the API server copies onto the pod. The server answers
        a Binding with a ``Status`` the client cannot turn into a ``V1Binding`` (its ``target``
        is required), so the raw response is used. A 409 is read back: already on this node is
        success; elsewhere, or another incarnation of the pod, is refused.
        """
        operation = f"bind pod {action.namespace}/{action.name} to {action.node}"
        if action.uid and not action.gpu_groups and not self._binding_checks_uid():
            # An API server before 1.27 may bind whatever pod has the name (the Binding's uid is no
            # precondition there): check the incarnation first. A newer one refuses another incarnation
            # with 409, read back below; a shared-GPU bind checks it in its guarded label patch.
            done = self._check_bindable(action, self.read_pod(action.namespace, action.name), operation)
            if done is not None:
                return done
        if action.gpu_groups:
            done, pod = self._label_gpu_groups(action, operation)
            if done is not None:
                return done
            self._reserve_shared_gpu(action, pod, operation)
        annotations = {}
        if action.idempotency_key:
            annotations[BIND_KEY_ANNOTATION] = action.idempotency_key
        if action.gpu_portion is not None:
            annotations[GPU_PORTION_ANNOTATION] = f"{action.gpu_portion:g}"
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=action.name, namespace=action.namespace, uid=action.uid or None,
                                         annotations=annotations or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=action.node),
        )
        try:
            self._json(operation, self.core.create_namespaced_pod_binding, action.name, action.namespace, body)
        except ClusterRejected as err:
            if err.status == 404:
                raise ClusterRejected(operation, "the pod no longer exists", status=404) from err
            if err.status != 409:
                raise
            done = self._check_bindable(action, self.read_pod(action.namespace, action.name), operation)
            if done is not None:
                return done
            raise ClusterRejected(operation, f"the server refused the binding: {err.detail}", status=409,
                                  reason="Conflict") from err
        message = f"Successfully assigned pod {action.namespace}/{action.name} to node {action.node}"
        later(functools.partial(self._note, operation, PodRef(action.namespace, action.name, action.uid),
                                "Normal", "Scheduled", f"{message} at node-pool {action.node_pool or 'default'}",
                                bump=False))
        return ActionResult(ActionOutcome.BOUND, message)

    def _note(self, operation: str, pod: PodRef, type_: str, reason: str, message: str, *, bump: bool = True) -> None:
        """An event after an action: the action took effect, so a lost event is only logged."""
        try:
            self._event(pod, type_, reason, message, bump=bump)
        except ClusterError as exc:
            logger.warning("%s: %s event not written: %s", operation, reason, exc)

    def _binding_checks_uid(self) -> bool:
        """Whether the server takes the ``metadata.uid`` of a pod's ``binding`` subresource as a
        precondition: since Kubernetes 1.23, but for 1.25 and 1.26 before the fix of 1.27
        (kubernetes#105913, #116550); asked once. (The older ``bindings`` resource drops the uid.)"""
        with self._version_lock:
            if self._uid_precondition is None:
                try:
                    info = self._json("read the server version", self.version.get_code)
                    major = int(re.sub(r"\D.*", "", str(info.get("major", ""))) or 0)
                    minor = int(re.sub(r"\D.*", "", str(info.get("minor", ""))) or 0)
                    self._uid_precondition = (major, minor) >= (1, 27)
                except (ClusterError, ValueError, AttributeError):
                    return False  # unknown for now: read the pod first, ask again next time
            return self._uid_precondition

    def _check_bindable(self, action: BindAction, pod: Mapping[str, Any] | None, operation: str) -> ActionResult | None:
        """None if the pod can still be bound; ALREADY_BOUND if it is on the target node; else raises."""
        if pod is None:
            raise ClusterRejected(operation, "the pod no longer exists", status=404)
        uid = _meta(pod).get("uid", "")
        if action.uid and uid != action.uid:
            raise ClusterRejected(operation, f"the pod was replaced (uid {uid}, decided for {action.uid})",
                                  status=409, reason="Conflict")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound == action.node:
            return ActionResult(ActionOutcome.ALREADY_BOUND, f"pod {action.namespace}/{action.name} was "
                                f"already bound to {action.node}")
        if bound:
            raise ClusterRejected(operation, f"the pod is already bound to {bound}", status=409, reason="Conflict")
        return None

    def _reserve_shared_gpu(self, action: BindAction, pod: Mapping[str, Any], operation: str) -> None:
        """Before a sharer (``pod``, as just read) is bound: the reservation pod of each of its groups
        on the node (made once, and waited for until it reports its device, as KAI's binder waits),
        and the sharer's ConfigMap (`kaiweb.cluster.backends.kubernetes.gpu_sharing`), whose
        ``NVIDIA_VISIBLE_DEVICES`` lists the devices in the order of the groups (as KAI's binder joins
        them). A reservation that cannot be made, or does not report its device within
        ``reservation_timeout``, refuses the bind: the pod would otherwise run on a device the plugin
        may give away, or start without knowing which device is its own."""
        holders = [self._reservation_holder(action, group, pod, operation) for group in action.gpu_groups]
        indexes = [(_meta(h).get("annotations") or {}).get(gpu_sharing.GPU_INDEX_ANNOTATION) for h in holders]
        memory = (_meta(pod).get("annotations") or {}).get(GPU_MEMORY_ANNOTATION)
        config_map = gpu_sharing.sharing_config_map(
            pod, portion=action.gpu_portion, gpu_memory_mib=int(memory) if str(memory or "").isdigit() else None,
            device_index=",".join(str(i) for i in indexes) if all(indexes) else None)
        try:
            self._json(f"{operation}: ConfigMap", self.core.create_namespaced_config_map, action.namespace, config_map)
        except ClusterRejected as err:
            if err.status != 409:
                raise
            self._json(f"{operation}: ConfigMap", self.core.patch_namespaced_config_map,
                       config_map["metadata"]["name"], action.namespace, {"data": config_map["data"]},
                       _content_type="application/merge-patch+json")

    def _reservation_holder(self, action: BindAction, group: str, pod: Mapping[str, Any],
                            operation: str) -> Mapping[str, Any]:
        """The reservation pod of one of the sharer's (node, GPU group), with its device reported:
        found, else made. Within `apply`, once per (node, group) for all its sharers; a device that
        was not reported in time fails them all at once, any other failure is not remembered (the
        next sharer tries)."""
        memo = self._holders
        if memo is None:
            return self._reported(*self._find_or_make_holder(action, group, pod, operation), operation)
        with self._holders_lock:
            entry = memo.setdefault((action.node, group), [threading.Lock(), None, None])
        with entry[0]:
            if entry[2] is not None:
                raise entry[2]
            if entry[1] is None:
                try:
                    entry[1] = self._reported(*self._find_or_make_holder(action, group, pod, operation), operation)
                except _DeviceNotReported as late:
                    entry[2] = late
                    raise
            return entry[1]

    def _reported(self, holder: Mapping[str, Any], made: bool, operation: str) -> Mapping[str, Any]:
        """``holder`` once it carries its device (``run.ai/reserve_for_gpu_index``), read again until
        then, for at most ``reservation_timeout`` seconds (KAI's binder waits the same way, 40 s by
        default). A reservation pod made for this bind that never reports is deleted, as KAI's binder
        deletes it, and the bind refused; 0 s takes the holder as it is."""
        if _reported_device(holder) or self.reservation_timeout <= 0:
            return holder
        ns, name = self.reservation_namespace, str(_meta(holder).get("name", ""))
        deadline = time.monotonic() + self.reservation_timeout
        gone = _DeviceNotReported(operation, f"the reservation pod {ns}/{name} was deleted before it reported its "
                                  "device", status=409, reason="Conflict")
        board = self._board
        if board is not None:
            # One watch for every waiting bind (`DeviceReports`); when it cannot tell, read the pod.
            seen = board.wait(name, self.reservation_timeout)
            if seen == device_reports.GONE:
                raise gone
            if isinstance(seen, Mapping):
                return seen
        pause = 0.05
        while time.monotonic() < deadline:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 1.0)
            current = self.read_pod(ns, name)
            if current is None:
                raise gone
            if _reported_device(current):
                return current
        said = (f"the reservation pod {ns}/{name} did not report its device ({gpu_sharing.GPU_INDEX_ANNOTATION}) "
                f"within {self.reservation_timeout:g} s")
        if made:
            try:
                self._json(f"{operation}: delete reservation {name}", self.core.delete_namespaced_pod, name, ns,
                           grace_period_seconds=0)
                said += "; it was deleted"
            except ClusterRejected as err:
                if err.status != 404:
                    logger.warning("%s: %s, and could not be deleted: %s", operation, said, err)
        raise _DeviceNotReported(operation, said, status=504, reason="Timeout")

    def _find_or_make_holder(self, action: BindAction, group: str, pod: Mapping[str, Any],
                             operation: str) -> tuple[Mapping[str, Any], bool]:
        """The reservation pod of (node, group), and whether this call made it."""
        ns = self.reservation_namespace
        self._ensure_namespace(ns, operation)
        listed = self._held
        if listed is not None:
            holder = listed.get((action.node, group))
        else:
            selector = f"{gpu_sharing.APP_LABEL}={gpu_sharing.RESERVATION_APP},{GPU_GROUP_LABEL}={group}"
            held, _ = self.list_raw(f"{operation}: reservation", self.core.list_namespaced_pod, ns,
                                    label_selector=selector)
            holder = next((r for r in held if (r.get("spec") or {}).get("nodeName") == action.node
                           and not _meta(r).get("deletionTimestamp")), None)
        if holder is not None:
            return holder, False
        manifest = gpu_sharing.reservation_pod(namespace=ns, node=action.node, group=group,
                                               image=self.reservation_image,
                                               tolerations=(pod.get("spec") or {}).get("tolerations") or ())
        try:
            return self._json(f"{operation}: reservation", self.core.create_namespaced_pod, ns, manifest), True
        except ClusterRejected as err:
            if err.status != 409:
                raise
            return self.read_pod(ns, manifest["metadata"]["name"]) or {}, False

    def _ensure_namespace(self, name: str, operation: str) -> None:
        """The reservation namespace: read (an install makes it), else created (a plain kubeconfig)."""
        if name in self._namespaces_seen:
            return
        try:
            self._json(f"{operation}: namespace {name}", self.core.read_namespace, name)
        except ClusterRejected as err:
            if err.status != 404:
                raise
            try:
                self._json(f"{operation}: namespace {name}", self.core.create_namespace, {"metadata": {"name": name}})
            except ClusterRejected as again:
                if again.status != 409:
                    raise
        self._namespaces_seen.add(name)

    def collect_reservations(self) -> list[str]:
        """Delete the reservation pods whose GPU group no live sharer uses any more; their names."""
        ns = self.reservation_namespace
        try:
            held, _ = self.list_raw("list reservation pods", self.core.list_namespaced_pod, ns,
                                    label_selector=_RESERVATION_SELECTOR)
        except ClusterRejected as err:
            if err.status == 404:
                return []
            raise
        if not held:
            return []
        sharers, _ = self.list_raw("list GPU sharers", self.core.list_pod_for_all_namespaces,
                                   label_selector=GPU_GROUP_LABEL)
        sharers = [p for p in sharers if _meta(p).get("namespace") != ns]
        # A pod on several devices has no plain label (a selector cannot ask for a key prefix): the
        # groups no plain label holds are asked for by their per-device label, as KAI's binder does.
        orphans = set(gpu_sharing.orphaned_reservations(held, sharers))
        for group in sorted({(_meta(h).get("labels") or {}).get(GPU_GROUP_LABEL) or "" for h in held
                             if _meta(h).get("name") in orphans} - {""}):
            more, _ = self.list_raw(f"list the sharers of GPU group {group}", self.core.list_pod_for_all_namespaces,
                                    label_selector=f"{MULTI_GPU_GROUP_PREFIX}{group}={group}")
            sharers += [p for p in more if _meta(p).get("namespace") != ns]
        doomed = gpu_sharing.orphaned_reservations(held, sharers)
        for name in doomed:
            try:
                self._json(f"delete reservation pod {ns}/{name}", self.core.delete_namespaced_pod, name, ns,
                           grace_period_seconds=0)
            except ClusterRejected as err:
                if err.status != 404:
                    raise
        return doomed

    def _label_gpu_groups(self, action: BindAction, operation: str
                          ) -> tuple[ActionResult | None, dict[str, Any]]:
        """Label a still-unbound pod with its GPU groups before the Binding (as KAI's binder does);
        returns (None, the pod as read) when it may be bound now, else (the result, {}).

        The groups must be one per device the pod asks for (``gpu-fraction-num-devices``, else one),
        each named once: anything else is refused before the pod is touched. Group labels left by an
        earlier attempt that are not among these are removed, so the pod holds only these devices.
        The patch carries the resourceVersion just read, so it cannot land on a pod that was bound
        elsewhere (or replaced) in between: the server refuses it with 409, and the pod is read again.
        A one-device bind whose pod the mirror saw unbound (``action.resource_version``) first tries the
        patch guarded by that version, without the read."""
        try:
            labels: dict[str, str | None] = dict(gpu_sharing.group_labels(action.gpu_groups))
        except ValueError as bad:
            raise ClusterRejected(operation, str(bad), status=422, reason="Invalid") from bad
        if action.resource_version and len(action.gpu_groups) == 1:
            # The mirror saw the pod unbound at this version: guarded by it, the one-device label (a
            # key the patch overwrites, so nothing stale can stay) needs no read first. A pod changed
            # since is refused with 409 and read below.
            try:
                pod = self._json(operation, self.core.patch_namespaced_pod, action.name, action.namespace,
                                 {"metadata": {"resourceVersion": action.resource_version, "labels": labels}},
                                 _content_type="application/strategic-merge-patch+json")
            except ClusterRejected as err:
                if err.status == 404:
                    raise ClusterRejected(operation, "the pod no longer exists", status=404) from err
                if err.status != 409:
                    raise
            else:
                wanted = (_meta(pod).get("annotations") or {}).get(GPU_FRACTION_NUM_DEVICES_ANNOTATION) or "1"
                if str(wanted) == "1" and not any(gpu_sharing.is_group_label(k) and k not in labels
                                                  for k in _meta(pod).get("labels") or {}):
                    return None, pod
        for _ in range(3):
            pod = self.read_pod(action.namespace, action.name)
            done = self._check_bindable(action, pod, operation)
            if done is not None or pod is None:
                return done, {}
            wanted = str((_meta(pod).get("annotations") or {}).get(GPU_FRACTION_NUM_DEVICES_ANNOTATION) or "1")
            if wanted != str(len(action.gpu_groups)):
                raise ClusterRejected(operation, f"the pod asks for {wanted} shared devices "
                                      f"({GPU_FRACTION_NUM_DEVICES_ANNOTATION}), the decision gives "
                                      f"{len(action.gpu_groups)}", status=422, reason="Invalid")
            stale = {k: None for k in _meta(pod).get("labels") or {}
                     if gpu_sharing.is_group_label(k) and k not in labels}
            patch = {"metadata": {"resourceVersion": _meta(pod).get("resourceVersion"),
                                  "labels": {**labels, **stale}}}
            try:
                self._json(operation, self.core.patch_namespaced_pod, action.name, action.namespace, patch,
                           _content_type="application/strategic-merge-patch+json")
                return None, pod
            except ClusterRejected as err:
                if err.status == 404:
                    raise ClusterRejected(operation, "the pod no longer exists", status=404) from err
                if err.status != 409:
                    raise
        raise ClusterRejected(operation, "the pod kept changing while its GPU group was written", status=409,
                              reason="Conflict")

    def evict(self, action: EvictAction) -> ActionResult:
        """Evict as ``action.mode`` says, with the grace period and the pod's UID as precondition (so a
        same-named newer pod is never evicted by an old decision); the event saying why is written
        before returning.

        ``evict``: through the Eviction API, which a PodDisruptionBudget may refuse (429, raised as
        `ClusterUnavailable`). ``delete``: as KAI's evictor, the pod is deleted (budgets do not apply),
        after DisruptionTarget=True is set through its status when ``action.disruption_target``."""
        return self._evict(action, _at_once)

    def _evict(self, action: EvictAction, later: _Later) -> ActionResult:
        if action.mode == EVICT_BY_DELETE:
            return self._delete_victim(action, later)
        if action.mode != EVICT_BY_EVICTION_API:
            raise ClusterError(f"evict pod {action.namespace}/{action.name}",
                               f"eviction mode must be one of {', '.join(EVICTION_MODES)}, not {action.mode!r}")
        operation = f"evict pod {action.namespace}/{action.name}"
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=action.name, namespace=action.namespace),
            delete_options=client.V1DeleteOptions(
                grace_period_seconds=action.grace_seconds,
                preconditions=client.V1Preconditions(uid=action.uid) if action.uid else None,
            ),
        )
        try:
            # A 429 here is a PodDisruptionBudget's answer, not load: it is not waited out while the
            # cycle holds its shard's lock. The decision fails and the next cycle decides again.
            self._json(operation, self.core.create_namespaced_pod_eviction, action.name, action.namespace, body,
                       _retry_statuses=RETRYABLE_STATUSES - {429})
        except ClusterRejected as err:
            if err.status == 404:
                return ActionResult(ActionOutcome.ALREADY_GONE, f"pod {action.namespace}/{action.name} is gone")
            if err.status == 409 and "precondition" in err.detail.lower():
                return ActionResult(ActionOutcome.ALREADY_GONE,
                                    f"pod {action.namespace}/{action.name} was replaced by a new pod; not evicted")
            raise
        except ClusterUnavailable as err:
            if err.status == 429:
                raise ClusterUnavailable(operation, f"{err.detail}; a PodDisruptionBudget may forbid this "
                                         "eviction", status=429, reason=err.reason) from err
            raise
        if action.message:
            later(functools.partial(self._note, operation, PodRef(action.namespace, action.name, action.uid),
                                    "Normal", action.reason, action.message))
        return ActionResult(ActionOutcome.EVICTED, f"pod {action.namespace}/{action.name} evicted")

    def _delete_victim(self, action: EvictAction, later: _Later) -> ActionResult:
        """KAI's eviction (`pkg/scheduler/cache/evictor`): optionally the DisruptionTarget condition by
        a strategic-merge patch of the pod's status (a failure stops there, the pod is not deleted),
        then a delete of that pod incarnation with the grace period."""
        operation = f"delete pod {action.namespace}/{action.name}"
        gone = ActionResult(ActionOutcome.ALREADY_GONE, f"pod {action.namespace}/{action.name} is gone")
        replaced = ActionResult(ActionOutcome.ALREADY_GONE,
                                f"pod {action.namespace}/{action.name} was replaced by a new pod; not deleted")
        if action.disruption_target:
            condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER,
                         "message": action.message,
                         "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
            # The UID in the patch is a precondition: the server refuses it (422 on metadata.uid) for
            # a same-named newer pod.
            patch: dict[str, Any] = {"status": {"conditions": [condition]}}
            if action.uid:
                patch["metadata"] = {"uid": action.uid}
            try:
                self._json(f"set DisruptionTarget on pod {action.namespace}/{action.name}",
                           self.core.patch_namespaced_pod_status, action.name, action.namespace, patch,
                           _content_type="application/strategic-merge-patch+json")
            except ClusterRejected as err:
                if err.status == 404:
                    return gone
                if _uid_refused(err):
                    return replaced
                raise
        options = client.V1DeleteOptions(
            grace_period_seconds=action.grace_seconds,
            preconditions=client.V1Preconditions(uid=action.uid) if action.uid else None,
        )
        try:
            # A 429 here is the API server's load, never a PodDisruptionBudget: retried as any other.
            self._json(operation, self.core.delete_namespaced_pod, action.name, action.namespace, body=options)
        except ClusterRejected as err:
            if err.status == 404:
                return gone
            if err.status == 409 and "precondition" in err.detail.lower():
                return replaced
            raise
        if action.message:
            later(functools.partial(self._note, operation, PodRef(action.namespace, action.name, action.uid),
                                    "Normal", action.reason, action.message))
        return ActionResult(ActionOutcome.EVICTED, f"pod {action.namespace}/{action.name} deleted")



def _uid_refused(err: ClusterRejected) -> bool:
    """A patch that carries the object's uid refused because the object under that name is another
    incarnation: the uid cannot change (the API server says 422 on ``metadata.uid``, "field is
    immutable"; some servers say 409)."""
    return err.status == 409 or (err.status == 422 and "metadata.uid" in err.detail)
