"""Template helpers shared by every page: resource formatting, badges, allocation meters, roles."""

from __future__ import annotations

import math
from typing import Any

from django import template
from django.utils.html import format_html

from kaiweb.ui import access
from kaiweb.ui.formatting import fmt_amount, fmt_duration, fmt_gpu_hours

register = template.Library()


@register.simple_tag
def role_label(user: Any) -> str:
    """The signed-in user's role in words (platform admin, queue admin, viewer)."""
    return access.role_of(user).label


@register.filter
def amount(value: Any, resource: str = "gpu") -> str:
    """A queue figure in its resource's display unit; -1 is "unlimited"."""
    return fmt_amount(value, resource)


@register.filter
def duration(seconds: Any) -> str:
    return fmt_duration(seconds)


@register.filter
def gpu_hours(value: Any) -> str:
    return fmt_gpu_hours(value)


@register.filter
def get(mapping: Any, key: Any) -> Any:
    """`mapping|get:key` for dicts whose keys are not valid template identifiers."""
    if mapping is None:
        return None
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def k8s_age(when: Any) -> str:
    """An object's age as kubectl prints it: 42s, 5m, 3h, 12d."""
    from django.utils import timezone

    if not when:
        return "<unknown>"
    seconds = max(0, int((timezone.now() - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@register.filter
def ago(when: Any, now: Any = None) -> str:
    """How long ago, in words: "just now" under a minute, else "5 minutes ago", "2 hours, 3 minutes ago"."""
    from django.utils import timezone
    from django.utils.timesince import timesince

    if not when:
        return "never"
    now = now or timezone.now()
    if (now - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when, now)} ago"


@register.filter
def first_clause(text: Any) -> str:
    """The engine joins what each action found with "; ": the first clause is the main reason."""
    return str(text or "").split("; ", 1)[0]


@register.filter
def pod_suffix(pod_name: Any, workload_ref: Any) -> str:
    """A pod's name without its workload's name in front ("train-7-2" of "ns/train-7" → "-2")."""
    pod, ref = str(pod_name or ""), str(workload_ref or "")
    base = ref.split("/", 1)[-1]
    return pod[len(base):] if base and pod.startswith(base) and len(pod) > len(base) else pod


@register.filter
def ms(seconds: Any) -> str:
    """Seconds as milliseconds, for cycle phase timings."""
    if seconds in (None, ""):
        return "–"
    return f"{float(seconds) * 1000:,.1f} ms"


@register.simple_tag
def badge(value: Any, colours: dict[Any, str] | None = None, label: Any = None) -> str:
    """A coloured pill; the colour comes from the app's `*_BADGE` map (STYLE §6)."""
    colour = (colours or {}).get(value, "gray")
    return format_html('<span class="badge {}">{}</span>', colour, label if label is not None else value)


def _finite(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f < 0 or math.isinf(f) else f


@register.inclusion_tag("includes/meter.html")
def meter(allocated: Any, quota: Any = None, fair: Any = None, limit: Any = None, resource: str = "gpu",
          scale: Any = None, label: bool = True) -> dict[str, Any]:
    """An allocation bar: allocated fill, quota hatch, fair-share tick and limit tick on one scale.

    The scale is the largest finite figure (or `scale` when given, e.g. the cluster's total), so
    bars of sibling queues are comparable when the caller passes the same scale.
    """
    alloc_v = _finite(allocated) or 0.0
    quota_v, fair_v, limit_v = _finite(quota), _finite(fair), _finite(limit)
    top = _finite(scale) or max([v for v in (alloc_v, quota_v, fair_v, limit_v) if v is not None] or [0.0])

    def pct(v: float | None) -> str | None:
        if v is None or top <= 0:
            return None
        return f"{min(100.0, v / top * 100):.2f}"

    state = ""
    if fair_v is not None and alloc_v > fair_v + 1e-9:
        state = "over"
    if limit_v is not None and limit_v > 0 and alloc_v >= limit_v - 1e-9:
        state = "full"
    return {
        "alloc_pct": pct(alloc_v) or "0",
        "quota_pct": pct(quota_v) if quota_v else None,
        "fair_pct": pct(fair_v),
        "limit_pct": pct(limit_v) if limit_v is not None else None,
        "state": state,
        "label": label,
        "allocated": allocated,
        "fair": fair,
        "quota": quota,
        "limit": limit,
        "resource": resource,
    }
