"""A report run's files: CSV (one row per line), JSON (everything), PDF (tables and charts).

Each is produced from the run's stored lines and inputs only, so a past run renders the same
numbers again. The PDF's charts are SVG drawn here (WeasyPrint renders SVG; it runs no script).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape

from kaiweb.reports.compute import hourly_series

CSV_COLUMNS = (
    "gpu_hours_allocated", "gpu_hours_deserved", "gpu_hours_over_quota", "gpu_hours_measured", "gpu_hours_used",
    "utilization_percent", "queueing_delay_avg_seconds", "queueing_delay_p90_seconds", "jobs_started",
    "jobs_finished", "jobs_preempted", "cost",
)
BAR_COLOURS = {"allocated": "#3867d6", "used": "#20bf6b", "deserved": "#222"}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def models_of(lines: dict[str, Any]) -> list[str]:
    return sorted({m for line in [*lines["lines"], lines["total"]] for m in line["gpu_hours_by_model"]})


def pools_of(lines: dict[str, Any]) -> list[str]:
    return sorted({p for line in [*lines["lines"], lines["total"]] for p in line.get("gpu_hours_by_pool") or {}})


def render_csv(run_lines: dict[str, Any], inputs: dict[str, Any]) -> str:
    """One row per line and a total row; GPU-hours per GPU model as `gpu_hours[MODEL]` columns, per node pool as
    `gpu_hours_pool[POOL]` columns (none for a run stored before pools)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    models, pools = models_of(run_lines), pools_of(run_lines)
    writer.writerow(["line", "period_start", "period_end", *CSV_COLUMNS, *(f"gpu_hours[{m}]" for m in models),
                     *(f"gpu_hours_pool[{p}]" for p in pools)])
    for line in [*run_lines["lines"], run_lines["total"]]:
        by_pool = line.get("gpu_hours_by_pool") or {}
        writer.writerow([line["name"], inputs["period"]["start"], inputs["period"]["end"],
                         *(_cell(line[c]) for c in CSV_COLUMNS),
                         *(_cell(line["gpu_hours_by_model"].get(m, 0.0)) for m in models),
                         *(_cell(by_pool.get(p, 0.0)) for p in pools)])
    return out.getvalue()


def render_json(run_lines: dict[str, Any], inputs: dict[str, Any], run_id: int | None = None) -> str:
    doc = {"report": inputs["definition"], "run": run_id, "period": inputs["period"],
           "currency": run_lines.get("currency", ""), "period_hours": run_lines["period_hours"],
           "lines": run_lines["lines"], "total": run_lines["total"], "idle_gpu_jobs": inputs.get("idle", [])}
    return json.dumps(doc, indent=2, sort_keys=True)


def bars_svg(lines: list[dict[str, Any]], width: int = 640) -> str:
    """Horizontal bars per line: GPU-hours allocated, used (when known), and the deserved mark."""
    if not lines:
        return ""
    label_w, row_h, top = 150, 34, 24
    peak = max([1e-9] + [max(line["gpu_hours_allocated"], line["gpu_hours_deserved"] or 0.0) for line in lines])
    scale = (width - label_w - 70) / peak
    height = top + row_h * len(lines) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif" font-size="10">',
             f'<rect x="{label_w}" y="4" width="10" height="8" fill="{BAR_COLOURS["allocated"]}"/>'
             f'<text x="{label_w + 14}" y="12">allocated</text>'
             f'<rect x="{label_w + 80}" y="4" width="10" height="8" fill="{BAR_COLOURS["used"]}"/>'
             f'<text x="{label_w + 94}" y="12">used</text>'
             f'<rect x="{label_w + 140}" y="2" width="2" height="12" fill="{BAR_COLOURS["deserved"]}"/>'
             f'<text x="{label_w + 146}" y="12">deserved</text>']
    for i, line in enumerate(lines):
        y = top + i * row_h
        alloc = line["gpu_hours_allocated"] * scale
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(line["name"])}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{alloc:.1f}" height="12" '
                     f'fill="{BAR_COLOURS["allocated"]}"/>')
        parts.append(f'<text x="{label_w + alloc + 4:.1f}" y="{y + 14}">{line["gpu_hours_allocated"]:.1f}</text>')
        if line["gpu_hours_used"] is not None:
            used = line["gpu_hours_used"] * scale
            parts.append(f'<rect x="{label_w}" y="{y + 18}" width="{used:.1f}" height="8" '
                         f'fill="{BAR_COLOURS["used"]}"/>')
        if line["gpu_hours_deserved"] is not None:
            x = label_w + line["gpu_hours_deserved"] * scale
            parts.append(f'<rect x="{x:.1f}" y="{y + 1}" width="2" height="27" fill="{BAR_COLOURS["deserved"]}"/>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(inputs: dict[str, Any], width: int = 640, height: int = 180) -> str:
    """Mean GPUs allocated (and used, where known) per hour over the period."""
    hours, alloc, used = hourly_series(inputs)
    if not hours:
        return ""
    left, bottom, top = 40, 24, 10
    peak = max(alloc + [u for u in used if u is not None] + [1e-9])
    plot_w, plot_h = width - left - 10, height - bottom - top
    step = plot_w / max(1, len(hours) - 1)

    def xy(i: int, v: float) -> str:
        return f"{left + i * step:.1f},{top + plot_h - v / peak * plot_h:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif" font-size="9">',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" stroke="#999"/>',
             f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{peak:.0f}</text>',
             f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>',
             f'<text x="{left}" y="{height - 6}">{escape(hours[0][:16])}</text>',
             f'<text x="{width - 10}" y="{height - 6}" text-anchor="end">{escape(hours[-1][:16])}</text>',
             f'<polyline fill="none" stroke="{BAR_COLOURS["allocated"]}" stroke-width="1.5" points="'
             + " ".join(xy(i, v) for i, v in enumerate(alloc)) + '"/>']
    known = [(i, v) for i, v in enumerate(used) if v is not None]
    if known:
        parts.append(f'<polyline fill="none" stroke="{BAR_COLOURS["used"]}" stroke-width="1.5" points="'
                     + " ".join(xy(i, v) for i, v in known) + '"/>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(run_lines: dict[str, Any], inputs: dict[str, Any]) -> str:
    """The PDF's HTML (also a print view): tables, the two charts, the idle-GPU finding."""
    return render_to_string("reports/pdf.html", {
        "inputs": inputs, "report": run_lines, "lines": run_lines["lines"], "total": run_lines["total"],
        "models": models_of(run_lines), "pools": pools_of(run_lines), "bars_svg": bars_svg(run_lines["lines"]),
        "timeline_svg": timeline_svg(inputs), "idle": inputs.get("idle", []),
    })


def render_pdf(run_lines: dict[str, Any], inputs: dict[str, Any]) -> bytes:
    from weasyprint import HTML

    return HTML(string=render_html(run_lines, inputs)).write_pdf()


def render(fmt: str, run_lines: dict[str, Any], inputs: dict[str, Any], run_id: int | None = None) -> bytes:
    if fmt == "csv":
        return render_csv(run_lines, inputs).encode()
    if fmt == "json":
        return render_json(run_lines, inputs, run_id).encode()
    if fmt == "pdf":
        return render_pdf(run_lines, inputs)
    raise ValueError(f"format: must be csv, json or pdf, not {fmt!r}")
