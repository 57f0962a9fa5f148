"""The server-built time charts read right from the first accounting minute on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kaiweb.ui import charts

T0 = datetime(2026, 11, 26, 15, 37, tzinfo=UTC)


def test_one_minute_of_allocation_is_drawn_as_points_over_ten_minutes():
    """Right after start-up usage accounting has one minute: a line through one point would draw
    nothing and plotly would spread the instant over the axis in milliseconds."""
    fig = charts.allocation_over_time([(T0, 12.0)], [(T0, 100.0)], gpu_total=16, cpu_total_cores=200)
    assert [t["mode"] for t in fig["data"]] == ["lines+markers", "lines+markers"]
    assert fig["layout"]["xaxis"]["type"] == "date"
    assert fig["layout"]["xaxis"]["range"] == ["2026-11-26T15:27:00", "2026-11-26T15:38:00"]


def test_a_day_of_allocation_is_a_line_over_its_own_span():
    rows = [(T0 + timedelta(minutes=k), 8.0 + k % 3) for k in range(60 * 24)]
    fig = charts.allocation_over_time(rows, rows, gpu_total=16, cpu_total_cores=200)
    assert {t["mode"] for t in fig["data"]} == {"lines"}
    assert "range" not in fig["layout"]["xaxis"]


def test_fragmentation_follows_the_same_rule():
    short = charts.fragmentation_over_time([(T0, 5.0, 0.0), (T0 + timedelta(minutes=1), 4.0, 1.0)], gpu_total=128)
    assert {t["mode"] for t in short["data"]} == {"lines+markers"}
    assert short["layout"]["xaxis"]["range"] == ["2026-11-26T15:28:00", "2026-11-26T15:39:00"]
    long = charts.fragmentation_over_time([(T0, 5.0, 0.0), (T0 + timedelta(hours=1), 4.0, 1.0)], gpu_total=128)
    assert {t["mode"] for t in long["data"]} == {"lines"}
    assert "range" not in long["layout"]["xaxis"]
