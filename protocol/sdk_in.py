"""Messages as the chat APIs' SDKs give them, turned into transcript messages.

The inverse of ``protocol.chat``: ``from_openai`` takes chat-completions
messages (request params, or an assistant ``ChatCompletionMessage`` as its
``model_dump()`` gives it, nulls and all); ``from_anthropic`` takes
Messages-API messages (``MessageParam``s, or a response ``Message``'s
``model_dump()``) and the ``system`` prompt. Both return plain message dicts
for ``protocol.validation.parse_messages``, which still checks every value
and limit; what has no place in a transcript message is refused with an
``InvalidMessage`` naming its path, never dropped in silence. The mapping is
in docs/protocol.md ("SDK input"); in short:

- OpenAI: ``null`` is absent. ``content: null`` (or none) is ``""`` on an
  assistant message with ``tool_calls``, a ``refusal``, ``audio`` or a
  ``function_call``. A non-null ``refusal`` is kept in ``metadata.refusal``
  and is also the content when there is no other; non-null ``annotations``
  (non-empty), ``audio`` and ``function_call`` are kept in ``metadata``
  under their own names. ``developer`` is a ``system`` message; a ``file``
  part holding a data URI is an attachment.
- Anthropic: ``tool_use`` blocks are ``tool_calls`` in the function shape
  (``arguments`` the ``input`` as compact JSON with sorted keys, as
  ``protocol.chat`` writes it); ``thinking`` and ``redacted_thinking`` blocks
  go, as they are, into ``metadata.thinking``; text ``citations`` into
  ``metadata.citations``; each ``tool_result`` block of a user message is a
  ``tool`` message (``is_error`` kept as ``metadata.is_error``); a response
  ``Message``'s envelope (``id``, ``type``, ``model``, ``stop_reason``,
  ``stop_sequence``, ``usage``, ...) is left out, as are ``cache_control`` and
  a document's ``citations`` setting.

Pure: plain data in (decoded JSON), plain data out, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from protocol import ui_messages
from protocol.errors import InvalidMessage

__all__ = ["SDK_FORMATS", "SdkFormat", "from_anthropic", "from_openai", "from_sdk", "from_ui"]

SdkFormat = Literal["openai", "anthropic", "ui"]
SDK_FORMATS: Final = ("openai", "anthropic", "ui")

_DATA_URI_RE: Final = re.compile(r"data:([^;,]*);base64,(.*)", re.DOTALL)
_OPENAI_FIELDS: Final = frozenset(
    {"role", "content", "name", "tool_call_id", "tool_calls", "metadata"}
)
#: OpenAI message fields a transcript message has no place for: kept in
#: ``metadata`` under their own name when they hold something.
_OPENAI_EXTRAS: Final = ("refusal", "annotations", "audio", "function_call")
_OPENAI_ROLES: Final = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
}
#: A response ``Message``'s fields that describe the API call, not the message.
_ANTHROPIC_ENVELOPE: Final = frozenset(
    {
        "id",
        "type",
        "model",
        "stop_reason",
        "stop_sequence",
        "usage",
        "container",
        "context_management",
    }
)


def from_sdk(format: str | None, messages: object, system: object = None) -> object:
    """``from_openai`` or ``from_anthropic`` by name (``system``: Anthropic's
    only); ``format`` ``None``: ``messages`` as they are (the transcript's own
    shape), and no ``system``."""
    if format is None:
        if system is not None:
            raise InvalidMessage("system", "is taken only with format anthropic")
        return messages
    if format == "openai":
        if system is not None:
            raise InvalidMessage("system", "is Anthropic's; an OpenAI system prompt is a message")
        return from_openai(messages)
    if format == "anthropic":
        return from_anthropic(messages, system)
    if format == "ui":
        if system is not None:
            raise InvalidMessage(
                "system", "is Anthropic's; a UIMessage's system prompt is a message"
            )
        return from_ui(messages)
    raise InvalidMessage("format", f"must be one of {', '.join(SDK_FORMATS)}")


def from_ui(messages: object, *, path: str = "messages") -> list[dict[str, Any]]:
    """The AI SDK's ``UIMessage``s (``useChat``'s messages, a reply as
    ``readUIMessageStream`` made it) as the stored messages they stand for
    (``protocol.ui_messages.from_ui_message``: one per step of a reply, tool
    results as ``tool`` messages, the rest in ``metadata.ui``)."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(_list(messages, path)):
        try:
            converted = ui_messages.from_ui_message(_object(message, f"{path}[{i}]"))
        except ValueError as exc:
            if isinstance(exc, InvalidMessage):
                raise
            raise InvalidMessage(f"{path}[{i}]", str(exc)) from None
        out += msgspec.to_builtins(converted)
    return out


def _object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidMessage(path, f"expected an object, got {_kind(value)}")
    # null is absent, wherever it stands.
    return {k: v for k, v in value.items() if v is not None}


def _list(value: object, path: str) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise InvalidMessage(path, f"expected a list, got {_kind(value)}")
    return value


def _str(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidMessage(path, f"expected a string, got {_kind(value)}")
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _unknown(
    item: Mapping[str, Any], known: frozenset[str] | set[str], path: str, what: str
) -> None:
    for key in item:
        if key not in known:
            raise InvalidMessage(f"{path}.{key}", f"unknown field of {what}")


def _no_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_no_nulls(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


# --- OpenAI chat completions ---------------------------------------------------


def from_openai(messages: object, *, path: str = "messages") -> list[dict[str, Any]]:
    """Transcript message dicts from chat-completions messages (see the module)."""
    return [_openai_message(m, f"{path}[{i}]") for i, m in enumerate(_list(messages, path))]


def _openai_message(value: object, path: str) -> dict[str, Any]:
    item = _object(value, path)
    _unknown(item, _OPENAI_FIELDS | set(_OPENAI_EXTRAS), path, "an OpenAI message")
    if "role" not in item:
        raise InvalidMessage(f"{path}.role", "missing")
    role = _OPENAI_ROLES.get(item["role"]) if isinstance(item["role"], str) else None
    if role is None:
        raise InvalidMessage(
            f"{path}.role",
            f"not an OpenAI role this server takes ({', '.join(_OPENAI_ROLES)}): "
            f"{item['role']!r:.60}",
        )
    out: dict[str, Any] = {"role": role}
    metadata: dict[str, Any] = {}
    if "metadata" in item:  # ours, passed on as it is (validation checks it)
        if not isinstance(item["metadata"], Mapping):
            raise InvalidMessage(
                f"{path}.metadata", f"expected an object, got {_kind(item['metadata'])}"
            )
        metadata.update(item["metadata"])
    content = item.get("content")
    if isinstance(content, list | tuple):
        parts: list[dict[str, Any]] = []
        refusals: list[str] = []
        for j, part in enumerate(content):
            parts.append(_openai_part(part, f"{path}.content[{j}]", refusals))
        if refusals:
            metadata["refusal"] = "".join(refusals)
        out["content"] = parts
    elif content is not None:
        out["content"] = content  # a string, or what validation refuses
    refusal = item.get("refusal")
    if refusal is not None:
        metadata["refusal"] = _str(refusal, f"{path}.refusal")
        if not content:
            out["content"] = refusal
    annotations = item.get("annotations")
    if annotations is not None and _list(annotations, f"{path}.annotations"):
        metadata["annotations"] = _no_nulls(annotations)
    for key in ("audio", "function_call"):
        if key in item:
            metadata[key] = _no_nulls(_object(item[key], f"{path}.{key}"))
    calls = item.get("tool_calls")
    if calls is not None:
        calls = _list(calls, f"{path}.tool_calls")
        if calls:
            out["tool_calls"] = [
                _tool_call(call, f"{path}.tool_calls[{j}]") for j, call in enumerate(calls)
            ]
    if "content" not in out:
        if role != "assistant" or not (
            out.get("tool_calls") or "audio" in metadata or "function_call" in metadata
        ):
            raise InvalidMessage(
                f"{path}.content",
                "missing (null is allowed only on an assistant message with tool_calls, "
                "a refusal, audio or a function_call)",
            )
        out["content"] = ""
    for key in ("name", "tool_call_id"):
        if key in item:
            out[key] = item[key]
    if metadata:
        out["metadata"] = metadata
    return out


def _tool_call(value: object, path: str) -> dict[str, Any]:
    """A tool call as it is, its ``null`` fields and those of its
    ``function`` (or ``custom``) left out (the values inside are the call's)."""
    call = _object(value, path)
    for key in ("function", "custom"):
        if isinstance(call.get(key), Mapping):
            call[key] = {k: v for k, v in call[key].items() if v is not None}
    return call


def _openai_part(value: object, path: str, refusals: list[str]) -> dict[str, Any]:
    part = _object(value, path)
    kind = part.get("type")
    if kind == "text":
        _unknown(part, {"type", "text"}, path, "a text part")
        return {"type": "text", "text": part.get("text")}
    if kind == "image_url":
        _unknown(part, {"type", "image_url"}, path, "an image_url part")
        return {
            "type": "image_url",
            "image_url": _object(part.get("image_url"), f"{path}.image_url"),
        }
    if kind == "refusal":
        _unknown(part, {"type", "refusal"}, path, "a refusal part")
        text = _str(part.get("refusal"), f"{path}.refusal")
        refusals.append(text)
        return {"type": "text", "text": text}
    if kind == "file":
        _unknown(part, {"type", "file"}, path, "a file part")
        file = _object(part.get("file"), f"{path}.file")
        data = file.get("file_data")
        match = _DATA_URI_RE.fullmatch(data) if isinstance(data, str) else None
        if match is None:
            raise InvalidMessage(
                f"{path}.file.file_data",
                "a file is taken only as a base64 data URI (a file_id names a file "
                "only OpenAI holds)",
            )
        _unknown(file, {"file_data", "filename", "file_id"}, f"{path}.file", "a file")
        name = file.get("filename", "file")
        return {
            "type": "attachment",
            "name": _str(name, f"{path}.file.filename"),
            "mime": match.group(1) or "application/octet-stream",
            "content": match.group(2),
        }
    raise InvalidMessage(
        f"{path}.type",
        f"an OpenAI content part of type {kind!r:.40} cannot be carried "
        "(text, image_url, refusal and file with file_data can)",
    )


# --- Anthropic messages ----------------------------------------------------------


def from_anthropic(
    messages: object, system: object = None, *, path: str = "messages"
) -> list[dict[str, Any]]:
    """Transcript message dicts from Messages-API messages and ``system``
    (a string or a list of text blocks, first as a system message)."""
    out: list[dict[str, Any]] = []
    if system is not None:
        if isinstance(system, str):
            out.append({"role": "system", "content": system})
        else:
            parts = [
                _text_block(b, f"system[{j}]", {}) for j, b in enumerate(_list(system, "system"))
            ]
            out.append({"role": "system", "content": parts})
    for i, item in enumerate(_list(messages, path)):
        out.extend(_anthropic_message(item, f"{path}[{i}]"))
    return out


def _anthropic_message(value: object, path: str) -> list[dict[str, Any]]:
    item = _object(value, path)
    _unknown(item, {"role", "content"} | _ANTHROPIC_ENVELOPE, path, "an Anthropic message")
    if item.get("type", "message") != "message":
        raise InvalidMessage(f"{path}.type", f"expected 'message', got {item['type']!r:.40}")
    role = item.get("role")
    if role not in ("user", "assistant"):
        raise InvalidMessage(f"{path}.role", f"expected 'user' or 'assistant', got {role!r:.40}")
    if "content" not in item:
        raise InvalidMessage(f"{path}.content", "missing")
    content = item["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = _list(content, f"{path}.content")
    if role == "assistant":
        return [_assistant(blocks, f"{path}.content")]
    return _user(blocks, f"{path}.content")


def _assistant(blocks: Sequence[Any], path: str) -> dict[str, Any]:
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    metadata: dict[str, Any] = {}
    for j, value in enumerate(blocks):
        where = f"{path}[{j}]"
        block = _object(value, where)
        kind = block.get("type")
        if kind == "text":
            texts.append(_text_block(block, where, metadata))
        elif kind == "tool_use":
            _unknown(block, {"type", "id", "name", "input", "cache_control"}, where, "a tool_use")
            tool_input = block.get("input", {})
            if not isinstance(tool_input, Mapping):
                raise InvalidMessage(
                    f"{where}.input", f"expected an object, got {_kind(tool_input)}"
                )
            calls.append(
                {
                    "id": _str(block.get("id"), f"{where}.id"),
                    "type": "function",
                    "function": {
                        "name": _str(block.get("name"), f"{where}.name"),
                        "arguments": _json(tool_input),
                    },
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            block.pop("cache_control", None)
            metadata.setdefault("thinking", []).append(block)
        else:
            raise InvalidMessage(
                f"{where}.type",
                f"an assistant block of type {kind!r:.40} cannot be carried "
                "(text, tool_use, thinking and redacted_thinking can)",
            )
    out: dict[str, Any] = {"role": "assistant"}
    if calls:
        # The shape of an OpenAI assistant message: its text, then its calls.
        out["content"] = "".join(t["text"] for t in texts)
        out["tool_calls"] = calls
    else:
        out["content"] = texts
    if metadata:
        out["metadata"] = metadata
    return out


def _text_block(value: object, path: str, metadata: dict[str, Any]) -> dict[str, Any]:
    block = _object(value, path)
    if block.get("type") != "text":
        raise InvalidMessage(f"{path}.type", f"expected 'text', got {block.get('type')!r:.40}")
    _unknown(block, {"type", "text", "citations", "cache_control"}, path, "a text block")
    citations = block.get("citations")
    if citations:
        metadata.setdefault("citations", []).extend(
            _no_nulls(_list(citations, f"{path}.citations"))
        )
    return {"type": "text", "text": _str(block.get("text"), f"{path}.text")}


def _user(blocks: Sequence[Any], path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    metadata: dict[str, Any] = {}

    def flush() -> None:
        nonlocal parts, metadata
        if parts:
            message: dict[str, Any] = {"role": "user", "content": parts}
            if metadata:
                message["metadata"] = metadata
            out.append(message)
        parts, metadata = [], {}

    for j, value in enumerate(blocks):
        where = f"{path}[{j}]"
        block = _object(value, where)
        if block.get("type") == "tool_result":
            flush()
            out.append(_tool_result(block, where))
        else:
            parts.append(_user_part(block, where, metadata))
    flush()
    if not out:  # no blocks at all
        out.append({"role": "user", "content": ""})
    return out


def _tool_result(block: dict[str, Any], path: str) -> dict[str, Any]:
    _unknown(
        block,
        {"type", "tool_use_id", "content", "is_error", "cache_control"},
        path,
        "a tool_result",
    )
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": _str(block.get("tool_use_id"), f"{path}.tool_use_id"),
    }
    metadata: dict[str, Any] = {}
    content = block.get("content", "")
    if isinstance(content, str) or (isinstance(content, list | tuple) and not content):
        message["content"] = content or ""
    else:
        message["content"] = [
            _user_part(_object(b, f"{path}.content[{k}]"), f"{path}.content[{k}]", metadata)
            for k, b in enumerate(_list(content, f"{path}.content"))
        ]
    if block.get("is_error") is not None:
        metadata["is_error"] = block["is_error"]
    if metadata:
        message["metadata"] = metadata
    return message


def _user_part(block: dict[str, Any], path: str, metadata: dict[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return _text_block(block, path, metadata)
    if kind == "image":
        _unknown(block, {"type", "source", "cache_control"}, path, "an image block")
        source = _object(block.get("source"), f"{path}.source")
        if source.get("type") == "base64":
            mime = _str(source.get("media_type"), f"{path}.source.media_type")
            data = _str(source.get("data"), f"{path}.source.data")
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        if source.get("type") == "url":
            return {"type": "image_url", "image_url": {"url": _str(source.get("url"), path)}}
        raise InvalidMessage(
            f"{path}.source.type", "an image is taken as base64 or a url, not a file_id"
        )
    if kind == "document":
        _unknown(
            block,
            {"type", "source", "title", "citations", "cache_control"},
            path,
            "a document block",
        )
        source = _object(block.get("source"), f"{path}.source")
        title = block.get("title")
        if source.get("type") in ("base64", "text"):
            mime = _str(source.get("media_type"), f"{path}.source.media_type")
            default = "document.pdf" if mime == "application/pdf" else "document.txt"
            return {
                "type": "attachment",
                "name": default if title is None else _str(title, f"{path}.title"),
                "mime": mime,
                "content": _str(source.get("data"), f"{path}.source.data"),
            }
        raise InvalidMessage(
            f"{path}.source.type", "a document is taken as base64 or text, not a url or file"
        )
    raise InvalidMessage(
        f"{path}.type",
        f"a user block of type {kind!r:.40} cannot be carried "
        "(text, image, document and tool_result can)",
    )
