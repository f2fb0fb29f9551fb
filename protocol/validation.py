"""Validation of messages and ids from plain Python data (decoded JSON).

``parse_messages`` is the one door through which untrusted message bodies
enter the model: it returns frozen ``Message`` structs or raises
``InvalidMessage`` naming the path and the reason, for example
``messages[2].content[0].type: unknown content part "video"``.

A message is accepted only if every wire format and every store carries it
exactly (``check_value``): JSON and MessagePack alike, as msgspec encodes and
decodes them, so what one subscriber, store or export gets another gets too.
That refuses, each with its path: integers outside ``MIN_INT .. MAX_INT``
(MessagePack's 64 bits), floats that are not finite (NaN and the infinities,
which JSON writes as ``null``), object keys that are not strings, strings
holding a lone surrogate (not Unicode: neither encoding can write them), and
anything that is not a JSON value (bytes, dates, MessagePack extensions,
sets, other Python objects). ``-0.0`` and every finite float are accepted:
both encodings carry them exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

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
#: Fields and blocks the SDKs give that only ``format=`` takes (``protocol.sdk_in``):
#: a refusal of them says so.
_OPENAI_ONLY: Final = frozenset({"refusal", "annotations", "audio", "function_call"})
_OPENAI_HINT: Final = " (an OpenAI SDK message? append it with format=openai)"
_ANTHROPIC_ONLY: Final = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document"}
)
_ANTHROPIC_HINT: Final = " (an Anthropic SDK block? append it with format=anthropic)"

#: The integers every format carries: MessagePack holds -2**63 .. 2**64 - 1
#: (JSON holds any, but a value must reach every subscriber and store alike).
MIN_INT: Final = -(2**63)
MAX_INT: Final = 2**64 - 1
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Deep enough for any message: a Python-built message is walked with it
#: (decoded input is held to the configured ``max_depth`` first).
_ANY_DEPTH: Final = 1 << 16


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
        _check_free_fields(item, max_depth, path, i)
    try:
        messages = msgspec.convert(data, tuple[Message, ...])
    except msgspec.ValidationError as exc:
        # The fast path failed: walk the data to say exactly where and why.
        for i, item in enumerate(data):
            _check_message(item, f"{path}[{i}]")
        raise InvalidMessage(path, str(exc).replace("$", path, 1)) from None
    except UnicodeEncodeError as exc:  # a lone surrogate where a name was matched
        for i, item in enumerate(data):
            check_value(item, f"{path}[{i}]", limit=_ANY_DEPTH)
        raise InvalidMessage(path, f"cannot be read: {exc}") from None
    for i, message in enumerate(messages):
        size = _encoded_size(message, data[i], f"{path}[{i}]")
        if size > max_message_bytes:
            raise InvalidMessage(
                f"{path}[{i}]",
                f"message is {size} bytes, more than the limit of {max_message_bytes}",
            )
    return ValidatedBatch(messages, MessageLimits(max_messages, max_message_bytes, max_depth))


def accept_decoded(messages: Sequence[Message], limits: MessageLimits) -> ValidatedBatch | None:
    """Messages decoded straight into ``Message`` structs
    (``protocol.wire.decode_plain_append``), accepted as ``parse_messages``
    accepts them when they are of the shape it needs no walk for: string
    content, no tool calls, ``metadata`` absent or an object of plain scalars
    (``_plain_scalars``), each message within ``limits``. ``None`` for any
    other batch, valid or not: ``parse_messages`` of the plain data then
    decides and says why. It accepts nothing ``parse_messages`` refuses: the
    struct made the same conversion, and what that does not check (the
    depth and values of ``metadata``, the strings, the size) is checked here
    as there."""
    if len(messages) > limits.max_messages_per_batch or limits.max_depth < 2:
        return None
    for message in messages:
        if type(message.content) is not str or message.tool_calls is not None:
            return None
        metadata = message.metadata
        if metadata is not None and not _plain_scalars(metadata):
            return None
        try:  # a lone surrogate fails the encoding, as in ``_encoded_size``
            size = len(_json_encode(message))
        except (UnicodeEncodeError, OverflowError, TypeError, msgspec.EncodeError):
            return None
        if size > limits.max_message_bytes:
            return None
    return ValidatedBatch(messages, limits)


def parse_message(
    data: object,
    *,
    path: str = "message",
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> Message:
    """Validate one message object (see ``parse_messages``)."""
    _check_free_fields(data, max_depth, path, None)
    try:
        message = msgspec.convert(data, Message)
    except msgspec.ValidationError as exc:
        _check_message(data, path)
        raise InvalidMessage(path, str(exc).replace("$", path, 1)) from None
    except UnicodeEncodeError as exc:  # a lone surrogate where a name was matched
        check_value(data, path, limit=_ANY_DEPTH)
        raise InvalidMessage(path, f"cannot be read: {exc}") from None
    size = _encoded_size(message, data, path)
    if size > max_message_bytes:
        raise InvalidMessage(
            path, f"message is {size} bytes, more than the limit of {max_message_bytes}"
        )
    return message


#: The fields of a message that may hold data of any shape (and so any depth);
#: the others have a fixed shape that conversion checks before recursing.
_FREE_FIELDS: Final = ("content", "metadata", "tool_calls")


def _check_free_fields(item: object, limit: int, path: str, index: int | None) -> None:
    """``check_value`` of one message's fields that can nest (its depth and
    the values in them), walking only those (the hot path: a plain text
    message is not walked at all; its strings are checked by encoding it;
    an object of plain scalars, the usual ``metadata``, is looked at in one
    loop). ``path`` and ``index`` (the message's place in a list) name it."""
    if not isinstance(item, dict):
        return  # not a message: conversion refuses it without recursing
    for key in _FREE_FIELDS:
        value = item.get(key)
        if isinstance(value, dict | list | tuple):
            if limit >= 2 and type(value) is dict and _plain_scalars(value):
                continue  # what check_value would find at once (level 2)
            at = path if index is None else f"{path}[{index}]"
            check_value(value, f"{at}.{key}", limit=limit, level=2)


def _plain_scalars(value: Mapping[Any, Any]) -> bool:
    """Whether every key of ``value`` is an ASCII string and every value an
    ASCII string, an integer in range, a finite float, a bool or None: what
    ``check_value`` accepts without a walk (anything else, even if valid,
    says False and is walked)."""
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return False
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return False
        elif kind is int:
            if not MIN_INT <= item <= MAX_INT:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is not None and kind is not bool:
            return False
    return True


def check_message_values(message: Message, path: str = "message") -> None:
    """``check_value`` of a ``Message`` built in Python (not decoded): its
    ``metadata`` and ``tool_calls`` as they are, and its strings. Raises
    ``InvalidMessage`` with the path of the first value refused."""
    fields: dict[str, object] = {
        "role": message.role,
        "name": message.name,
        "tool_call_id": message.tool_call_id,
        "metadata": message.metadata,
        "tool_calls": message.tool_calls,
    }
    content = message.content
    if isinstance(content, str) or not isinstance(content, tuple | list):
        fields["content"] = content
    else:
        fields["content"] = [_part_fields(part) for part in content]
    for key, value in fields.items():
        if value is not None:
            check_value(value, f"{path}.{key}", limit=_ANY_DEPTH, level=2)


def _part_fields(part: object) -> object:
    """A content part's fields as a dict (a nested ``ImageUrl`` too), its
    values as they are; anything else as it is."""
    if not isinstance(part, msgspec.Struct):
        return part
    fields = msgspec.structs.asdict(part)
    return {key: _part_fields(value) for key, value in fields.items()}


def _encoded_size(message: Message, item: object, path: str) -> int:
    """The size of the message's compact JSON. A string no format can write
    (a lone surrogate) fails the encoding: then the message as it came
    (``item``) is walked to say where."""
    try:
        return len(_json_encode(message))
    except (UnicodeEncodeError, OverflowError, TypeError, msgspec.EncodeError) as exc:
        check_value(item, path, limit=_ANY_DEPTH)
        raise InvalidMessage(path, f"cannot be encoded: {exc}") from None


def check_value(value: object, path: str, *, limit: int = MAX_JSON_DEPTH, level: int = 1) -> None:
    """Refuse ``value`` unless it is a JSON value that JSON and MessagePack
    both carry exactly, with objects and lists nested no deeper than
    ``limit`` (``value`` itself is at ``level``, 1 unless it sits inside
    another object). ``InvalidMessage`` names the path of
    the first value refused below ``path``:

    - ``integer out of range`` (outside ``MIN_INT .. MAX_INT``);
    - ``not a finite number`` (NaN, infinity);
    - ``object key 1 is not a string``;
    - ``string holds a lone surrogate (U+D800..U+DFFF), which is not Unicode``;
    - ``not a JSON value (bytes)`` (anything but str, int, float, bool,
      None, dict and list or tuple);
    - ``nested more than N levels deep`` (at ``path`` itself).

    Iterative: it never recurses, so it is safe on any input a decoder
    produced."""
    # (node, its depth, its trail): a trail is (parent trail, key or index),
    # made into a path only for the error.
    # Exact types first (``type(x) is str``, the common case, is cheaper than
    # ``isinstance``), hence the values typed ``Any``.
    stack: list[tuple[Any, int, Any]] = [(value, level, None)]
    while stack:
        node, depth, trail = stack.pop()
        kind = type(node)
        if kind is str:
            if not node.isascii() and _SURROGATE.search(node):
                raise InvalidMessage(_path(path, trail), _SURROGATE_REASON)
        elif kind is int:
            if not MIN_INT <= node <= MAX_INT:
                raise InvalidMessage(_path(path, trail), "integer out of range")
        elif kind is float:
            if not math.isfinite(node):
                raise InvalidMessage(_path(path, trail), "not a finite number")
        elif node is None or kind is bool:
            pass
        elif isinstance(node, dict):
            if depth > limit:
                raise InvalidMessage(path, f"nested more than {limit} levels deep")
            for key, item in node.items():
                if not isinstance(key, str):
                    raise InvalidMessage(
                        _path(path, trail), f"object key {_brief(key)} is not a string"
                    )
                if not key.isascii() and _SURROGATE.search(key):
                    raise InvalidMessage(_path(path, trail), _KEY_SURROGATE_REASON)
                stack.append((item, depth + 1, (trail, key)))
        elif isinstance(node, list | tuple):
            if depth > limit:
                raise InvalidMessage(path, f"nested more than {limit} levels deep")
            stack.extend((item, depth + 1, (trail, i)) for i, item in enumerate(node))
        elif isinstance(node, str | int | float):  # subclasses (enums): as their value
            stack.append((_base(node), depth, trail))
        else:
            raise InvalidMessage(_path(path, trail), f"not a JSON value ({kind.__name__})")


def _base(value: str | int | float) -> str | int | float:
    """A subclass's value as its base type (what an encoder writes of it)."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    return float.__float__(value)


def _path(path: str, trail: Any) -> str:
    """``path`` followed by the keys and indices of ``trail``: ``.name``
    for a key that is a name, ``["a b"]`` for any other, ``[3]`` for an index."""
    steps: list[str] = []
    while trail is not None:
        trail, step = trail
        if isinstance(step, int):
            steps.append(f"[{step}]")
        elif _NAME.fullmatch(step):
            steps.append(f".{step}")
        else:
            steps.append(f"[{_brief(step)}]")
    return path + "".join(reversed(steps))


def _brief(value: object) -> str:
    """A key as an error shows it: short, and printable whatever it holds
    (a lone surrogate is written as an escape, so the error can be sent)."""
    if isinstance(value, str):
        shown = '"' + value[:60].replace('"', '\\"') + '"'
        return shown.encode("utf-8", "backslashreplace").decode()
    return repr(value)[:60].encode("utf-8", "backslashreplace").decode()


_LONE_SURROGATE: Final = "a lone surrogate (U+D800..U+DFFF), which is not Unicode"
_SURROGATE_REASON: Final = "string holds " + _LONE_SURROGATE
_KEY_SURROGATE_REASON: Final = "object key holds " + _LONE_SURROGATE


def _check_message(item: object, path: str) -> None:
    if not isinstance(item, dict):
        raise InvalidMessage(path, f"expected an object, got {_kind(item)}")
    for key in item:
        if key not in _MESSAGE_FIELDS:
            hint = _OPENAI_HINT if key in _OPENAI_ONLY else ""
            raise InvalidMessage(f"{path}.{key}", "unknown field" + hint)
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
        hint = _ANTHROPIC_HINT if kind in _ANTHROPIC_ONLY else ""
        raise InvalidMessage(f"{path}.type", f"unknown content part {_show(kind)}{hint}")
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
        return _brief(value)
    return _kind(value)
