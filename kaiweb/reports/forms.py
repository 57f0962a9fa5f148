"""The report definition form: recipients and prices as plain text, formats as checkboxes."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from kaiweb.queues.models import Queue
from kaiweb.reports.choices import ReportFormat
from kaiweb.reports.models import ReportDefinition


class ReportDefinitionForm(forms.ModelForm):
    """Every error is shown under the field it is about (the model's `clean` holds the rules)."""

    recipients = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="E-mail addresses, separated by commas or new lines.")
    formats = forms.MultipleChoiceField(choices=ReportFormat.choices, widget=forms.CheckboxSelectMultiple,
                                        required=False)
    prices = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Price per GPU-hour",
        help_text="One GPU model per line as MODEL = PRICE (e.g. NVIDIA-A100-SXM4-80GB = 2.5); "
                  "* = PRICE prices every other model. Empty: no showback cost.")
    queue = forms.ModelChoiceField(queryset=Queue.objects.order_by("name"), required=False, to_field_name="name",
                                   empty_label="—", label="Department or queue")

    class Meta:
        model = ReportDefinition
        fields = ("name", "period", "scope", "queue", "recipients", "formats", "prices", "currency", "enabled")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["recipients"] = ", ".join(self.instance.recipients or [])
            self.initial["prices"] = "\n".join(f"{k} = {v:g}" for k, v in (self.instance.prices or {}).items())
            self.initial["queue"] = self.instance.queue.name if self.instance.queue else None
        if not self.instance.pk and not self.is_bound:
            self.initial.setdefault("formats", ["csv", "pdf"])

    def clean_recipients(self) -> list[str]:
        raw = self.cleaned_data.get("recipients") or ""
        return [part.strip() for part in re.split(r"[,;\s]+", raw) if part.strip()]

    def clean_formats(self) -> list[str]:
        return sorted(self.cleaned_data.get("formats") or [])

    def clean_prices(self) -> dict[str, float]:
        prices: dict[str, float] = {}
        for number, line in enumerate((self.cleaned_data.get("prices") or "").splitlines(), start=1):
            if not line.strip():
                continue
            model, sep, value = line.partition("=")
            if not sep or not model.strip():
                raise forms.ValidationError(f"line {number}: write MODEL = PRICE, not {line.strip()!r}")
            try:
                price = float(value.strip())
            except ValueError:
                raise forms.ValidationError(f"line {number}: {value.strip()!r} is not a number") from None
            if price < 0:
                raise forms.ValidationError(f"line {number}: the price must be >= 0")
            prices[model.strip()] = price
        return prices
