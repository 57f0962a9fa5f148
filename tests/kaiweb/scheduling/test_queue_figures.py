"""Queue figures written back to the cluster keep their units exactly."""

from __future__ import annotations

from kaiweb.scheduling.write_back import _amounts
from scheduler_core.units import recorded_queue_units


def test_queue_memory_figures_keep_every_byte():
    four_gi = 4 * 1024**3
    figures = recorded_queue_units((500.0, float(four_gi), 2.0))
    assert _amounts(figures).memory_bytes == four_gi
