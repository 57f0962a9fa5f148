"""OpenAPI post-processing: document the error answers every operation can give.

DRF answers 400 (a rule or a filter value broken: `{field: [messages]}`), 401/403 (not signed in,
not allowed: `{detail}`), 404 for unknown objects and 409 when a write's name is taken; drf-spectacular only documents successes,
so clients (and the contract test) would see those answers as undocumented.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema

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
CONFLICT = "The name is taken (also when two writes race for it): `{field: [message]}`."


# Integer bounds Django derives from the database backend (SQLite: 64 bits for every integer column;
# Postgres: 16/32/64 by column type). They say nothing about the API, and left in they would make the
# schema depend on the database it was generated with. The API still enforces the real ones.
_DB_INT_MAX = {2**15 - 1, 2**31 - 1, 2**63 - 1}
_DB_INT_MIN = {-(2**15), -(2**31), -(2**63)}


def _drop_database_bounds(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "integer":
            if node.get("maximum") in _DB_INT_MAX:
                if node.pop("maximum") == 2**63 - 1 and node.get("format") == "int64":
                    node.pop("format")
            if node.get("minimum") in _DB_INT_MIN:
                node.pop("minimum")
        for value in node.values():
            _drop_database_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _drop_database_bounds(value)


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Add the error responses to every operation that does not already document them (and drop the
    integer bounds that come from the database backend, not from the API)."""
    _drop_database_bounds(result.get("components", {}))
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Error", ERROR_SCHEMA)
    ref = {"$ref": "#/components/schemas/Error"}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            errors = dict(ERRORS)
            if operation.get("operationId", "").endswith(("_create", "_update", "_partial_update")):
                errors["409"] = CONFLICT
            for code, description in errors.items():
                operation["responses"].setdefault(
                    code, {"description": description, "content": {"application/json": {"schema": ref}}}
                )
    return result


class SingleObjectSchema(AutoSchema):
    """Schema of a viewset whose `list` answers one object (the caller, a settings row), not a list."""

    def _is_list_view(self, serializer: Any = None) -> bool:
        return False
