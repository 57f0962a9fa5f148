"""Filters of the report pages and the PDF: a dict lookup and a short duration."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def get(mapping: Any, key: str) -> Any:
    return mapping.get(key, 0.0) if isinstance(mapping, dict) else None


@register.filter
def duration(seconds: Any) -> str:
    """42s, 5m 10s, 3h 20m, 2d 4h; '–' when unknown."""
    if seconds is None or seconds == "":
        return "–"
    s = int(round(float(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"
