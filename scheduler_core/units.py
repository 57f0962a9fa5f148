"""Units: the one place memory is converted, and resource amounts as people read them in reasons.

The engine counts CPU in millicores, memory in bytes and GPUs in devices (`model`). Queues (the Queue
CRD, the database's quotas, limits, statuses and usage) count memory in MB, 10^6 bytes, as KAI's
Queue CRD does: CPU and GPUs are the same in both. GPU memory (the ``gpu-memory`` annotation, a
node's ``nvidia.com/gpu.memory``) and the traces' memory are in MiB, 2^20 bytes. Every conversion
between these is a function here (``queue_crd`` reads and writes the CRD with them), and a test keeps
MB and MiB arithmetic out of every other module.

Every message that shows an amount formats it here too, so a reason never reads
"allocated 552000 > 92000 in cpu".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

RESOURCE_TITLES = ("CPU", "memory", "GPU")
#: the queue resources, in the order of the engine's resource vectors (millicores, bytes, devices)
QUEUE_RESOURCES = ("cpu", "memory", "gpu")
#: bytes in a megabyte: queue memory quotas and limits are in MB, as in KAI's Queue CRD
MB = 1_000_000
#: bytes in a mebibyte: GPU memory and the traces' memory are in MiB
MIB = 1 << 20
_GIB = float(1 << 30)
#: Longest value echoed back in an error message (longer ones are cut, with their length).
SHOWN_CHARS = 80


# ------------------------------------------------------------------------------ conversions


def mb_to_bytes(mb: float) -> float:
    """MB (queue units) → bytes (the engine's).

    >>> mb_to_bytes(4096)
    4096000000.0
    """
    return float(mb) * MB


def bytes_to_mb(n: float) -> float:
    """Bytes (the engine's) → MB (queue units).

    >>> bytes_to_mb(4 * 2**30)
    4294.967296
    """
    return float(n) / MB


def mib_to_bytes(mib: int) -> int:
    """MiB (GPU memory, the traces) → bytes.

    >>> mib_to_bytes(16 * 1024)
    17179869184
    """
    return mib * MIB


def bytes_to_mib(n: int) -> int:
    """Bytes → whole MiB, rounded down (a part of a MiB is not a MiB).

    >>> bytes_to_mib(17179869184), bytes_to_mib(MIB - 1)
    (16384, 0)
    """
    return int(n) // MIB


def _scale(resource: str) -> float:
    """Engine units in one queue unit of ``resource`` ("cpu", "memory", "gpu"): MB for memory, 1 else."""
    return float(MB) if resource == "memory" else 1.0


def to_engine_units(resource: str, amount: float) -> float:
    """A queue amount of ``resource`` in the engine's unit; a negative amount (-1, unlimited) stays as it is.

    >>> to_engine_units("memory", 2.5), to_engine_units("memory", -1), to_engine_units("cpu", 500)
    (2500000.0, -1.0, 500.0)
    """
    amount = float(amount)
    return amount if amount < 0 else amount * _scale(resource)


def to_queue_units(resource: str, amount: float) -> float:
    """An engine amount of ``resource`` in queue units; a negative amount (-1, unlimited) stays as it is.

    >>> to_queue_units("memory", 4_000_000), to_queue_units("memory", -1), to_queue_units("gpu", 2)
    (4.0, -1.0, 2.0)
    """
    amount = float(amount)
    return amount if amount < 0 else amount / _scale(resource)


def vector_to_queue_units(vector: Iterable[float]) -> dict[str, float]:
    """An engine resource vector (millicores, bytes, devices) → queue figures {"cpu", "memory" (MB), "gpu"}.

    >>> vector_to_queue_units((500, 2_000_000, 1))
    {'cpu': 500.0, 'memory': 2.0, 'gpu': 1.0}
    """
    return {r: to_queue_units(r, x) for r, x in zip(QUEUE_RESOURCES, vector, strict=True)}


def recorded_queue_units(vector: Iterable[float]) -> dict[str, float]:
    """An engine resource vector as the cycle records it in queue units (a queue's status, its
    figures in a preemption): millicores to 3 decimals, MB to 6 (to the byte, so a status written
    back says 4Gi, not 4294967000), GPUs to 4.

    >>> recorded_queue_units((1500.00001, 4 * 2**30, 1 / 3))
    {'cpu': 1500.0, 'memory': 4294.967296, 'gpu': 0.3333}
    """
    figures = vector_to_queue_units(vector)
    return {"cpu": round(figures["cpu"], 3), "memory": round(figures["memory"], 6), "gpu": round(figures["gpu"], 4)}


def queue_units_to_vector(figures: Mapping[str, Any]) -> list[float]:
    """Queue figures {"cpu", "memory" (MB), "gpu"} → an engine vector (millicores, bytes, devices); a figure
    missing or empty reads 0.

    >>> queue_units_to_vector({"cpu": 500, "memory": 2, "gpu": None})
    [500.0, 2000000.0, 0.0]
    """
    return [to_engine_units(r, float(figures.get(r) or 0)) for r in QUEUE_RESOURCES]


# ------------------------------------------------------------------------------- messages


def shown(value: object) -> str:
    """``repr(value)`` cut to SHOWN_CHARS characters, so an error never echoes a whole document."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def number(x: float) -> str:
    """A plain number as reasons show it: -1 (a quota or limit's "none") and infinity (what an
    unlimited quota protects) read "unlimited", the rest as ``_fixed``.

    >>> number(-1), number(float("inf")), number(3), number(0.255)
    ('unlimited', 'unlimited', '3', '0.26')
    """
    return "unlimited" if x == -1 or x == float("inf") else _fixed(x)


def _fixed(x: float) -> str:
    """A whole number as it is, anything else with two decimals: 8, 7.50, 0.25."""
    if abs(x - round(x)) < 1e-9:
        return str(int(round(x)))
    return f"{x:.2f}"


def amount(r: int, x: float) -> str:
    """One amount of resource `r` (0 CPU, 1 memory, 2 GPU) with its unit; a cap of -1 reads "unlimited".

    >>> amount(0, 552000), amount(1, 4 * 2**30), amount(2, 7.5), amount(2, 1), amount(2, -1)
    ('552 cores', '4 GiB', '7.50 GPUs', '1 GPU', 'unlimited')
    """
    if x == -1:
        return "unlimited"
    if r == 0:
        v = x / 1000.0
        return f"{_fixed(v)} core" if abs(v - 1) < 1e-9 else f"{_fixed(v)} cores"
    if r == 1:
        return f"{_fixed(x / _GIB)} GiB"
    return f"{_fixed(x)} GPU" if abs(x - 1) < 1e-9 else f"{_fixed(x)} GPUs"
