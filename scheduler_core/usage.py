"""Time-based fair share input (KAI-SEMANTICS §3.8): normalised, decayed historical usage per queue.

Given samples at times `t` of each queue's allocated resources and of the cluster's capacity,

    decay(t)  = 0.5 ** ((now − t) / half_life)          (1 when there is no half-life)
    usage[q]  = Σ_t allocated[q, t] · decay(t)  /  Σ_t capacity[t] · decay(t)

over the samples inside the window (sliding: `now − window < t ≤ now`; tumbling: from the start of the
current window, `start + n·window ≤ t ≤ now`), per resource. This is the same decayed-sum ratio KAI
computes in PromQL, so the result can be fed to `QueueAttrs.usage` unchanged. Vectorised with numpy;
every intermediate number is returned so the UI can show the arithmetic. Deterministic: the same arrays
give the same result. Invariant: with allocations never above capacity, `0 ≤ Σ_q usage[q] ≤ 1`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

WEEK_SECONDS = 7 * 24 * 3600.0
WINDOW_TYPES = ("sliding", "tumbling")

ArrayLike = npt.ArrayLike


class UsageInputError(ValueError):
    """Samples or parameters the computation cannot use; the message names the field and the rule."""


@dataclass(frozen=True, slots=True)
class UsageResult:
    """Normalised usage and the numbers behind it.

    `usage[i, r]` is queue `queues[i]`'s usage of resource r; `decayed_allocated[i, r]` and
    `decayed_capacity[r]` are the two sums of the ratio; `weights[t]` is each sample's decay weight
    (0 outside the window); `window_start` is the earliest time a sample may have to count."""

    queues: tuple[str, ...]
    usage: np.ndarray
    decayed_allocated: np.ndarray
    decayed_capacity: np.ndarray
    weights: np.ndarray
    in_window: np.ndarray
    window_start: float
    now: float
    half_life: float | None

    def for_queue(self, name: str) -> list[float]:
        """One queue's usage vector, ready for `QueueAttrs.usage` (0 for a queue without samples)."""
        if name not in self.queues:
            return [0.0] * int(self.usage.shape[1])
        return [float(x) for x in self.usage[self.queues.index(name)]]

    def as_dict(self) -> dict[str, Any]:
        """Plain lists and floats (JSON-ready) for reports and the "how was my usage computed" view."""
        return {
            "now": self.now,
            "half_life": self.half_life,
            "window_start": self.window_start,
            "samples_in_window": int(self.in_window.sum()),
            "weights": [float(w) for w in self.weights],
            "decayed_capacity": [float(c) for c in self.decayed_capacity],
            "queues": {
                name: {
                    "usage": [float(x) for x in self.usage[i]],
                    "decayed_allocated": [float(x) for x in self.decayed_allocated[i]],
                }
                for i, name in enumerate(self.queues)
            },
        }


def _as_float_array(name: str, value: ArrayLike, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise UsageInputError(f"{name}: must be numbers ({exc})") from None
    if arr.ndim != ndim:
        raise UsageInputError(f"{name}: must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise UsageInputError(f"{name}: must contain only finite numbers")
    return arr


def window_start(now: float, window: float, window_type: str = "sliding", tumbling_start: float | None = None) -> float:
    """The start of the window that contains `now` (exclusive for sliding, inclusive for tumbling)."""
    if window_type == "sliding":
        return now - window
    if tumbling_start is None:
        raise UsageInputError("tumbling_start: required when window_type is 'tumbling'")
    if tumbling_start > now:
        raise UsageInputError(f"tumbling_start: {tumbling_start} is after now ({now})")
    return tumbling_start + math.floor((now - tumbling_start) / window) * window


def decay_weights(times: np.ndarray, now: float, half_life: float | None) -> np.ndarray:
    """`0.5 ** ((now − t) / half_life)` per sample; all 1 without a half-life."""
    if half_life is None:
        return np.ones_like(times, dtype=float)
    return np.power(0.5, (now - times) / half_life)


def compute_usage(
    times: ArrayLike,
    allocated: Mapping[str, ArrayLike] | ArrayLike,
    capacity: ArrayLike,
    now: float,
    half_life: float | None = None,
    window: float = WEEK_SECONDS,
    window_type: str = "sliding",
    tumbling_start: float | None = None,
    queues: Sequence[str] | None = None,
) -> UsageResult:
    """Normalised decayed usage per queue and resource (§3.8).

    `times`: shape [T], seconds (any epoch, same as `now`). `allocated`: either a mapping queue name →
    [T, R] samples, or an array [Q, T, R] with `queues` naming its rows. `capacity`: [T, R], the
    cluster's capacity at each sample. `half_life` in seconds (None or 0 = no decay); `window` in
    seconds; `window_type` "sliding" or "tumbling" (then `tumbling_start` is required). A resource
    with no capacity in the window gets usage 0. Bad input raises `UsageInputError` naming the field.

    Example: `compute_usage([0, 60], {"a": [[0, 0, 8], [0, 0, 8]]}, [[0, 0, 16]] * 2, now=60,
    half_life=120).for_queue("a")` → `[0.0, 0.0, 0.5]`.
    """
    t = _as_float_array("times", times, 1)
    cap = _as_float_array("capacity", capacity, 2)
    if isinstance(allocated, Mapping):
        names = tuple(sorted(allocated))
        if queues is not None:
            raise UsageInputError("queues: give queue names only with an array, not with a mapping")
        rows = [_as_float_array(f"allocated[{n!r}]", allocated[n], 2) for n in names]
        alloc = np.stack(rows) if rows else np.zeros((0,) + cap.shape)
    else:
        alloc = _as_float_array("allocated", allocated, 3)
        if queues is None or len(queues) != alloc.shape[0]:
            raise UsageInputError(f"queues: must name each of the {alloc.shape[0]} rows of allocated")
        names = tuple(queues)
        if len(set(names)) != len(names):
            raise UsageInputError("queues: names must be unique")
    if cap.shape[0] != t.shape[0]:
        raise UsageInputError(f"capacity: needs one row per sample time ({t.shape[0]}), got {cap.shape[0]}")
    if alloc.shape[1:] != cap.shape:
        raise UsageInputError(f"allocated: each queue needs shape {cap.shape} like capacity, got {alloc.shape[1:]}")
    if np.any(cap < 0):
        raise UsageInputError("capacity: must be ≥ 0")
    if np.any(alloc < 0):
        raise UsageInputError("allocated: must be ≥ 0")
    if not math.isfinite(now):
        raise UsageInputError("now: must be a finite number")
    if half_life is not None and (not math.isfinite(half_life) or half_life < 0):
        raise UsageInputError(f"half_life: {half_life} must be > 0 seconds (or 0/None for no decay)")
    if not math.isfinite(window) or window <= 0:
        raise UsageInputError(f"window: {window} must be > 0 seconds")
    if window_type not in WINDOW_TYPES:
        raise UsageInputError(f"window_type: {window_type!r} must be one of {', '.join(WINDOW_TYPES)}")
    h = half_life if half_life else None

    start = window_start(now, window, window_type, tumbling_start)
    if window_type == "sliding":
        in_window = (t > start) & (t <= now)
    else:
        in_window = (t >= start) & (t <= now)
    weights = np.where(in_window, decay_weights(t, now, h), 0.0)
    decayed_capacity = weights @ cap  # [R]
    decayed_allocated = np.einsum("t,qtr->qr", weights, alloc)  # [Q, R]
    with np.errstate(divide="ignore", invalid="ignore"):
        usage = np.where(decayed_capacity > 0, decayed_allocated / np.where(decayed_capacity > 0, decayed_capacity, 1), 0.0)
    return UsageResult(
        queues=names, usage=usage, decayed_allocated=decayed_allocated, decayed_capacity=decayed_capacity,
        weights=weights, in_window=in_window, window_start=float(start), now=float(now), half_life=h,
    )
