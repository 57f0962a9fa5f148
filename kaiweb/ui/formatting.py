"""Number formatting for the pages: queue figures in their display units, durations, GPU-hours."""

from __future__ import annotations

from typing import Any

# Queue figures are stored in the Queue CRD's units (CPU millicores, memory MB, GPU devices);
# people read cores and GB, so the pages convert for display only.
UNIT_LABEL = {"gpu": "GPU", "cpu": "cores", "memory": "GB"}


def _num(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _trim(x: float, places: int = 2) -> str:
    if abs(x - round(x)) < 1e-9:
        return f"{round(x):,}"
    return f"{x:,.{places}f}".rstrip("0").rstrip(".")


def fmt_amount(value: Any, resource: str = "gpu") -> str:
    """Format one queue figure: -1 reads "∞", None reads "–"."""
    v = _num(value)
    if v is None:
        return "–"
    if v < 0:
        return "∞"
    if resource in ("cpu", "memory"):
        return _trim(v / 1000.0, 1)
    return _trim(v, 2)


def fmt_duration(seconds: Any) -> str:
    """A duration in the largest sensible unit: 850 ms, 42 s, 3 m 10 s, 5 h 2 m, 3 d 4 h."""
    s = _num(seconds)
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m} m {sec} s" if sec else f"{m} m"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} m" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def fmt_gpu_hours(value: Any) -> str:
    v = _num(value)
    if v is None:
        return "–"
    return f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"
