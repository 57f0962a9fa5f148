from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "kaiweb.reports"
    verbose_name = "Usage reports"

    def ready(self) -> None:
        from kaiweb.reports import signals  # noqa: F401  (keeps each definition's beat entry in step)
