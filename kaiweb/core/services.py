"""Helpers shared by the services of every app: the result of a change, error shaping."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from django.core.exceptions import ValidationError

T = TypeVar("T")


@dataclass(slots=True)
class Change(Generic[T]):
    """What a write service returns: the saved object and the warnings the user should see."""

    obj: T
    warnings: list[str] = field(default_factory=list)


CONFLICT = "conflict"


def already_exists(field: str, message: str) -> ValidationError:
    """The error for a name that is taken (also when two writes race for it): the API answers 409."""
    return ValidationError({field: ValidationError(message, code=CONFLICT)})


def is_conflict(exc: ValidationError) -> bool:
    errors = exc.error_dict.values() if hasattr(exc, "error_dict") else [exc.error_list]
    return any(e.code == CONFLICT for group in errors for e in group)


def error_dict(exc: ValidationError) -> dict[str, list[str]]:
    """A ValidationError as {field: [messages]}; errors not tied to a field go under "non_field_errors"."""
    if hasattr(exc, "error_dict"):
        return {
            ("non_field_errors" if key == "__all__" else key): [str(m) for e in errors for m in e.messages]
            for key, errors in exc.error_dict.items()
        }
    return {"non_field_errors": [str(m) for m in exc.messages]}


def reject_unknown_fields(data: dict[str, object], allowed: frozenset[str] | set[str]) -> None:
    """Raise a ValidationError naming every key of `data` that is not an editable field."""
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValidationError({k: f"is not a field that can be set (allowed: {', '.join(sorted(allowed))})" for k in unknown})
