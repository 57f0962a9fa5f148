"""The floor: the cheapest program that makes the same kind of placements as the engine.

One best-fit pass over a numpy node array (free GPUs per node): each pod goes to the node with the
fewest free GPUs that still fits it, ties by node index. No fair share, no gangs, no queues. The
benchmarks time it in the same run as the engine and report ``ratio_to_floor``.
"""

from __future__ import annotations

import numpy as np


def best_fit(free_gpus: np.ndarray, pod_gpus: np.ndarray) -> tuple[np.ndarray, int]:
    """Place pods in order; returns (node index per pod, -1 = not placed) and the number placed."""
    free = free_gpus.astype(float).copy()
    out = np.full(len(pod_gpus), -1, dtype=np.int64)
    big = np.inf
    placed = 0
    for k, g in enumerate(pod_gpus):
        room = np.where(free >= g, free, big)
        i = int(np.argmin(room))
        if room[i] == big:
            continue
        free[i] -= g
        out[k] = i
        placed += 1
    return out, placed
