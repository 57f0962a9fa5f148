"""The control plane's clock for scheduling time.

Everything that the scheduling decisions compare with time (a pod's start, a gang's staleness, a
queue's minimum runtime, preemption delay) reads `now()`, not the wall clock directly. In production
it is the wall clock. The KAI end-to-end scenario runner moves it forward with `advance()` to play a
scenario's ``advance_seconds`` step without waiting; `reset()` puts it back.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from django.utils import timezone

_lock = threading.Lock()
_offset = timedelta(0)


def now() -> datetime:
    """The current scheduling time (aware, UTC)."""
    return timezone.now() + _offset


def timestamp() -> float:
    """`now()` as seconds since the epoch, the engine's unit."""
    return now().timestamp()


def advance(seconds: float) -> None:
    """Move the scheduling clock forward (only a runner of simulated time does this)."""
    global _offset
    if seconds < 0:
        raise ValueError("clock: advance takes seconds >= 0")
    with _lock:
        _offset += timedelta(seconds=seconds)


def reset() -> None:
    global _offset
    with _lock:
        _offset = timedelta(0)
