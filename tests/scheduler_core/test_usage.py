"""Time-based usage input (KAI-SEMANTICS §3.8): decayed, windowed, normalised to cluster capacity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.proportion import GPU, QueueAttrs, compute_fair_shares
from scheduler_core.usage import UsageInputError, compute_usage, window_start

HOUR = 3600.0
MIN = 60.0


def gpu_rows(values: list[float]) -> list[list[float]]:
    return [[0.0, 0.0, v] for v in values]


def test_docs_example_24_gpu_hours_of_100_is_024():
    times = [i * HOUR for i in range(1, 11)]  # ten hourly samples ending at now
    used = [4, 4, 4, 4, 4, 4, 0, 0, 0, 0]  # 24 GPU-hours
    res = compute_usage(times, {"team": gpu_rows(used)}, gpu_rows([10] * 10), now=10 * HOUR, window=10 * HOUR)
    assert res.for_queue("team")[GPU] == pytest.approx(0.24)
    assert res.decayed_allocated[0, GPU] == pytest.approx(24)
    assert res.decayed_capacity[GPU] == pytest.approx(100)


def test_docs_example_with_decay_recent_usage_weighs_more():
    now = 10 * MIN
    times = [now - 3 * MIN, now - 2 * MIN, now - MIN, now]
    res = compute_usage(
        times,
        {"A": gpu_rows([16, 16, 0, 0]), "B": gpu_rows([0, 0, 16, 16])},
        gpu_rows([16] * 4), now=now, half_life=2 * MIN, window=HOUR,
    )
    assert res.weights == pytest.approx([0.354, 0.5, 0.707, 1.0], abs=1e-3)
    assert res.for_queue("A")[GPU] == pytest.approx(0.333, abs=1e-3)
    assert res.for_queue("B")[GPU] == pytest.approx(0.667, abs=1e-3)
    assert res.decayed_capacity[GPU] == pytest.approx(16 * 2.561, abs=0.01)


def test_sliding_window_excludes_old_and_future_samples():
    times = [0.0, 50.0, 100.0, 150.0]
    res = compute_usage(times, {"q": gpu_rows([8, 8, 4, 8])}, gpu_rows([8] * 4), now=100.0, window=60.0)
    assert res.in_window.tolist() == [False, True, True, False]
    assert res.for_queue("q")[GPU] == pytest.approx(12 / 16)


def test_tumbling_window_resets_at_each_period():
    assert window_start(250.0, 100.0, "tumbling", tumbling_start=20.0) == 220.0
    times = [200.0, 219.0, 220.0, 240.0]
    res = compute_usage(times, {"q": gpu_rows([8, 8, 2, 4])}, gpu_rows([8] * 4), now=250.0, window=100.0,
                        window_type="tumbling", tumbling_start=20.0)
    assert res.in_window.tolist() == [False, False, True, True]
    assert res.window_start == 220.0
    assert res.for_queue("q")[GPU] == pytest.approx(6 / 16)


def test_array_input_with_names_and_zero_capacity_gives_zero():
    alloc = np.zeros((2, 3, 3))
    alloc[0, :, GPU] = 2
    cap = np.zeros((3, 3))
    cap[:, GPU] = 4
    res = compute_usage([1, 2, 3], alloc, cap, now=3, queues=["x", "y"])
    assert res.usage.shape == (2, 3)
    assert res.for_queue("x") == [0.0, 0.0, 0.5]  # no CPU/memory capacity → 0, not NaN
    assert res.for_queue("missing") == [0.0, 0.0, 0.0]
    d = res.as_dict()
    assert d["queues"]["x"]["decayed_allocated"][GPU] == 6
    assert d["samples_in_window"] == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"half_life": -5}, "half_life"),
        ({"window": 0}, "window"),
        ({"window_type": "cron"}, "window_type"),
        ({"window_type": "tumbling"}, "tumbling_start: required"),
        ({"window_type": "tumbling", "tumbling_start": 99}, "is after now"),
    ],
)
def test_bad_parameters_name_the_field(kwargs, message):
    with pytest.raises(UsageInputError, match=message):
        compute_usage([1.0], {"q": gpu_rows([1])}, gpu_rows([2]), now=10.0, **kwargs)


def test_bad_samples_name_the_field():
    with pytest.raises(UsageInputError, match="capacity: needs one row per sample"):
        compute_usage([1.0, 2.0], {"q": gpu_rows([1, 1])}, gpu_rows([2]), now=10.0)
    with pytest.raises(UsageInputError, match="allocated: must be ≥ 0"):
        compute_usage([1.0], {"q": gpu_rows([-1])}, gpu_rows([2]), now=10.0)
    with pytest.raises(UsageInputError, match="finite"):
        compute_usage([1.0], {"q": gpu_rows([float("nan")])}, gpu_rows([2]), now=10.0)
    with pytest.raises(UsageInputError, match="queues: must name"):
        compute_usage([1.0], np.zeros((2, 1, 3)), gpu_rows([2]), now=10.0, queues=["only-one"])


def test_usage_feeds_the_fair_share_division():
    now = 10 * MIN
    times = [now - 3 * MIN, now - 2 * MIN, now - MIN, now]
    res = compute_usage(times, {"A": gpu_rows([16, 16, 16, 16]), "B": gpu_rows([0, 0, 0, 0])},
                        gpu_rows([16] * 4), now=now, half_life=2 * MIN)
    qs = {
        n: QueueAttrs(n, None, 100, i, deserved=[-1, -1, 0], limit=[-1, -1, -1], weight=[1, 1, 1],
                      request=[0, 0, 16], usage=res.for_queue(n))
        for i, n in enumerate(["A", "B"])
    }
    compute_fair_shares(qs, [0, 0, 16], k=1.0)
    # U_A = 1, U_B = 0: P_A = max(0, .5 + (.5 - 1)) = 0, P_B = 1 → B gets the whole surplus
    assert (qs["A"].fair[GPU], qs["B"].fair[GPU]) == (0, 16)


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(1, 100)), min_size=1, max_size=20
    ),
    half_life=st.one_of(st.none(), st.floats(1, 1000)),
)
def test_property_usage_sums_to_at_most_one_when_allocation_fits(data, half_life):
    times = np.arange(len(data), dtype=float)
    cap = np.array([[0, 0, c] for _, _, c in data])
    a = np.array([[0, 0, fa * c] for fa, _, c in data])
    b = np.array([[0, 0, (1 - fa) * fb * c] for fa, fb, c in data])
    res = compute_usage(times, {"a": a, "b": b}, cap, now=float(len(data) - 1), half_life=half_life,
                        window=float(len(data) + 1))
    total = res.usage[:, GPU].sum()
    assert 0 <= total <= 1 + 1e-9
    again = compute_usage(times, {"b": b, "a": a}, cap, now=float(len(data) - 1), half_life=half_life,
                          window=float(len(data) + 1))
    assert np.array_equal(res.usage, again.usage)
