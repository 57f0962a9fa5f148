"""What the GPUs did, beside what the scheduler allocated: per-pod GPU utilization readings.

Two sources give the same shape, a `PodGpuReading` per (namespace, pod):

- `PrometheusSource` reads NVIDIA's DCGM exporter metrics from Prometheus's HTTP API
  (`/api/v1/query`) when `KAI_PROMETHEUS_URL` is set: `DCGM_FI_DEV_GPU_UTIL` averaged over the
  pod's devices, `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_FB_FREE` summed (MiB). The exporter puts
  the pod it attributes a device to in the `pod` and `namespace` labels.
- `SimulatedSource` gives the simulated cluster's pods the utilization their workload's
  `kaiweb.io/gpu-utilization` label asks for, with a small deterministic wobble, so the demo
  shows the feature without Prometheus.

A malformed series (no pod label, a value that is not a number) is logged and skipped; an
unreachable Prometheus raises `UtilizationError`, and accounting goes on with the allocation only.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import requests
from django.conf import settings

from kaiweb.core.promapi import PrometheusAPI, PrometheusError

log = logging.getLogger(__name__)

UTILIZATION_LABEL = "kaiweb.io/gpu-utilization"
QUERIES = {
    "utilization": 'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})',
    "devices": 'count by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})',
    "memory_used": 'sum by (namespace, pod) (DCGM_FI_DEV_FB_USED{pod!=""})',
    "memory_free": 'sum by (namespace, pod) (DCGM_FI_DEV_FB_FREE{pod!=""})',
}
SIMULATED_MIB_PER_DEVICE = 81_920.0
# A series per pod with GPUs: room for the largest clusters, still a bound
MAX_SERIES = 200_000
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class UtilizationError(PrometheusError):
    """The utilization source could not be read (the message says why)."""


@dataclass(frozen=True, slots=True)
class PodGpuReading:
    """One pod's GPUs at one moment: mean utilization (%), devices, framebuffer MiB."""

    namespace: str
    pod: str
    utilization: float
    devices: int = 1
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None


@dataclass(frozen=True, slots=True)
class PodRef:
    """What a source needs to know of a running pod."""

    namespace: str
    pod: str
    uid: str
    labels: dict[str, Any]
    devices: int


class UtilizationSource(Protocol):
    name: str

    def read(self, at: datetime, pods: Iterable[PodRef]) -> dict[tuple[str, str], PodGpuReading]: ...


class PrometheusSource:
    """DCGM exporter metrics through Prometheus's HTTP API (instant queries at `at`)."""

    name = "prometheus"

    def __init__(self, url: str, timeout: float = 10.0, session: requests.Session | None = None) -> None:
        try:
            self.api = PrometheusAPI(url, timeout=timeout, session=session, max_bytes=MAX_ANSWER_BYTES,
                                     max_series=MAX_SERIES)
        except PrometheusError as exc:
            raise UtilizationError(str(exc)) from exc
        self.url = self.api.url

    def query(self, promql: str, at: datetime | None = None) -> list[dict[str, Any]]:
        """The result vector of an instant query; raises UtilizationError naming what failed."""
        try:
            return self.api.query(promql, at)
        except PrometheusError as exc:
            raise UtilizationError(str(exc)) from exc

    def _series(self, promql: str, at: datetime | None) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for item in self.query(promql, at):
            metric = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(metric, dict) or not metric.get("pod") or not metric.get("namespace"):
                log.warning("prometheus: a series of %r has no pod/namespace label; skipped", promql)
                continue
            try:
                number = float(value[1])  # type: ignore[index]  # Prometheus' [timestamp, value] pair, checked to be a list above
            except (TypeError, ValueError, IndexError):
                log.warning("prometheus: %s/%s: value %r is not a number; skipped",
                            metric["namespace"], metric["pod"], value)
                continue
            if math.isnan(number) or math.isinf(number):
                continue
            out[(str(metric["namespace"]), str(metric["pod"]))] = number
        return out

    def read(self, at: datetime | None = None,
             pods: Iterable[PodRef] = ()) -> dict[tuple[str, str], PodGpuReading]:
        """Readings of every pod Prometheus knows (pods not running here are dropped by the caller)."""
        util = self._series(QUERIES["utilization"], at)
        devices = self._series(QUERIES["devices"], at)
        used = self._series(QUERIES["memory_used"], at)
        free = self._series(QUERIES["memory_free"], at)
        out = {}
        for key, value in util.items():
            total = used[key] + free[key] if key in used and key in free else None
            out[key] = PodGpuReading(namespace=key[0], pod=key[1], utilization=max(0.0, min(100.0, value)),
                                     devices=max(1, int(devices.get(key, 1))), memory_used_mib=used.get(key),
                                     memory_total_mib=total)
        return out


class SimulatedSource:
    """The simulated cluster's pods report what their workload's label asks for, give or take a little."""

    name = "simulated"

    def read(self, at: datetime, pods: Iterable[PodRef]) -> dict[tuple[str, str], PodGpuReading]:
        out = {}
        minute = int(at.timestamp()) // 60
        for pod in pods:
            raw = pod.labels.get(UTILIZATION_LABEL)
            try:
                target = float(raw)  # type: ignore[arg-type]  # a label value: float() raising is caught below
            except (TypeError, ValueError):
                continue  # no label (or a bad one): utilization unknown, as without an exporter
            digest = hashlib.blake2b(f"{pod.uid}:{minute}".encode(), digest_size=2).digest()
            wobble = (int.from_bytes(digest, "big") / 65535.0 - 0.5) * (2.0 if target < 5 else 12.0)
            value = max(0.0, min(100.0, target + wobble))
            devices = max(1, pod.devices)
            total = SIMULATED_MIB_PER_DEVICE * devices
            out[(pod.namespace, pod.pod)] = PodGpuReading(
                namespace=pod.namespace, pod=pod.pod, utilization=round(value, 2), devices=devices,
                memory_used_mib=round(total * min(0.95, 0.02 + value / 110.0), 1), memory_total_mib=total)
        return out


def configured_source() -> UtilizationSource | None:
    """Prometheus when KAI_PROMETHEUS_URL is set, the simulation on the simulated cluster, else none."""
    url = getattr(settings, "KAI_PROMETHEUS_URL", "")
    if url:
        return PrometheusSource(url, timeout=getattr(settings, "KAI_PROMETHEUS_TIMEOUT", 10.0))
    if getattr(settings, "KAI_CLUSTER_BACKEND", "") == "simulated":
        return SimulatedSource()
    return None
