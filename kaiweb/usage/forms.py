"""The usage report's parameters: window, resource, grouping, optional queue, pool, department, project and
GPU type."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from kaiweb.queues.models import Queue
from kaiweb.reports import dimensions

PRESETS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30), "90d": timedelta(days=90)}
MAX_WINDOW = timedelta(days=400)


class UsageReportForm(forms.Form):
    """A window given by a preset or by start/end dates (in the user's time zone, end inclusive)."""

    window = forms.ChoiceField(
        choices=[("24h", "Last 24 hours"), ("7d", "Last 7 days"), ("30d", "Last 30 days"), ("90d", "Last 90 days"),
                 ("custom", "From … to …")],
        initial="7d", required=False)
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="From")
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="To")
    resource = forms.ChoiceField(choices=[("gpu", "GPU-hours"), ("cpu", "CPU core-hours"), ("memory", "Memory GB-hours")],
                                 initial="gpu", required=False)
    group = forms.ChoiceField(choices=[("queue", "per leaf queue"), ("department", "per department"),
                                       ("project", "per project"), ("pool", "per node pool"),
                                       ("gpu_type", "per GPU type"), ("namespace", "per namespace"),
                                       ("user", "per submitting user")],
                              initial="queue", required=False, label="Group")
    step = forms.ChoiceField(choices=[("auto", "auto (hour, or day past 8 days)"), ("hour", "per hour"),
                                      ("day", "per day"), ("week", "per week")], initial="auto", required=False,
                             label="Per")
    queue = forms.ModelChoiceField(queryset=Queue.objects.order_by("name"), required=False, to_field_name="name",
                                   empty_label="all queues", label="Queue (and its subtree)")
    pool = forms.ChoiceField(required=False, label="Node pool")
    department = forms.ChoiceField(required=False, label="Department")
    project = forms.ChoiceField(required=False, label="Project")
    gpu_type = forms.CharField(required=False, max_length=253, label="GPU type",
                               help_text="The nodes' GPU product, e.g. NVIDIA-H100-80GB-HBM3; \"unknown\" for none.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The queues and each one's pool, department and project, read once for the choices and the report.
        self.queue_rows = list(Queue.objects.only("id", "name", "parent_id", "labels"))
        self.places = dimensions.places(self.queue_rows)
        for name, empty in (("pool", "all pools"), ("department", "all departments"), ("project", "all projects")):
            values = sorted({dimensions.place_of(p, name) for p in self.places.values()})
            self.fields[name].choices = [("", empty), *((v, v) for v in values)]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["places"], data["queue_rows"] = self.places, self.queue_rows
        if data.get("gpu_type") and data.get("group") in ("namespace", "user"):
            self.add_error("gpu_type", f"cannot be combined with the grouping per {data['group']}: usage is split by "
                                       "namespace or user, and by GPU type, but not by both")
        window = data.get("window") or "7d"
        data["window"] = window
        data["resource"] = data.get("resource") or "gpu"
        data["group"] = data.get("group") or "queue"
        data["step"] = data.get("step") or "auto"
        now = timezone.now()
        if window == "custom":
            start, end = data.get("start"), data.get("end")
            if not start:
                self.add_error("start", "is required for a custom window")
            if not end:
                self.add_error("end", "is required for a custom window")
            if start and end:
                if end < start:
                    self.add_error("end", f"must not be before the start ({start:%Y-%m-%d})")
                else:
                    zone = timezone.get_current_timezone()
                    since = datetime.combine(start, time.min, tzinfo=zone).astimezone(UTC)
                    until = datetime.combine(end + timedelta(days=1), time.min, tzinfo=zone).astimezone(UTC)
                    if until - since > MAX_WINDOW:
                        self.add_error("end", f"the window may span at most {MAX_WINDOW.days} days")
                    data["since"], data["until"] = since, until
        else:
            data["since"], data["until"] = now - PRESETS[window], now
        return data
