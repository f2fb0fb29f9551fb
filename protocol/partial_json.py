"""Partial JSON as the AI SDK reads it: a tool call's input while it streams.

``fix_json`` is the SDK's ``fixJson`` (the longest valid prefix of partial
JSON text, closed so that it parses) and ``parse_partial_json`` its
``parsePartialJson(text).value``, ported so that ``protocol.ui_stream``
shows a tool input being written exactly as ``readUIMessageStream`` does
(held to the SDK by tests/server/web/test_ui_stream_sdk.py).

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = ["UNDEF", "fix_json", "parse_partial_json"]


class _Undefined:
    """JavaScript's ``undefined``: a key set to it is a key that is absent."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "undefined"

    def __bool__(self) -> bool:
        return False


UNDEF: Final = _Undefined()


_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def fix_json(text: str) -> str:
    """The SDK's ``fixJson``: the longest valid prefix of partial JSON text,
    closed (strings, arrays, objects, literals) so that it parses."""
    stack = ["ROOT"]
    last_valid = -1
    literal_start = 0
    unicode_digits = 0

    def value_start(char: str, i: int, swap: str) -> None:
        nonlocal last_valid, literal_start
        if char == '"':
            last_valid = i
            stack[-1] = swap
            stack.append("INSIDE_STRING")
        elif char in "ftn":
            last_valid = i
            literal_start = i
            stack[-1] = swap
            stack.append("INSIDE_LITERAL")
        elif char == "-":
            stack[-1] = swap
            stack.append("INSIDE_NUMBER")
        elif char in _DIGITS:
            last_valid = i
            stack[-1] = swap
            stack.append("INSIDE_NUMBER")
        elif char == "{":
            last_valid = i
            stack[-1] = swap
            stack.append("INSIDE_OBJECT_START")
        elif char == "[":
            last_valid = i
            stack[-1] = swap
            stack.append("INSIDE_ARRAY_START")

    def after_object_value(char: str, i: int) -> None:
        nonlocal last_valid
        if char == ",":
            stack[-1] = "INSIDE_OBJECT_AFTER_COMMA"
        elif char == "}":
            last_valid = i
            stack.pop()

    def after_array_value(char: str, i: int) -> None:
        nonlocal last_valid
        if char == ",":
            stack[-1] = "INSIDE_ARRAY_AFTER_COMMA"
        elif char == "]":
            last_valid = i
            stack.pop()

    for i, char in enumerate(text):
        top = stack[-1] if stack else None
        if top == "ROOT":
            value_start(char, i, "FINISH")
        elif top == "INSIDE_OBJECT_START":
            if char == '"':
                stack[-1] = "INSIDE_OBJECT_KEY"
            elif char == "}":
                last_valid = i
                stack.pop()
        elif top == "INSIDE_OBJECT_AFTER_COMMA":
            if char == '"':
                stack[-1] = "INSIDE_OBJECT_KEY"
        elif top == "INSIDE_OBJECT_KEY":
            if char == '"':
                stack[-1] = "INSIDE_OBJECT_AFTER_KEY"
        elif top == "INSIDE_OBJECT_AFTER_KEY":
            if char == ":":
                stack[-1] = "INSIDE_OBJECT_BEFORE_VALUE"
        elif top == "INSIDE_OBJECT_BEFORE_VALUE":
            value_start(char, i, "INSIDE_OBJECT_AFTER_VALUE")
        elif top == "INSIDE_OBJECT_AFTER_VALUE":
            after_object_value(char, i)
        elif top == "INSIDE_STRING":
            if char == '"':
                stack.pop()
                last_valid = i
            elif char == "\\":
                stack.append("INSIDE_STRING_ESCAPE")
            else:
                last_valid = i
        elif top == "INSIDE_ARRAY_START":
            if char == "]":
                last_valid = i
                stack.pop()
            else:
                value_start(char, i, "INSIDE_ARRAY_AFTER_VALUE")
        elif top == "INSIDE_ARRAY_AFTER_VALUE":
            if char == ",":
                stack[-1] = "INSIDE_ARRAY_AFTER_COMMA"
            elif char == "]":
                last_valid = i
                stack.pop()
            else:
                last_valid = i
        elif top == "INSIDE_ARRAY_AFTER_COMMA":
            value_start(char, i, "INSIDE_ARRAY_AFTER_VALUE")
        elif top == "INSIDE_STRING_ESCAPE":
            stack.pop()
            if char == "u":
                unicode_digits = 0
                stack.append("INSIDE_STRING_UNICODE_ESCAPE")
            else:
                last_valid = i
        elif top == "INSIDE_STRING_UNICODE_ESCAPE":
            if char in _HEX:
                unicode_digits += 1
                if unicode_digits == 4:
                    stack.pop()
                    last_valid = i
        elif top == "INSIDE_NUMBER":
            if char in _DIGITS:
                last_valid = i
            elif char in "eE-.":
                pass
            elif char == ",":
                stack.pop()
                if stack and stack[-1] == "INSIDE_ARRAY_AFTER_VALUE":
                    after_array_value(char, i)
                if stack and stack[-1] == "INSIDE_OBJECT_AFTER_VALUE":
                    after_object_value(char, i)
            elif char == "}":
                stack.pop()
                if stack and stack[-1] == "INSIDE_OBJECT_AFTER_VALUE":
                    after_object_value(char, i)
            elif char == "]":
                stack.pop()
                if stack and stack[-1] == "INSIDE_ARRAY_AFTER_VALUE":
                    after_array_value(char, i)
            else:
                stack.pop()
        elif top == "INSIDE_LITERAL":
            partial = text[literal_start : i + 1]
            if not any(word.startswith(partial) for word in ("false", "true", "null")):
                stack.pop()
                if stack and stack[-1] == "INSIDE_OBJECT_AFTER_VALUE":
                    after_object_value(char, i)
                elif stack and stack[-1] == "INSIDE_ARRAY_AFTER_VALUE":
                    after_array_value(char, i)
            else:
                last_valid = i

    result = text[: last_valid + 1]
    for state in reversed(stack):
        if state == "INSIDE_STRING":
            result += '"'
        elif state in (
            "INSIDE_OBJECT_KEY",
            "INSIDE_OBJECT_AFTER_KEY",
            "INSIDE_OBJECT_AFTER_COMMA",
            "INSIDE_OBJECT_START",
            "INSIDE_OBJECT_BEFORE_VALUE",
            "INSIDE_OBJECT_AFTER_VALUE",
        ):
            result += "}"
        elif state in (
            "INSIDE_ARRAY_START",
            "INSIDE_ARRAY_AFTER_COMMA",
            "INSIDE_ARRAY_AFTER_VALUE",
        ):
            result += "]"
        elif state == "INSIDE_LITERAL":
            partial = text[literal_start:]
            for word in ("true", "false", "null"):
                if word.startswith(partial):
                    result += word[len(partial) :]
                    break
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _strict_loads(text: str) -> Any:
    value = json.loads(text, parse_constant=_no_constant)
    return value


def _js_number(value: Any) -> Any:
    """A parsed number as JavaScript holds it (every number a double)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, dict):
            return {k: _js_number(v) for k, v in value.items()}
        if isinstance(value, list):
            return [_js_number(v) for v in value]
        return value
    as_float = float(value)
    if math.isinf(as_float):
        return None
    if as_float.is_integer() and abs(as_float) < 2**53:
        return int(as_float)
    return as_float


def parse_partial_json(text: str) -> Any:
    """The SDK's ``parsePartialJson(text).value``: the text parsed, else its
    ``fix_json`` repair parsed, else ``undefined``."""
    for candidate in (text, fix_json(text)):
        try:
            return _js_number(_strict_loads(candidate))
        except (ValueError, RecursionError):
            continue
    return UNDEF
