"""Plotly figures built on the server; `static/js/charts.js` only draws them.

Every builder returns a plain dict (plotly's JSON, parsed) ready for `json_script`, or an empty
figure (`{"data": []}`) when there is nothing to draw, which charts.js shows as an empty state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import plotly.graph_objects as go

from scheduler_core import model as m

# One palette for queues everywhere (tree, GPU map, stacked charts): a queue keeps its colour.
# Ordered so that neighbours differ in hue and lightness: the first N colours of a page stay distinct.
PALETTE = [
    "#4f8cff", "#f2a93b", "#37b37e", "#e0576b", "#a66de0", "#2bb5c8", "#8fb339", "#c45ab3",
    "#7f8c8d", "#d9822b", "#1f4e9c", "#98c13d", "#6b3d8f", "#e07b91", "#0f766e", "#b5893c",
]
ACCENT, GOOD, BAD, MUTED = "#2f6fde", "#1f8a5b", "#c23b32", "#8a94a6"


def queue_colour(name: str, order: Sequence[str] | None = None) -> str:
    """A stable colour per queue: by position in `order` when given, else by a hash of the name."""
    if order is not None and name in order:
        return PALETTE[list(order).index(name) % len(PALETTE)]
    h = 0
    for ch in name:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    return PALETTE[h % len(PALETTE)]


def _layout(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "margin": {"l": 48, "r": 12, "t": 8, "b": 36},
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 11, "color": "#1b2231"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "legend": {"orientation": "h", "y": -0.18, "x": 0, "font": {"size": 11}},
        "xaxis": {"gridcolor": "#eef0f4", "linecolor": "#dfe3ea", "zeroline": False},
        "yaxis": {"gridcolor": "#eef0f4", "linecolor": "#dfe3ea", "zeroline": False, "rangemode": "tozero"},
        "hovermode": "x unified",
        "template": "none",
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def _times(values: Sequence[datetime]) -> list[str]:
    """UTC times as ISO strings (the pages speak UTC); plotly validates strings much faster."""
    return [(v.astimezone(UTC) if v.tzinfo else v).replace(tzinfo=None).isoformat(timespec="seconds") for v in values]


#: a time chart whose points span less than this shows this much before its first point
SHORT_SPAN = timedelta(minutes=10)


def _time_series(times: Sequence[datetime]) -> tuple[str, dict[str, Any]]:
    """(trace mode, x-axis settings) for a line over ``times``. A chart whose points span less
    than ``SHORT_SPAN`` (one accounting minute just after start-up) draws its points as markers
    and shows the ten minutes up to them: a line through one point draws nothing, and plotly
    would stretch a single instant over the whole axis (ticks a millisecond apart)."""
    if not times or max(times) - min(times) >= SHORT_SPAN:
        return "lines", {}
    last = max(times)
    span = _times([last - SHORT_SPAN, last + SHORT_SPAN / 10])
    return "lines+markers", {"type": "date", "range": span}


def _nums(values: Sequence[float | None]) -> np.ndarray:
    """Numbers as a float array (None → NaN, a gap): plotly ships it as a typed array."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def to_dict(fig: go.Figure) -> dict[str, Any]:
    return json.loads(fig.to_json())


EMPTY: dict[str, Any] = {"data": [], "layout": {}}


def allocation_over_time(gpu: list[tuple[datetime, float]], cpu_cores: list[tuple[datetime, float]],
                         gpu_total: float, cpu_total_cores: float) -> dict[str, Any]:
    """Cluster GPU and CPU in use over time, as a share of today's capacity (two lines, %)."""
    if not gpu and not cpu_cores:
        return EMPTY
    mode, xaxis = _time_series([t for t, _ in gpu] + [t for t, _ in cpu_cores])
    fig = go.Figure()
    if gpu:
        fig.add_trace(go.Scatter(
            x=_times([t for t, _ in gpu]), y=_nums([100 * v / gpu_total if gpu_total else 0 for _, v in gpu]),
            customdata=_nums([round(v, 2) for _, v in gpu]), name="GPU", mode=mode, line={"color": ACCENT, "width": 2},
            hovertemplate="%{y:.1f}% (%{customdata} GPUs)<extra>GPU</extra>", fill="tozeroy",
            fillcolor="rgba(47,111,222,.08)",
        ))
    if cpu_cores:
        fig.add_trace(go.Scatter(
            x=_times([t for t, _ in cpu_cores]),
            y=_nums([100 * v / cpu_total_cores if cpu_total_cores else 0 for _, v in cpu_cores]),
            customdata=_nums([round(v, 1) for _, v in cpu_cores]), name="CPU", mode=mode,
            line={"color": GOOD, "width": 1.5, "dash": "dot"},
            hovertemplate="%{y:.1f}% (%{customdata} cores)<extra>CPU</extra>",
        ))
    fig.update_layout(**_layout(xaxis=xaxis, yaxis={"title": {"text": "% of capacity"}, "range": [0, 105],
                                                   "ticksuffix": "%"}))
    return to_dict(fig)


def fragmentation_over_time(rows: list[tuple[datetime, float, float]], gpu_total: float) -> dict[str, Any]:
    """Free GPUs and, beneath them, the stranded ones (free but no typical pod fits), per minute."""
    if not rows:
        return EMPTY
    times = _times([t for t, _, _ in rows])
    mode, xaxis = _time_series([t for t, _, _ in rows])
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=times, y=_nums([round(free, 2) for _, free, _ in rows]), name="free", mode=mode,
        line={"color": MUTED, "width": 1.5}, hovertemplate="%{y} GPUs free<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=times, y=_nums([round(stranded, 2) for _, _, stranded in rows]), name="stranded", mode=mode,
        line={"color": BAD, "width": 2}, fill="tozeroy", fillcolor="rgba(194,59,50,.12)",
        customdata=_nums([100 * s / gpu_total if gpu_total else 0 for _, _, s in rows]),
        hovertemplate="%{y} GPUs stranded (%{customdata:.1f}% of the cluster)<extra></extra>"))
    fig.update_layout(**_layout(xaxis=xaxis, yaxis={"title": {"text": "GPUs"}, "rangemode": "tozero"}))
    return to_dict(fig)


def pending_by_queue(rows: list[tuple[str, int]]) -> dict[str, Any]:
    """Horizontal bars: pending workloads per leaf queue (largest on top)."""
    rows = [r for r in rows if r[1] > 0]
    if not rows:
        return EMPTY
    rows.sort(key=lambda r: (r[1], r[0]))
    fig = go.Figure(go.Bar(
        x=_nums([n for _, n in rows]), y=[q for q, _ in rows], orientation="h",
        marker={"color": [queue_colour(q) for q, _ in rows]},
        hovertemplate="%{y}: %{x} pending<extra></extra>",
    ))
    fig.update_layout(**_layout(margin={"l": 120, "r": 12, "t": 4, "b": 28}, hovermode="closest",
                                yaxis={"automargin": True, "rangemode": "normal"}, xaxis={"title": {"text": "workloads"}}))
    return to_dict(fig)


def queue_share_history(history: list[Any], resource: str, scale: float = 1.0, unit: str = "GPU") -> dict[str, Any]:
    """One queue: allocated vs fair share (and requested) per recorded cycle."""
    if not history:
        return EMPTY
    xs = _times([h.recorded_at for h in history])

    def series(attr: str) -> np.ndarray:
        out = []
        for h in history:
            v = (getattr(h, attr) or {}).get(resource)
            out.append(None if v is None else round(float(v) / scale, 3))
        return _nums(out)

    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=series("requested"), name="requested", mode="lines",
                             line={"color": MUTED, "width": 1, "dash": "dot"}))
    fig.add_trace(go.Scatter(x=xs, y=series("fair_share"), name="fair share", mode="lines",
                             line={"color": "#1b2231", "width": 2, "shape": "hv"}))
    fig.add_trace(go.Scatter(x=xs, y=series("allocated"), name="allocated", mode="lines", fill="tozeroy",
                             line={"color": ACCENT, "width": 2, "shape": "hv"}, fillcolor="rgba(47,111,222,.12)"))
    fig.update_layout(**_layout(yaxis={"title": {"text": unit}}))
    return to_dict(fig)


def preemption_timeline(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Evictions over time, one marker row per evicting action, in the engine's order and spelling."""
    if not events:
        return EMPTY
    colours = {m.RECLAIM: "#d9822b", m.PREEMPT: BAD, m.CONSOLIDATION: ACCENT, m.STALE_GANG_EVICTION: MUTED}
    fig = go.Figure()
    for action in m.EVICTING_ACTIONS:
        evs = [e for e in events if e["action"] == action]
        if not evs:
            continue
        fig.add_trace(go.Scatter(
            x=_times([e["at"] for e in evs]), y=[action] * len(evs), mode="markers", name=action,
            marker={"color": colours[action], "size": 9, "symbol": "line-ns-open", "line": {"width": 2}},
            text=[f"{e['victim']} ← {e['preemptor'] or '—'}" for e in evs],
            hovertemplate="%{x|%H:%M:%S} %{text}<extra>" + action + "</extra>",
        ))
    fig.update_layout(**_layout(margin={"l": 90, "r": 12, "t": 4, "b": 28}, hovermode="closest", showlegend=False,
                                yaxis={"rangemode": "normal", "automargin": True}))
    return to_dict(fig)


def _cycle_axis(cycles: list[Any]) -> tuple[list[str], list[str]]:
    """Cycles as evenly spaced categories ("#42"), their start times for the hover text."""
    return [f"#{c.pk}" for c in cycles], _times([c.started_at for c in cycles])


def cycle_phases(cycles: list[Any], phases: Sequence[str]) -> dict[str, Any]:
    """Stacked bars: each cycle's duration split by phase (ms), oldest left, one bar per cycle."""
    if not cycles:
        return EMPTY
    fig = go.Figure()
    xs, when = _cycle_axis(cycles)
    for i, phase in enumerate(phases):
        ys = _nums([round(float((c.phase_durations or {}).get(phase) or 0) * 1000, 2) for c in cycles])
        if not ys.any():
            continue
        fig.add_trace(go.Bar(x=xs, y=ys, name=phase, marker={"color": PALETTE[i % len(PALETTE)]}, customdata=when,
                             hovertemplate="%{y:.1f} ms<extra>" + phase + "</extra>"))
    fig.update_layout(**_layout(barmode="stack", bargap=0.15, yaxis={"title": {"text": "ms"}},
                                xaxis={"type": "category", "nticks": 12}, hovermode="x unified",
                                legend={"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 10}},
                                margin={"l": 48, "r": 150, "t": 8, "b": 36}))
    return to_dict(fig)


def cycle_decisions(cycles: list[Any]) -> dict[str, Any]:
    """Binds, evictions, pipelined and pending per cycle."""
    if not cycles:
        return EMPTY
    xs, _when = _cycle_axis(cycles)
    fig = go.Figure()
    for attr, colour, kind in (("binds", GOOD, "bar"), ("evictions", BAD, "bar"), ("pipelined", ACCENT, "bar"),
                               ("pending", MUTED, "line")):
        ys = _nums([getattr(c, attr) for c in cycles])
        if kind == "bar":
            fig.add_trace(go.Bar(x=xs, y=ys, name=attr, marker={"color": colour}))
        else:
            fig.add_trace(go.Scatter(x=xs, y=ys, name=attr, mode="lines", line={"color": colour, "dash": "dot"}))
    fig.update_layout(**_layout(barmode="group", bargap=0.2, yaxis={"title": {"text": "count"}},
                                xaxis={"type": "category", "nticks": 12}))
    return to_dict(fig)


def usage_stacked(series: dict[str, list[tuple[datetime, float]]], covered_hours: dict[datetime, float],
                  partial: Sequence[datetime], unit: str, window: tuple[datetime, datetime],
                  order: Sequence[str] | None = None) -> dict[str, Any]:
    """Stacked areas: per slot, each queue's (or department's) resource-hours divided by the hours of
    the slot the window covered, i.e. the average amount held. A partial slot (the window's first, the
    current) is therefore not a fall; it is marked. The x axis is the window from the first minute.
    `order`: colours by position in it (namespaces, users) rather than by a hash of the name (queues)."""
    if not any(series.values()):
        return EMPTY
    fig = go.Figure()
    partial_set = set(partial)
    for name in sorted(series):
        pts = series[name]
        if not pts:
            continue
        fig.add_trace(go.Scatter(
            x=_times([t for t, _ in pts]), y=_nums([round(v / covered_hours[t], 3) for t, v in pts]), name=name,
            mode="lines+markers" if len(pts) < 3 else "lines", stackgroup="one", line={"width": 0.5, "color": queue_colour(name, order)},
            customdata=[("partial: " if t in partial_set else "") + f"{covered_hours[t]:.2f} h, {v:.2f} resource-hours"
                        for t, v in pts],
            hovertemplate="%{y:.2f} " + unit + " (%{customdata})<extra>" + name + "</extra>",
        ))
    shapes = [{"type": "rect", "xref": "x", "yref": "paper", "x0": t.isoformat(), "x1": window[1].isoformat(),
               "y0": 0, "y1": 1, "fillcolor": "rgba(138,148,166,.12)", "line": {"width": 0}}
              for t in sorted(partial_set) if t >= max(partial_set)][:1]
    fig.update_layout(**_layout(yaxis={"title": {"text": unit}},
                                xaxis={"range": [window[0].isoformat(), window[1].isoformat()], "type": "date"},
                                shapes=shapes))
    return to_dict(fig)


def whatif_allocation(timeline: dict[str, Any], queues: Sequence[str]) -> dict[str, Any]:
    """What-if: allocated GPUs per leaf queue over simulated time, current run solid, changed dashed.

    `timeline` is the what-if result's {"current": {"t", "queues"}, "changed": {...}}; a queue
    keeps its colour in both runs so the two lines of one queue read as a pair.
    """
    runs = [(label, timeline.get(key) or {}) for key, label in (("current", "now"), ("changed", "changed"))]
    if not any(run.get("t") for _, run in runs):
        return EMPTY
    fig = go.Figure()
    order = list(queues)
    for label, run in runs:
        xs = [t.replace("+00:00", "") for t in run.get("t", [])]
        for q in order:
            ys = (run.get("queues") or {}).get(q)
            if ys is None:
                continue
            fig.add_trace(go.Scatter(
                x=xs, y=_nums(ys), name=f"{q} ({label})", legendgroup=q, mode="lines",
                line={"color": queue_colour(q, order), "width": 2 if label == "now" else 1.6,
                      "dash": "solid" if label == "now" else "dash", "shape": "hv"},
                hovertemplate="%{y:.2f} GPUs<extra>" + f"{q} ({label})" + "</extra>",
            ))
    fig.update_layout(**_layout(yaxis={"title": {"text": "allocated GPUs"}}, legend={"y": -0.25}))
    return to_dict(fig)
