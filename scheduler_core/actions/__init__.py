"""KAI's eviction actions, one module each, and the victim search they share.

`reclaim`, `preempt` and `consolidate` find victims with `victims.solve`; `stale_gangs` evicts
gangs below their minimum. Allocation is `scheduler_core.allocate`; `scheduler_core.cycle` runs
the actions in the configured order.
"""
