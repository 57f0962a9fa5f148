"""Request body parsers with bounds: a maximum size, a maximum nesting depth, finite numbers only.

The body size limit is Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (``KAI_MAX_REQUEST_BYTES`` in the
environment); Django applies it to forms, these parsers to every API body. The depth limit and the
number rule are those of `kaiweb.core.inputs`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from kaiweb.core import inputs


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


def max_body_bytes() -> int | None:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def read_bounded(stream: Any) -> bytes:
    """The whole body, or PayloadTooLarge as soon as it is longer than the limit (never read past it)."""
    if stream is None:
        return b""
    limit = max_body_bytes()
    if limit is None:
        return stream.read()
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes (KAI_MAX_REQUEST_BYTES)")
    return raw


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with the size, depth and finite-number bounds."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = read_bounded(stream)
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding} text") from exc
        try:
            return inputs.load_json(text)
        except inputs.InputRejected as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
