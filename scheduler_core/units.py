"""Resource amounts as people read them in reasons: cores, GiB and GPUs with fixed decimals.

The engine counts CPU in millicores, memory in bytes and GPUs in devices (`model`); every message that
shows an amount formats it here, so a reason never reads "allocated 552000 > 92000 in cpu".
"""

from __future__ import annotations

RESOURCE_TITLES = ("CPU", "memory", "GPU")
#: bytes in a megabyte: queue memory quotas and limits are in MB, as in KAI's Queue CRD
MB = 1_000_000
_GIB = float(1 << 30)
#: Longest value echoed back in an error message (longer ones are cut, with their length).
SHOWN_CHARS = 80


def shown(value: object) -> str:
    """``repr(value)`` cut to SHOWN_CHARS characters, so an error never echoes a whole document."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def number(x: float) -> str:
    """A plain number as reasons show it: -1 reads "unlimited", the rest as ``_fixed``.

    >>> number(-1), number(3), number(0.255)
    ('unlimited', '3', '0.26')
    """
    return "unlimited" if x == -1 else _fixed(x)


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
