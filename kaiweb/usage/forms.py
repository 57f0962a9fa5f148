"""The usage report's parameters: window, resource, grouping, optional queue."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from kaiweb.queues.models import Queue

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
    group = forms.ChoiceField(choices=[("queue", "per leaf queue"), ("department", "per department (top level)"),
                                       ("namespace", "per namespace"), ("user", "per submitting user")],
                              initial="queue", required=False, label="Group")
    step = forms.ChoiceField(choices=[("auto", "auto (hour, or day past 8 days)"), ("hour", "per hour"),
                                      ("day", "per day"), ("week", "per week")], initial="auto", required=False,
                             label="Per")
    queue = forms.ModelChoiceField(queryset=Queue.objects.order_by("name"), required=False, to_field_name="name",
                                   empty_label="all queues", label="Queue (and its subtree)")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
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
