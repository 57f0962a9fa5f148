"""The reason codes the engine writes: one vocabulary, kebab-case.

A `Reason(code, message, details)` says why a job stays pending or why a pod was evicted. The
code is one of the constants below (or, for reclaim, `RECLAIM_PREFIX` + one of
`RECLAIM_VERDICTS`); the message carries the numbers in units a person reads (`units`). The
control plane stores the codes as they are, translates them into headlines for the UI, and maps
some to KAI's condition reasons when it writes status back to a cluster.
"""

from __future__ import annotations

# ---- why a job is pending
QUEUE_OVER_LIMIT = "queue-over-limit"
NON_PREEMPTIBLE_OVER_QUOTA = "non-preemptible-over-quota"
NO_NODE_FITS = "no-node-fits"
NO_NODE_MATCHES = "no-node-matches"
TOPOLOGY_UNSATISFIED = "topology-unsatisfied"
TOPOLOGY_UNKNOWN = "topology-unknown"  # the constraint names a topology or level that does not exist
NOT_READY = "not-ready"
NOT_ATTEMPTED = "not-attempted"
INVALID = "invalid"
SESSION_CAP = "session-cap"
PREEMPTION_DELAY = "preemption-delay"
PREEMPT_NO_VICTIMS = "preempt-no-victims"
PREEMPT_FAILED = "preempt-failed"
PREEMPT_NON_PREEMPTIBLE_OVER_QUOTA = "preempt-non-preemptible-over-quota"
RECLAIM_SKIPPED = "reclaim-skipped"
RECLAIM_NO_VICTIMS = "reclaim-no-victims"
RECLAIM_FAILED = "reclaim-failed"
RECLAIM_CANNOT = "reclaim-cannot"
CONSOLIDATION_FAILED = "consolidation-failed"

# ---- why a pod was evicted
RECLAIM = "reclaim"
PREEMPT = "preempt"
CONSOLIDATION = "consolidation"
STALE_GANG = "stale-gang"
EVICTED = "evicted"

#: reclaim's verdicts (`reclaimable.Verdict.code`); a failed one is reported as RECLAIM_PREFIX + code
RECLAIM_PREFIX = "reclaim-"
RECLAIMER_OVER_FAIR_SHARE = "reclaimer-over-fair-share"
RECLAIMER_WITHIN_FAIR_SHARE = "reclaimer-within-fair-share"
RECLAIMER_MORE_SATURATED = "reclaimer-more-saturated"
MAINTAIN_FAIR_SHARE = "maintain-fair-share"
GUARANTEE_DESERVED_QUOTA = "guarantee-deserved-quota"
IN_QUOTA_QUEUE_PRIORITY = "in-quota-queue-priority"
VICTIM_PROTECTED = "victim-protected"
VICTIM_OVER_ALLOCATABLE = "victim-over-allocatable"
VICTIM_WITHIN_ALLOCATABLE = "victim-within-allocatable"
VICTIM_OVER_QUOTA = "victim-over-quota"
VICTIM_UNDER_QUOTA = "victim-under-quota"
VICTIM_AT_QUOTA = "victim-at-quota"
STRATEGIES_SATISFIED = "strategies-satisfied"
SATURATION_OK = "saturation-ok"

RECLAIM_VERDICTS = frozenset({
    RECLAIMER_OVER_FAIR_SHARE, RECLAIMER_WITHIN_FAIR_SHARE, RECLAIMER_MORE_SATURATED, NON_PREEMPTIBLE_OVER_QUOTA,
    MAINTAIN_FAIR_SHARE, GUARANTEE_DESERVED_QUOTA, IN_QUOTA_QUEUE_PRIORITY, VICTIM_PROTECTED,
    VICTIM_OVER_ALLOCATABLE, VICTIM_WITHIN_ALLOCATABLE, VICTIM_OVER_QUOTA, VICTIM_UNDER_QUOTA, VICTIM_AT_QUOTA,
    STRATEGIES_SATISFIED, SATURATION_OK,
})

PENDING_CODES = frozenset({
    QUEUE_OVER_LIMIT, NON_PREEMPTIBLE_OVER_QUOTA, NO_NODE_FITS, NO_NODE_MATCHES, TOPOLOGY_UNSATISFIED, TOPOLOGY_UNKNOWN,
    NOT_READY, NOT_ATTEMPTED, INVALID, SESSION_CAP, PREEMPTION_DELAY, PREEMPT_NO_VICTIMS, PREEMPT_FAILED,
    PREEMPT_NON_PREEMPTIBLE_OVER_QUOTA, RECLAIM_SKIPPED, RECLAIM_NO_VICTIMS, RECLAIM_FAILED, RECLAIM_CANNOT,
    CONSOLIDATION_FAILED,
})
EVICTION_CODES = frozenset({RECLAIM, PREEMPT, CONSOLIDATION, STALE_GANG, EVICTED})


def is_known(code: str) -> bool:
    """Whether `code` belongs to the vocabulary (a reclaim verdict counts with its prefix)."""
    if code in PENDING_CODES or code in EVICTION_CODES:
        return True
    return code.startswith(RECLAIM_PREFIX) and code[len(RECLAIM_PREFIX):] in RECLAIM_VERDICTS


def all_codes() -> frozenset[str]:
    """Every code a Reason may carry."""
    return PENDING_CODES | EVICTION_CODES | frozenset(RECLAIM_PREFIX + v for v in RECLAIM_VERDICTS)
