from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "kaiweb.core"
    label = "core"

    def ready(self) -> None:
        from kaiweb.core import checks  # noqa: F401 - registers the deploy checks
