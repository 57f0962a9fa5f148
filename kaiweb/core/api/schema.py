"""OpenAPI post-processing: document the error answers every operation can give.

DRF answers 400 (a rule or a filter value broken: `{field: [messages]}`), 401/403 (not signed in,
not allowed: `{detail}`) and 404 for unknown objects; drf-spectacular only documents successes,
so clients (and the contract test) would see those answers as undocumented.
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA = {
    "type": "object",
    "description": "`{field: [messages]}` for invalid input, `{detail: message}` otherwise.",
    "additionalProperties": True,
}
ERRORS = {
    "400": "Invalid input: the keys name the fields, the messages state the rule broken.",
    "401": "Not signed in.",
    "403": "Signed in but not allowed (role).",
    "404": "No such object (or an unknown `format`).",
}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Add the error responses to every operation that does not already document them."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Error", ERROR_SCHEMA)
    ref = {"$ref": "#/components/schemas/Error"}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for code, description in ERRORS.items():
                operation["responses"].setdefault(
                    code, {"description": description, "content": {"application/json": {"schema": ref}}}
                )
    return result
