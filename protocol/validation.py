"""Validation of messages and ids from plain Python data (decoded JSON).

``parse_messages`` is the one door through which untrusted message bodies
enter the model: it returns frozen ``Message`` structs or raises
``InvalidMessage`` naming the path and the reason, for example
``messages[2].content[0].type: unknown content part "video"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from protocol.errors import InvalidId, InvalidMessage
from protocol.limits import (
    ID_PATTERN,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_JSON_DEPTH,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGES_PER_BATCH,
    ROLES,
    MessageLimits,
)
from protocol.types import Message

_ID_RE: Final = re.compile(ID_PATTERN)
_MESSAGE_FIELDS: Final = frozenset(
    {"role", "content", "name", "tool_call_id", "tool_calls", "metadata"}
)
_PART_FIELDS: Final[dict[str, dict[str, type]]] = {
    "text": {"text": str},
    "image_url": {"image_url": dict},
    "attachment": {"name": str, "mime": str, "content": str},
}
_json_encode = msgspec.json.Encoder().encode


class ValidatedBatch(tuple[Message, ...]):
    """Messages that came through ``parse_messages``, with the ``limits`` they
    were checked against: checked once, so the ``Transcript`` entity takes
    them as they are instead of checking each one again, as long as its own
    limits are no tighter (``within``). Only ``parse_messages`` makes these."""

    limits: MessageLimits

    def __new__(cls, messages: Iterable[Message], limits: MessageLimits) -> ValidatedBatch:
        batch = super().__new__(cls, messages)
        batch.limits = limits
        return batch

    def within(self, limits: MessageLimits) -> bool:
        """Whether the checks this batch passed imply those of ``limits``."""
        checked = self.limits
        if checked is limits:
            return True
        return (
            checked.max_messages_per_batch <= limits.max_messages_per_batch
            and checked.max_message_bytes <= limits.max_message_bytes
            and checked.max_depth <= limits.max_depth
        )


def validate_id(value: object, *, what: str = "transcriptId") -> str:
    """Return ``value`` if it is a valid transcript id, else raise ``InvalidId``."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise InvalidId(f"{what}: must be 1..128 characters of [A-Za-z0-9._:-], got {value!r:.60}")
    return value


def validate_idempotency_key(value: object) -> str | None:
    """``None`` or a non-empty string of at most ``MAX_IDEMPOTENCY_KEY_LENGTH``."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidMessage(
            "idempotencyKey", f"must be a string of 1..{MAX_IDEMPOTENCY_KEY_LENGTH} characters"
        )
    return value


def parse_messages(
    data: object,
    *,
    path: str = "messages",
    max_messages: int = MAX_MESSAGES_PER_BATCH,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> ValidatedBatch:
    """Validate a list of message objects and return them as ``Message`` structs.

    The whole list is checked before anything is returned, so a caller that
    gets a result may accept the batch as a whole. Raises ``InvalidMessage``.
    A message nested deeper than ``max_depth`` is refused before anything
    recurses into it.
    """
    if not isinstance(data, list | tuple):
        raise InvalidMessage(path, "expected a list of messages")
    if len(data) > max_messages:
        raise InvalidMessage(path, f"too many messages: {len(data)} > {max_messages}")
    for i, item in enumerate(data):
        _check_message_depth(item, max_depth, f"{path}[{i}]")
    try:
        messages = msgspec.convert(data, tuple[Message, ...])
    except msgspec.ValidationError as exc:
        # The fast path failed: walk the data to say exactly where and why.
        for i, item in enumerate(data):
            _check_message(item, f"{path}[{i}]")
        raise InvalidMessage(path, str(exc).replace("$", path, 1)) from None
    for i, message in enumerate(messages):
        size = len(_json_encode(message))
        if size > max_message_bytes:
            raise InvalidMessage(
                f"{path}[{i}]",
                f"message is {size} bytes, more than the limit of {max_message_bytes}",
            )
    return ValidatedBatch(messages, MessageLimits(max_messages, max_message_bytes, max_depth))


def parse_message(
    data: object,
    *,
    path: str = "message",
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> Message:
    """Validate one message object (see ``parse_messages``)."""
    _check_message_depth(data, max_depth, path)
    try:
        message = msgspec.convert(data, Message)
    except msgspec.ValidationError as exc:
        _check_message(data, path)
        raise InvalidMessage(path, str(exc).replace("$", path, 1)) from None
    size = len(_json_encode(message))
    if size > max_message_bytes:
        raise InvalidMessage(
            path, f"message is {size} bytes, more than the limit of {max_message_bytes}"
        )
    return message


def check_depth(value: object, limit: int, path: str, *, level: int = 1) -> None:
    """Refuse ``value`` (decoded JSON) if objects and lists nest deeper than
    ``limit`` (``value`` itself is at ``level``, 1 unless it sits inside
    another object). Iterative: it never recurses, so it is safe on any input
    a decoder produced."""
    stack: list[tuple[object, int]] = [(value, level)]
    while stack:
        node, depth = stack.pop()
        children: Iterable[object]
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            raise InvalidMessage(path, f"nested more than {limit} levels deep")
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )


#: The fields of a message that may hold data of any shape (and so any depth);
#: the others have a fixed shape that conversion checks before recursing.
_FREE_FIELDS: Final = ("content", "metadata", "tool_calls")


def _check_message_depth(item: object, limit: int, path: str) -> None:
    """``check_depth`` of one message, walking only the fields that can nest
    (the hot path: a plain text message is not walked at all)."""
    if not isinstance(item, dict):
        return  # not a message: conversion refuses it without recursing
    for key in _FREE_FIELDS:
        value = item.get(key)
        if isinstance(value, dict | list | tuple):
            check_depth(value, limit, f"{path}.{key}", level=2)


def _check_message(item: object, path: str) -> None:
    if not isinstance(item, dict):
        raise InvalidMessage(path, f"expected an object, got {_kind(item)}")
    for key in item:
        if key not in _MESSAGE_FIELDS:
            raise InvalidMessage(f"{path}.{key}", "unknown field")
    if "role" not in item:
        raise InvalidMessage(f"{path}.role", "missing")
    role = item["role"]
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidMessage(
            f"{path}.role", f"unknown role {_show(role)} (one of {', '.join(ROLES)})"
        )
    if "content" not in item:
        raise InvalidMessage(f"{path}.content", "missing")
    content = item["content"]
    if isinstance(content, list | tuple):
        for j, part in enumerate(content):
            _check_part(part, f"{path}.content[{j}]")
    elif not isinstance(content, str):
        raise InvalidMessage(
            f"{path}.content", f"expected a string or a list of content parts, got {_kind(content)}"
        )
    for key in ("name", "tool_call_id"):
        if key in item and item[key] is not None and not isinstance(item[key], str):
            raise InvalidMessage(f"{path}.{key}", f"expected a string, got {_kind(item[key])}")
    if item.get("metadata") is not None and not isinstance(item["metadata"], dict):
        raise InvalidMessage(
            f"{path}.metadata", f"expected an object, got {_kind(item['metadata'])}"
        )
    calls = item.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise InvalidMessage(f"{path}.tool_calls", f"expected a list, got {_kind(calls)}")
        for j, call in enumerate(calls):
            if not isinstance(call, dict):
                raise InvalidMessage(
                    f"{path}.tool_calls[{j}]", f"expected an object, got {_kind(call)}"
                )


def _check_part(part: object, path: str) -> None:
    if not isinstance(part, dict):
        raise InvalidMessage(path, f"expected a content part object, got {_kind(part)}")
    kind = part.get("type")
    if kind is None:
        raise InvalidMessage(f"{path}.type", "missing")
    if not isinstance(kind, str):
        raise InvalidMessage(f"{path}.type", f"expected a string, got {_kind(kind)}")
    fields = _PART_FIELDS.get(kind)
    if fields is None:
        raise InvalidMessage(f"{path}.type", f"unknown content part {_show(kind)}")
    for key in part:
        if key != "type" and key not in fields:
            raise InvalidMessage(f"{path}.{key}", f"unknown field of a {kind!r} part")
    for key, expected in fields.items():
        if key not in part:
            raise InvalidMessage(f"{path}.{key}", "missing")
        if not isinstance(part[key], expected):
            want = "a string" if expected is str else "an object"
            raise InvalidMessage(f"{path}.{key}", f"expected {want}, got {_kind(part[key])}")
    if kind == "image_url":
        image = part["image_url"]
        if not isinstance(image.get("url"), str):
            raise InvalidMessage(f"{path}.image_url.url", "expected a string")
        if image.get("detail") is not None and not isinstance(image["detail"], str):
            raise InvalidMessage(
                f"{path}.image_url.detail", f"expected a string, got {_kind(image['detail'])}"
            )
        for key in image:
            if key not in ("url", "detail"):
                raise InvalidMessage(f"{path}.image_url.{key}", "unknown field")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Sequence):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _show(value: object) -> str:
    if isinstance(value, str):
        return '"' + value[:60].replace('"', '\\"') + '"'
    return _kind(value)
