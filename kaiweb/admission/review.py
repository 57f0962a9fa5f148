"""AdmissionReview (``admission.k8s.io/v1``) in and out, with bounds.

`read_review` turns a request body into the review's ``request``, or raises `BadReview` with the HTTP
status to answer (400 for a body that is not an AdmissionReview, 413 past the size limit, 415 for a
body that is not JSON). `allow`, `deny` and `patched` build the response the API server reads.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class BadReview(ValueError):
    """A request the webhook cannot answer with a verdict; ``status`` is the HTTP status to send."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def read_review(body: bytes, *, content_type: str, limit: int) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview body (its uid, kind, operation and object checked)."""
    if len(body) > limit:
        raise BadReview(413, f"the AdmissionReview is larger than {limit} bytes (KAI_ADMISSION_MAX_BYTES)")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise BadReview(415, f"an AdmissionReview is sent as application/json, not {content_type or 'no type'!r}")
    try:
        review = json.loads(body)
    except RecursionError:
        raise BadReview(400, "the AdmissionReview nests too deeply") from None
    except ValueError as exc:
        raise BadReview(400, f"the body is not JSON: {exc}") from None
    if not isinstance(review, dict) or review.get("kind") != KIND:
        raise BadReview(400, f"the body is not an {KIND} (kind {KIND!r} expected)")
    if review.get("apiVersion") != API_VERSION:
        raise BadReview(400, f"apiVersion {review.get('apiVersion')!r} is not served: only {API_VERSION}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview(400, "request: is required and must be an object")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview(400, "request.uid: is required and must be a string")
    if not isinstance(request.get("kind"), dict):
        raise BadReview(400, "request.kind: is required and must be an object")
    if not isinstance(request.get("operation"), str):
        raise BadReview(400, "request.operation: is required and must be a string")
    for part in ("object", "oldObject"):
        if request.get(part) is not None and not isinstance(request[part], dict):
            raise BadReview(400, f"request.{part}: must be an object")
    return request


def _response(request: Mapping[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": request["uid"], **body}}


def allow(request: Mapping[str, Any], warnings: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"allowed": True}
    if warnings:
        body["warnings"] = warnings[:10]
    return _response(request, body)


def deny(request: Mapping[str, Any], message: str, *, field: str = "", rule: str = "") -> dict[str, Any]:
    """A refusal the user reads as ``admission webhook "…" denied the request: <message>``."""
    status: dict[str, Any] = {"code": 403, "reason": "Forbidden", "message": message}
    if field:
        status["details"] = {"causes": [{"field": field, "message": rule, "reason": "FieldValueInvalid"}]}
    return _response(request, {"allowed": False, "status": status})


def patched(request: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    if not ops:
        return allow(request)
    patch = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
    return _response(request, {"allowed": True, "patchType": "JSONPatch", "patch": patch})
