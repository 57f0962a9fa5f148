"""Renderers and parsers for the non-JSON parts of the API (YAML files, text listings)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer


class YAMLRenderer(BaseRenderer):
    """Sends a YAML document that the view already rendered as text."""

    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if isinstance(data, str):
            return data.encode(self.charset)
        import json

        import yaml

        # Errors carry DRF's ErrorDetail (a str subclass YAML cannot represent): go through JSON first.
        plain = json.loads(json.dumps(data, default=str))
        return yaml.safe_dump(plain, sort_keys=False).encode(self.charset)


class PlainTextRenderer(BaseRenderer):
    """Sends text the view already formatted (e.g. the kubectl-style listing)."""

    media_type = "text/plain"
    format = "text"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return (data if isinstance(data, str) else str(data)).encode(self.charset)


class YAMLTextParser(BaseParser):
    """Reads a YAML (or plain text) request body as {"yaml": text}; the view parses the YAML itself."""

    media_type = "application/yaml"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> dict[str, str]:
        from kaiweb.core.api.parsers import read_bounded

        raw = read_bounded(stream)
        try:
            return {"yaml": raw.decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise ParseError(f"the body must be UTF-8 text: {exc}") from exc


class XYAMLTextParser(YAMLTextParser):
    media_type = "application/x-yaml"


class TextYAMLParser(YAMLTextParser):
    media_type = "text/yaml"


class PlainTextParser(YAMLTextParser):
    media_type = "text/plain"
