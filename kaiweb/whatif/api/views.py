"""POST /api/v1/what-if/ then GET /api/v1/what-if/{id}/: replay recorded workloads under the current and a
changed queue tree, on a worker.

The same inputs and result as the what-if page (`kaiweb.whatif.replay`). Any
signed-in user may call it: it reads and simulates, nothing is saved.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from kaiweb.whatif import replay as whatif


class WhatIfRequestSerializer(serializers.Serializer):
    changes = serializers.DictField(
        child=serializers.DictField(child=serializers.JSONField()), required=False,
        help_text="Per queue, the fields to change and their new values, as the queue edit form takes them "
                  "(gpu_quota, gpu_limit, gpu_over_quota_weight, cpu_…, memory_…, priority, parent, "
                  "preempt_min_runtime, reclaim_min_runtime). Give this, `yaml` or `org`.",
    )
    org = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text="A department's or project's numbers per node pool, as the org's entries take them: "
                  "{\"project\": \"vision\", \"entries\": [{\"pool\": \"h100\", \"gpu\": {\"deserved\": 8}}]} "
                  "(also `limit`, `over_quota_weight`, cpu and memory, `priority`; numbers left out are kept). Each "
                  "pool named is replayed on its own shard; the result has one comparison per pool (`pools`). "
                  "Give this, `changes` or `yaml`.")
    yaml = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                 help_text="Queue CRD documents laid over the current tree. Give this, `changes` "
                                           "or `org`.")
    window_hours = serializers.FloatField(
        required=False, default=24.0, min_value=0.01, max_value=settings.KAI_WHATIF_MAX_WINDOW_HOURS,
        help_text="Replay the workloads submitted in the last N hours (at most KAI_WHATIF_MAX_WINDOW_HOURS).")
    shard = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                     max_value=2**63 - 1, help_text="Shard id; default the first enabled shard.")
    max_jobs = serializers.IntegerField(
        required=False, default=whatif.DEFAULT_MAX_JOBS, min_value=1, max_value=settings.KAI_WHATIF_MAX_JOBS,
        help_text="Replay at most this many (most recent) workloads (at most KAI_WHATIF_MAX_JOBS).")
    max_horizon_hours = serializers.FloatField(
        required=False, default=whatif.DEFAULT_MAX_HORIZON_S / 3600, min_value=0.1,
        max_value=settings.KAI_WHATIF_MAX_HORIZON_HOURS,
        help_text="Stop each run after this many simulated hours (at most KAI_WHATIF_MAX_HORIZON_HOURS).")
    max_cycles = serializers.IntegerField(
        required=False, default=whatif.DEFAULT_MAX_CYCLES, min_value=1, max_value=settings.KAI_WHATIF_MAX_CYCLES,
        help_text="Stop each run after this many cycles (at most KAI_WHATIF_MAX_CYCLES). Replayed workloads × "
                  "cycles must stay within KAI_WHATIF_MAX_WORK.")
    consolidation = serializers.BooleanField(required=False, default=False,
                                             help_text="Also simulate consolidation (much slower).")


class _Metrics(serializers.Serializer):
    jobs = serializers.FloatField(allow_null=True)
    queueing_delay_mean_s = serializers.FloatField(allow_null=True)
    queueing_delay_p95_s = serializers.FloatField(allow_null=True)
    jct_mean_s = serializers.FloatField(allow_null=True)
    gpu_hours = serializers.FloatField(allow_null=True)
    allocated_gpus_avg = serializers.FloatField(allow_null=True)
    fair_share_gpus_avg = serializers.FloatField(allow_null=True)
    preemptions = serializers.FloatField(allow_null=True)


class _QueueRow(serializers.Serializer):
    queue = serializers.CharField()
    edited = serializers.BooleanField()
    current = _Metrics(allow_null=True)
    changed = _Metrics(allow_null=True)
    difference = _Metrics()


class _Change(serializers.Serializer):
    queue = serializers.CharField()
    field = serializers.CharField()
    current = serializers.JSONField(allow_null=True)
    changed = serializers.JSONField(allow_null=True)


class _Waits(serializers.Serializer):
    p50_wait_seconds = serializers.FloatField(allow_null=True, help_text="median of the jobs' p50 waits from now "
                                                                          "(null: beyond the estimator's horizon)")
    p80_wait_seconds = serializers.FloatField(allow_null=True, help_text="median of the jobs' p80 waits from now")


class _QueueWaits(serializers.Serializer):
    queue = serializers.CharField()
    jobs = serializers.IntegerField(help_text="jobs of the queue waiting now (in either tree)")
    edited = serializers.BooleanField(help_text="the queue or one above it is changed")
    differs = serializers.BooleanField(help_text="the waits differ between the two trees")
    current = _Waits()
    changed = _Waits()


class _StartEstimates(serializers.Serializer):
    now = serializers.FloatField(help_text="the live snapshot's clock (epoch seconds)")
    at = serializers.CharField(help_text="the same, ISO 8601 UTC")
    samples = serializers.IntegerField(help_text="samples the estimator drew per job")
    queues = _QueueWaits(many=True)
    note = serializers.CharField()


class _PoolResult(serializers.Serializer):
    pool = serializers.CharField()
    shard = serializers.CharField(help_text="the shard scheduling the pool")
    queue = serializers.CharField(help_text="the owner's queue in the pool, the one changed")
    result = serializers.DictField(help_text="the pool's comparison, with the fields of a what-if's result")


class WhatIfResultSerializer(serializers.Serializer):
    org = serializers.DictField(required=False, help_text="A what-if of `org`: the owner's kind and name")
    pools = _PoolResult(many=True, required=False, help_text="A what-if of `org`: one comparison per node pool "
                                                             "(then the fields below are absent but `empty`)")
    shard = serializers.CharField(allow_null=True)
    window = serializers.DictField(help_text="start, end (ISO 8601, UTC) and hours")
    cluster = serializers.DictField(help_text="nodes and GPUs replayed on")
    changes = _Change(many=True)
    jobs = serializers.DictField(help_text="recorded, replayed, durations (count per source), duration_sources, "
                                           "skipped (first 20), skipped_count, pods_beyond_gang_minimum")
    empty = serializers.BooleanField(help_text="True when no workload was recorded in the window")
    queues = _QueueRow(many=True)
    summary = serializers.DictField(help_text="current, changed, difference: Jain's index, utilisation, delays …")
    timeline = serializers.DictField(help_text="current and changed: t (ISO times), allocated_gpus, queues "
                                               "(allocated GPUs per leaf queue per cycle)")
    truncated = serializers.DictField(help_text="jobs_left_out, horizon_reached, max_jobs, max_horizon_s")
    notes = serializers.ListField(child=serializers.CharField())
    start_estimates = _StartEstimates(allow_null=True, help_text=(
        "The jobs waiting now, per leaf queue: their p50/p80 waits under the current tree and the changed one, "
        "from the start-time estimator on the shard's live snapshot (the same run times and seed)"))


class WhatIfRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["queued", "running", "done", "failed", "timed-out"],
                                    help_text="done: `result` holds the comparison; failed / timed-out: `error`.")
    url = serializers.CharField(help_text="Where to poll for the result.")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    result = WhatIfResultSerializer(allow_null=True)
    error = serializers.DictField(allow_null=True, help_text="{field: [messages]} of a failed or timed-out run")


def _run_body(request: Request, run: Any) -> dict[str, Any]:
    return {"id": run.pk, "state": run.state, "url": request.build_absolute_uri(f"/api/v1/what-if/{run.pk}/"),
            "created_at": run.created_at, "started_at": run.started_at, "finished_at": run.finished_at,
            "result": run.result, "error": run.error}


class WhatIfViewSet(viewsets.ViewSet):
    """Simulate a queue-tree change on recorded history: submit (checked at once, run on a worker), then poll."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=WhatIfRequestSerializer,
        responses={
            202: WhatIfRunSerializer,
            400: OpenApiResponse(
                response={"type": "object", "additionalProperties": {"oneOf": [
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "string"},
                ]}},
                description="Each bad field and the rules it breaks (`detail` for a body that is not JSON);"
                            " nothing was run or saved.",
            ),
            429: OpenApiResponse(response={"type": "object", "properties": {"detail": {"type": "string"}}},
                                 description="The user already has KAI_WHATIF_MAX_RUNNING_PER_USER what-ifs queued or "
                                             "running."),
        },
        examples=[OpenApiExample("Raise a quota", request_only=True,
                                 value={"changes": {"team-a": {"gpu_quota": 16}}, "window_hours": 24}),
                  OpenApiExample("Give a project 4 more H100s", request_only=True,
                                 value={"org": {"project": "vision", "entries": [
                                     {"pool": "h100", "gpu": {"deserved": 6, "limit": 10}}]}, "window_hours": 24})],
    )
    def create(self, request: Request) -> Response:
        """Check the inputs (a 400 names each bad one), then run the replay on a worker; poll `url` for the
        comparison of the workloads recorded in the window under today's tree and the changed one."""
        from kaiweb.whatif import runs as whatif_runs
        from kaiweb.whatif import tasks as whatif_tasks

        body = WhatIfRequestSerializer(data=request.data)
        if not body.is_valid():
            return Response(_flatten(body.errors), status=status.HTTP_400_BAD_REQUEST)
        data: dict[str, Any] = body.validated_data
        try:
            run = whatif_tasks.submit(
                request.user, changes=data.get("changes") or None, yaml=data.get("yaml") or None, org=data.get("org"),
                window_hours=data["window_hours"], shard=data["shard"], max_jobs=data["max_jobs"],
                max_horizon_hours=data["max_horizon_hours"], max_cycles=data["max_cycles"],
                consolidation=data["consolidation"])
        except whatif.WhatIfInputError as exc:
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        except whatif_runs.TooManyRuns as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_429_TOO_MANY_REQUESTS)
        run.refresh_from_db()
        return Response(_run_body(request, run), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The run's id.")],
        responses={200: WhatIfRunSerializer,
                   404: OpenApiResponse(description="No such run of yours.")},
    )
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        """One of your what-if runs (platform admins: anyone's): its state, and its result once done."""
        from kaiweb.accounts import roles
        from kaiweb.whatif.models import WhatIfRun

        runs = WhatIfRun.objects.all() if roles.is_platform_admin(request.user) else \
            WhatIfRun.objects.filter(user=request.user)
        run = runs.filter(pk=int(pk)).first() if pk and pk.isdigit() and len(pk) < 19 else None
        if run is None:
            return Response({"detail": "No such what-if run of yours."}, status=status.HTTP_404_NOT_FOUND)
        return Response(_run_body(request, run))


def _flatten(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested errors as {"a.b": [messages]}, the shape every what-if error has."""
    out: dict[str, list[str]] = {}
    if isinstance(errors, dict):
        for key, value in errors.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(errors, list) and all(not isinstance(e, (dict, list)) for e in errors):
        out[prefix or "non_field_errors"] = [str(e) for e in errors]
    elif isinstance(errors, list):
        for i, value in enumerate(errors):
            out.update(_flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix or "non_field_errors"] = [str(errors)]
    return out
