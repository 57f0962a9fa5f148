"""The API's exception handler: DRF's, plus a 413 naming the limit for an oversized body."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from kaiweb.core.api.parsers import PayloadTooLarge, max_body_bytes


def exception_handler(exc: Exception, context: Any) -> Response | None:
    """Django refuses a body above DATA_UPLOAD_MAX_MEMORY_SIZE with a bare 400 page; say why, as a 413."""
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(
            f"the request body is larger than the limit of {max_body_bytes()} bytes (KAI_MAX_REQUEST_BYTES)"
        )
    return drf_exception_handler(exc, context)
