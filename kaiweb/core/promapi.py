"""The one client of Prometheus's HTTP API (`/api/v1/query`) that kaiweb's readers share.

GPU utilization (`kaiweb.usage.utilization`) and the usage database of time-based fair share
(`kaiweb.usage.usagedb`) both query through it. Every query is bounded: a timeout per request, a
limit on the answer's size (read in chunks and abandoned past it) and on the number of series in a
result. Whatever goes wrong — unreachable, an HTTP error, an answer that is not Prometheus's JSON,
too large, too many series, a sample that is not a number — raises `PrometheusError` saying what,
and never returns a partial answer.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import requests

# Defaults: a usage database's answer has a series per queue. Per-pod GPU utilization passes larger ones.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
MAX_SERIES = 10_000


class PrometheusError(Exception):
    """Prometheus could not be read or its answer is not usable (the message says why)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant vector: its labels and its value (a finite number)."""

    labels: dict[str, str]
    value: float


def check_url(url: str, field: str) -> str:
    """`url` without a trailing slash; it must be http:// or https:// (`field` names the setting)."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise PrometheusError(f"{field}: must start with http:// or https://, not {url!r}")
    return url.rstrip("/")


class PrometheusAPI:
    """Instant queries against one Prometheus; `timeout` per request in seconds."""

    def __init__(self, url: str, timeout: float = 10.0, session: requests.Session | None = None, *,
                 field: str = "KAI_PROMETHEUS_URL", max_bytes: int = MAX_ANSWER_BYTES,
                 max_series: int = MAX_SERIES, shown: str = "") -> None:
        self.url = check_url(url, field)
        # how messages name it: a URL read from the environment is named by its variable, never shown
        self.shown = shown or self.url
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_series = max_series
        self.session = session or requests.Session()

    def _body(self, promql: str, params: dict[str, str], timeout: float) -> Any:
        started = time.monotonic()
        try:
            with self.session.get(f"{self.url}/api/v1/query", params=params, timeout=timeout,
                                  stream=True) as response:
                chunks, size = [], 0
                for chunk in response.iter_content(chunk_size=65536):
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise PrometheusError(f"prometheus: the answer to {promql!r} is larger than "
                                              f"{self.max_bytes} bytes; not read")
                    if time.monotonic() - started > timeout:  # the timeout bounds each read, this the whole
                        raise PrometheusError(f"prometheus: the answer to {promql!r} took longer than "
                                              f"{timeout:g}s; not read")
                    chunks.append(chunk)
                status = response.status_code
        except requests.RequestException as exc:
            raise PrometheusError(f"prometheus: {self.shown} could not be reached ({exc.__class__.__name__})") from exc
        try:
            return status, json.loads(b"".join(chunks))
        except ValueError as exc:
            raise PrometheusError(f"prometheus: HTTP {status}, not a JSON answer") from exc

    def query(self, promql: str, at: datetime | float | None = None,
              timeout: float | None = None) -> list[dict[str, Any]]:
        """The result vector of an instant query at `at` (a datetime or Unix seconds; now when None)."""
        params = {"query": promql}
        if at is not None:
            seconds = at.timestamp() if isinstance(at, datetime) else float(at)
            params["time"] = f"{seconds:.3f}"
        status, body = self._body(promql, params, self.timeout if timeout is None else timeout)
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusError(f"prometheus: query {promql!r} failed: {error or f'HTTP {status}'}")
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PrometheusError(f"prometheus: query {promql!r} did not return a vector")
        if len(data["result"]) > self.max_series:
            raise PrometheusError(f"prometheus: query {promql!r} returned {len(data['result'])} series, more than "
                                  f"the {self.max_series} kaiweb reads")
        result: list[dict[str, Any]] = data["result"]
        return result

    def vector(self, promql: str, at: datetime | float | None = None,
               timeout: float | None = None) -> list[Sample]:
        """`query`, every sample checked: labels a map of strings, the value a finite number."""
        out = []
        for item in self.query(promql, at, timeout):
            labels = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
                raise PrometheusError(f"prometheus: query {promql!r}: a sample is not a series with "
                                      f"[time, value] ({str(item)[:200]})")
            try:
                number = float(value[1])
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number):
                raise PrometheusError(f"prometheus: query {promql!r}: the value {value[1]!r} of "
                                      f"{labels} is not a finite number")
            out.append(Sample(labels={str(k): str(v) for k, v in labels.items()}, value=number))
        return out
