"""The AI SDK's ``WebSocketChatTransport`` wire protocol, the client's side:
what ``safeValidateWebSocketChatTransportRequest`` (``ai`` 7.0) accepts,
checked the same way in Python (tests/server/web/test_ai_chat.py holds the
two to the same answers on a set of frames).

A client frame is an object with a string ``type`` and ``requestId``:

- ``abort``: nothing else is checked;
- ``resume``: ``id`` a string, ``headers`` an object of strings, ``body``
  an object, ``lastSequence`` absent or an integer >= 0;
- ``send``: as ``resume`` (without ``lastSequence``), ``trigger``
  ``submit-message`` or ``regenerate-message``, ``messageId`` absent or a
  string, and ``messages`` a list of UIMessages as ``safeValidateUIMessages``
  takes them (``check_ui_messages``).

Nothing here does I/O; ``server.web.ai_chat`` serves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["InvalidRequest", "check_request", "check_ui_messages"]

#: The largest integer JavaScript holds exactly (``Number.isSafeInteger``).
MAX_SAFE_INTEGER: Final = (1 << 53) - 1

TRIGGERS: Final = ("submit-message", "regenerate-message")
ROLES: Final = ("system", "user", "assistant")
TOOL_STATES: Final = (
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
)
#: The static part types and their required string fields (the SDK's
#: ``staticPartSchema``; optional fields are checked by ``_OPTIONAL``).
_STATIC: Final[Mapping[str, tuple[str, ...]]] = {
    "text": ("text",),
    "reasoning": ("text",),
    "custom": ("kind",),
    "source-url": ("sourceId", "url"),
    "source-document": ("sourceId", "mediaType", "title"),
    "file": ("mediaType", "url"),
    "reasoning-file": ("mediaType", "url"),
    "steering-message": ("id",),
    "step-start": (),
}
#: Optional fields that must be strings when present, by part type.
_OPTIONAL_STRINGS: Final[Mapping[str, tuple[str, ...]]] = {
    "reasoning": ("id",),
    "source-url": ("title",),
    "source-document": ("filename",),
    "file": ("filename",),
}
_STATES: Final = ("streaming", "done")


class InvalidRequest(ValueError):
    """A client frame the SDK's validator would refuse; the message says why
    (the SDK's own words where it has them)."""


def _is_record(value: object) -> bool:
    return isinstance(value, dict)


def _is_string_record(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _is_sequence(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and float(value).is_integer()
        and 0 <= value <= MAX_SAFE_INTEGER
    )


def check_request(value: object) -> dict[str, Any]:
    """``value`` (a decoded JSON frame) when the SDK's validator accepts it;
    raises ``InvalidRequest`` otherwise."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise InvalidRequest("Invalid WebSocket chat request frame.")
    if value["type"] == "abort":
        if not isinstance(value.get("requestId"), str):
            raise InvalidRequest("Invalid WebSocket chat abort request.")
        return value
    if (
        not isinstance(value.get("requestId"), str)
        or not isinstance(value.get("id"), str)
        or not _is_string_record(value.get("headers"))
        or not _is_record(value.get("body"))
    ):
        raise InvalidRequest("Invalid WebSocket chat request frame.")
    if value["type"] == "resume":
        if "lastSequence" in value and not _is_sequence(value["lastSequence"]):
            raise InvalidRequest("Invalid WebSocket chat resume sequence.")
        return value
    if (
        value["type"] != "send"
        or value.get("trigger") not in TRIGGERS
        or ("messageId" in value and not isinstance(value["messageId"], str))
    ):
        raise InvalidRequest("Invalid WebSocket chat send request.")
    try:
        check_ui_messages(value.get("messages"))
    except InvalidRequest as exc:
        raise InvalidRequest(f"Invalid UI messages in WebSocket chat request: {exc}") from None
    return value


def check_ui_messages(messages: object) -> None:
    """Raise ``InvalidRequest`` unless ``safeValidateUIMessages`` (with no
    metadata, data or tool schemas) would take ``messages``: a non-empty
    list of objects with a string ``id``, a ``role`` of system, user or
    assistant, and ``parts`` (at least one but for an assistant), each part
    of a known type with its fields."""
    if not isinstance(messages, list):
        raise InvalidRequest("messages must be an array")
    if not messages:
        raise InvalidRequest("Messages array must not be empty")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where} must be an object")
        if not isinstance(message.get("id"), str):
            raise InvalidRequest(f"{where}.id must be a string")
        if message.get("role") not in ROLES:
            raise InvalidRequest(f"{where}.role must be one of {', '.join(ROLES)}")
        parts = message.get("parts")
        if not isinstance(parts, list):
            raise InvalidRequest(f"{where}.parts must be an array")
        for at, part in enumerate(parts):
            _check_part(part, f"{where}.parts[{at}]")
        if message["role"] != "assistant" and not parts:
            raise InvalidRequest(f"{where}: Message must contain at least one part")


def _check_part(part: object, where: str) -> None:
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(part, dict) or not isinstance(kind, str):
        raise InvalidRequest(f"{where}: Invalid UI message part type")
    if kind.startswith("data-"):
        _optional_string(part, "id", where)
        return
    if kind.startswith("tool-") or kind == "dynamic-tool":
        _check_tool(part, kind, where)
        return
    required = _STATIC.get(kind)
    if required is None:
        raise InvalidRequest(f"{where}: Invalid UI message part type {kind!r}")
    for field in required:
        if not isinstance(part.get(field), str):
            raise InvalidRequest(f"{where}.{field} must be a string")
    for field in _OPTIONAL_STRINGS.get(kind, ()):
        _optional_string(part, field, where)
    if kind in ("text", "reasoning") and "state" in part and part["state"] not in _STATES:
        raise InvalidRequest(f"{where}.state must be streaming or done")
    if kind == "steering-message":
        inner = part.get("parts")
        if not isinstance(inner, list):
            raise InvalidRequest(f"{where}.parts must be an array")
        for at, item in enumerate(inner):
            sub = f"{where}.parts[{at}]"
            item_kind = item.get("type") if isinstance(item, dict) else None
            if item_kind == "text":
                _required_string(item, "text", sub)
            elif item_kind == "file":
                _required_string(item, "mediaType", sub)
                _required_string(item, "url", sub)
            else:
                raise InvalidRequest(f"{sub}: Invalid steering message part type")


def _check_tool(part: dict[str, Any], kind: str, where: str) -> None:
    if kind == "dynamic-tool":
        _required_string(part, "toolName", where)
        if "dynamic" in part and part["dynamic"] is not False:
            raise InvalidRequest(f"{where}.dynamic must be false when present")
    _required_string(part, "toolCallId", where)
    _optional_string(part, "title", where)
    state = part.get("state")
    if state not in TOOL_STATES:
        raise InvalidRequest(f"{where}.state must be one of {', '.join(TOOL_STATES)}")
    if state == "output-error":
        _required_string(part, "errorText", where)
    elif "errorText" in part:
        raise InvalidRequest(f"{where}.errorText is only for output-error")
    if state != "output-available" and "output" in part:
        raise InvalidRequest(f"{where}.output is only for output-available")
    approval = part.get("approval")
    if state in ("approval-requested", "approval-responded", "output-denied"):
        if not isinstance(approval, dict) or not isinstance(approval.get("id"), str):
            raise InvalidRequest(f"{where}.approval must be an object with a string id")
    elif state in ("input-streaming", "input-available") and "approval" in part:
        raise InvalidRequest(f"{where}.approval is not allowed in state {state}")


def _required_string(part: Mapping[str, Any], field: str, where: str) -> None:
    if not isinstance(part.get(field), str):
        raise InvalidRequest(f"{where}.{field} must be a string")


def _optional_string(part: Mapping[str, Any], field: str, where: str) -> None:
    if field in part and not isinstance(part[field], str):
        raise InvalidRequest(f"{where}.{field} must be a string")
