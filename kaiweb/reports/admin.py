from __future__ import annotations

from django.contrib import admin

from kaiweb.reports.models import ReportDefinition, ReportRun


@admin.register(ReportDefinition)
class ReportDefinitionAdmin(admin.ModelAdmin):
    list_display = ("name", "period", "scope", "queue", "enabled", "periodic_task")
    list_filter = ("period", "scope", "enabled")
    search_fields = ("name",)
    readonly_fields = ("periodic_task",)


@admin.register(ReportRun)
class ReportRunAdmin(admin.ModelAdmin):
    list_display = ("definition", "period_start", "period_end", "status", "trigger", "started_at")
    list_filter = ("status", "trigger")
    readonly_fields = ("inputs", "lines", "emailed_to", "error")
    exclude = ("pdf_content",)
