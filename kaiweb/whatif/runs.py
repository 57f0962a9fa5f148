"""What-if runs on a worker: checked when asked, run by a Celery task with a time limit, polled.

`submit` checks every input at once (the same 400s as before, nothing stored on a bad input), refuses
a user who already has KAI_WHATIF_MAX_RUNNING_PER_USER queued or running, stores the run with the
window's end fixed, and sends the task. `execute` (the task's body) replays and stores the result;
a run past KAI_WHATIF_TIME_LIMIT_S ends "timed-out". Each user keeps the last
KAI_WHATIF_KEEP_PER_USER runs; older ones are deleted when a new one is stored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from kaiweb.whatif import pools
from kaiweb.whatif import replay as whatif
from kaiweb.whatif.models import WhatIfRun


class TooManyRuns(Exception):
    """The user has as many what-ifs queued or running as allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"you already have {limit} what-if(s) queued or running "
                         f"(KAI_WHATIF_MAX_RUNNING_PER_USER = {limit}); wait for one to finish")
        self.limit = limit


def _call(inputs: dict[str, Any], *, check_only: bool) -> dict[str, Any]:
    now = datetime.fromisoformat(inputs["now"])
    window = whatif.window_from_hours(inputs["window_hours"])
    if inputs.get("org") is not None:
        if inputs.get("changes") or inputs.get("yaml"):
            raise whatif.WhatIfInputError({"org": ["give a department's or project's entries, field changes or a "
                                                   "YAML tree, exactly one of them"]})
        if inputs.get("shard") is not None:
            raise whatif.WhatIfInputError({"shard": ["leave it out with org: each node pool is replayed on its own "
                                                     "shard"]})
        return pools.run_pools_whatif(
            inputs["org"], window, now=now, max_jobs=inputs["max_jobs"],
            max_horizon_s=float(inputs["max_horizon_hours"]) * 3600, max_cycles=inputs["max_cycles"],
            consolidation=bool(inputs.get("consolidation")), check_only=check_only)
    return whatif.run_whatif(
        inputs.get("changes") or None, window, inputs.get("shard"), yaml_text=inputs.get("yaml") or None, now=now,
        max_jobs=inputs["max_jobs"], max_horizon_s=float(inputs["max_horizon_hours"]) * 3600,
        max_cycles=inputs["max_cycles"], consolidation=bool(inputs.get("consolidation")), check_only=check_only)


def in_flight(user: Any) -> int:
    """The user's runs still queued or running (a run older than twice the time limit is not counted:
    its worker is gone)."""
    since = timezone.now() - timedelta(seconds=2 * settings.KAI_WHATIF_TIME_LIMIT_S + 60)
    return WhatIfRun.objects.filter(user=user, state__in=(WhatIfRun.State.QUEUED, WhatIfRun.State.RUNNING),
                                    created_at__gte=since).count()


def submit(user: Any, *, changes: dict[str, Any] | None = None, yaml: str | None = None, window_hours: float = 24.0,
           shard: int | None = None, max_jobs: int = whatif.DEFAULT_MAX_JOBS,
           max_horizon_hours: float = whatif.DEFAULT_MAX_HORIZON_S / 3600, max_cycles: int = whatif.DEFAULT_MAX_CYCLES,
           consolidation: bool = False, org: dict[str, Any] | None = None) -> WhatIfRun:
    """Check and store a what-if (`tasks.submit` also sends it); raises WhatIfInputError (a bad input)
    or TooManyRuns. `org`: a department's or project's entries per node pool (`pools`), replayed per pool."""
    inputs = {"changes": changes or None, "yaml": yaml or None, "org": org, "window_hours": float(window_hours),
              "shard": shard,
              "max_jobs": int(max_jobs), "max_horizon_hours": float(max_horizon_hours),
              "max_cycles": int(max_cycles), "consolidation": bool(consolidation),
              "now": timezone.now().isoformat()}
    _call(inputs, check_only=True)  # every input error now, as a 400
    limit = int(settings.KAI_WHATIF_MAX_RUNNING_PER_USER)
    if in_flight(user) >= limit:
        raise TooManyRuns(limit)
    run = WhatIfRun.objects.create(user=user, inputs=inputs)
    keep = list(WhatIfRun.objects.filter(user=user).values_list("pk", flat=True)[:settings.KAI_WHATIF_KEEP_PER_USER])
    WhatIfRun.objects.filter(user=user).exclude(pk__in=keep).delete()
    return run


def execute(run_id: int) -> str:
    """Run a stored what-if and store its result; returns the final state."""
    from celery.exceptions import SoftTimeLimitExceeded

    run = WhatIfRun.objects.filter(pk=run_id).first()
    if run is None or run.finished:
        return run.state if run else "missing"
    WhatIfRun.objects.filter(pk=run.pk).update(state=WhatIfRun.State.RUNNING, started_at=timezone.now())
    try:
        result = _call(run.inputs, check_only=False)
    except whatif.WhatIfInputError as exc:
        state, fields = WhatIfRun.State.FAILED, {"error": exc.message_dict}
    except SoftTimeLimitExceeded:
        state, fields = WhatIfRun.State.TIMED_OUT, {"error": {"non_field_errors": [
            f"the what-if ran longer than {settings.KAI_WHATIF_TIME_LIMIT_S} s (KAI_WHATIF_TIME_LIMIT_S) and was "
            "stopped; narrow the window or lower max_jobs / max_cycles"]}}
    else:
        state, fields = WhatIfRun.State.DONE, {"result": result}
    WhatIfRun.objects.filter(pk=run.pk).update(state=state, finished_at=timezone.now(), **fields)
    return state
