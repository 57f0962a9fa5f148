"""Bounded reading of untrusted input: YAML and JSON with a depth limit, no YAML aliases, finite numbers.

Every request that carries a document (a Queue CRD file, a what-if body, any JSON body) is read
through these helpers, so the work a request can cause is proportional to its size:

* YAML aliases (``*name``) are refused: an alias bomb of a few hundred bytes expands to
  gigabytes, and a Queue file never needs one.
* Nesting is limited to ``KAI_MAX_INPUT_DEPTH`` levels (YAML and JSON), checked while the
  document is built, so a 100,000-level document is refused instead of exhausting the stack.
* Numbers must be finite: ``.nan``, ``.inf`` and overflowing literals are refused by name.

Errors are ``InputRejected`` with a message stating the rule; callers add the field.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from django.conf import settings

from scheduler_core.units import shown  # how a value reads in an error: one rule, the engine's

DEFAULT_MAX_DEPTH = 32


class InputRejected(ValueError):
    """A document breaks a bound (alias, depth, number, size); the message states the rule."""


def max_depth() -> int:
    return int(getattr(settings, "KAI_MAX_INPUT_DEPTH", DEFAULT_MAX_DEPTH))


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not a number (bools, NaN, ±inf, overflow)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


# ------------------------------------------------------------------------------------------ YAML


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases and with a nesting limit (checked while composing)."""

    depth_limit = DEFAULT_MAX_DEPTH

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            mark = event.start_mark
            raise InputRejected(
                f"YAML aliases are not accepted (*{event.anchor} at line {mark.line + 1}, column {mark.column + 1}): "
                "write each value out"
            )
        self._depth += 1
        if self._depth > self.depth_limit:
            mark = self.peek_event().start_mark
            raise InputRejected(
                f"nesting deeper than {self.depth_limit} levels (at line {mark.line + 1}) is not accepted"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _reject_non_finite(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    value = loader.construct_yaml_float(node)
    if not math.isfinite(value):
        mark = node.start_mark
        raise InputRejected(
            f"{node.value!r} at line {mark.line + 1} is not a finite number (NaN and infinities are not accepted)"
        )
    return value


def _bounded_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:  # more digits than Python converts
        mark = node.start_mark
        raise InputRejected(f"the integer at line {mark.line + 1} has too many digits") from None


_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _reject_non_finite)
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


class _BoundedFloatsLoader(_BoundedLoader):
    """The bounded loader that keeps NaN and infinities, for a caller that names the field they are in."""


_BoundedFloatsLoader.add_constructor("tag:yaml.org,2002:float", yaml.SafeLoader.construct_yaml_float)


def load_yaml_documents(text: str, *, keep_non_finite: bool = False) -> list[Any]:
    """Every document of ``text`` (YAML 1.1, safe types only), with the bounds of the module docstring.

    With ``keep_non_finite`` NaN and infinities are returned as floats, for a caller that checks
    each number itself and names its field. Raises InputRejected for a broken bound and
    yaml.YAMLError for text that is not YAML.
    """
    base = _BoundedFloatsLoader if keep_non_finite else _BoundedLoader
    loader_class = type("Loader", (base,), {"depth_limit": max_depth()})
    loader = loader_class(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


# ------------------------------------------------------------------------------------------ JSON


def _reject_constant(name: str) -> Any:
    raise InputRejected(f"{name} is not a finite number; JSON numbers must be finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputRejected(f"{shown(text)} is out of range; JSON numbers must be finite")
    return value


def depth_of(value: Any, limit: int) -> int:
    """Nesting depth of a parsed document (a scalar is 0), counting no further than ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def load_json(text: str | bytes) -> Any:
    """A JSON document with finite numbers and at most KAI_MAX_INPUT_DEPTH levels of nesting.

    Raises InputRejected for a broken bound and ValueError (json.JSONDecodeError) for text that is not JSON.
    """
    limit = max_depth()
    try:
        data = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise InputRejected(f"nesting deeper than {limit} levels is not accepted") from None
    if depth_of(data, limit) > limit:
        raise InputRejected(f"nesting deeper than {limit} levels is not accepted")
    return data
