"""Signals of the scheduling cycle.

`cycle_step` is sent after each durable step of a cycle — "after-decide" (the engine has
decided, nothing is recorded), "after-record" (decisions are recorded as planned) and
"after-apply" (the cluster has been asked to bind and evict), and "finished" (the cycle row holds
its final status, succeeded or failed) — with the cycle row. The product
connects nothing to it; it is where an operator can hang tracing or metrics, and where the fault
tests stop a worker at an exact point.
"""

from __future__ import annotations

from django.dispatch import Signal

#: sender: the SchedulingCycle class; kwargs: point (str), cycle (SchedulingCycle)
cycle_step = Signal()
