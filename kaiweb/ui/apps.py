from django.apps import AppConfig


class UiConfig(AppConfig):
    """The server-rendered UI's shared parts: page rendering, charts, formatting, access, template
    tags and the overview at /. It holds no models."""

    name = "kaiweb.ui"
    label = "ui"
