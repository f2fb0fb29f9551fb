"""Transcript messages as the request bodies of the two chat APIs agents call.

``openai_messages`` gives chat-completions ``messages`` that the official
``openai`` package's ``ChatCompletionMessageParam`` types accept, every one;
``anthropic_messages`` gives the ``system`` string and ``messages`` that the
``anthropic`` package's ``MessageParam`` types accept. A transcript may hold
what neither API can carry (files in a system message, images in a tool
result, tool calls in a shape neither knows, our own ``metadata``), so each
renderer converts, in the documented way of docs/protocol.md ("Chat output"):
what has an equivalent is mapped to it, what has none becomes a placeholder
text that says what was left out and why, and nothing disappears without a
trace. The only fields dropped on purpose are ``metadata`` (ours, not the
conversation's) and, where the API has no place for it, ``name``.

Pure: dicts in the shape ``msgspec.to_builtins`` gives, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from protocol.types import AttachmentPart, ContentPart, ImageUrlPart, Message, TextPart

__all__ = [
    "ANTHROPIC_IMAGE_TYPES",
    "OPENAI_IMAGE_DETAILS",
    "AnthropicRenderer",
    "ContextMode",
    "anthropic_messages",
    "attachment_bytes",
    "openai_messages",
]

ContextMode = Literal["omit", "system"]

#: ``image_url.detail`` values passed on; any other value is left out (the model's default).
OPENAI_IMAGE_DETAILS: Final = frozenset({"auto", "low", "high"})
#: Image types Anthropic takes as base64; other images become a placeholder text.
ANTHROPIC_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

_DATA_URI_RE: Final = re.compile(r"data:([^;,]*);base64,([A-Za-z0-9+/]*={0,2})")
_WEB_URL_RE: Final = re.compile(r"https?://\S+", re.IGNORECASE)


def attachment_bytes(part: AttachmentPart) -> bytes | None:
    """The bytes of a binary attachment, or ``None`` when its content is text.

    An attachment's content is base64 exactly when it is canonical base64 of
    bytes that are not UTF-8 (``protocol.lmml.render.embed_part`` writes text
    files as their text); any other content is the file's text.
    """
    content = part.content
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(data).decode("ascii") != content:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return None


def _context(messages: Iterable[Message], context: ContextMode) -> Iterable[Message]:
    if context not in ("omit", "system"):
        raise ValueError(f"context must be 'omit' or 'system', not {context!r}")
    for message in messages:
        if message.role == "context":
            if context == "omit":
                continue
            yield msgspec.structs.replace(message, role="system")
            continue
        yield message


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _file_text(part: AttachmentPart) -> str:
    return f"[file {part.name} ({part.mime})]\n{part.content}\n[end of {part.name}]"


def _describe_image(url: str) -> str:
    match = _DATA_URI_RE.fullmatch(url)
    if match is not None:
        size = len(match.group(2)) * 3 // 4 - match.group(2).count("=")
        return f"an embedded {match.group(1) or 'image'} of {size} bytes"
    return url if len(url) <= 200 else url[:200] + "..."


def _left_out(what: str, why: str) -> str:
    return f"[{what} left out: {why}]"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


# --- OpenAI chat completions ---------------------------------------------------


def openai_messages(
    messages: Sequence[Message], *, context: ContextMode = "omit"
) -> list[dict[str, Any]]:
    """Chat-completions ``messages`` that ``openai``'s types accept.

    - ``context`` messages (an imported narrative's preamble) are left out, or
      become ``system`` messages with ``context="system"``.
    - Images, files and audio go in user messages only (as the API allows):
      an ``image_url`` part keeps its URL and a ``detail`` of auto/low/high;
      a text attachment is inlined as a text part framed by its name; a binary
      one becomes a ``file`` part (``file_data`` a data URI). In any other
      role, an image or binary file becomes a placeholder text naming it, and
      a text file is inlined.
    - ``tool_calls`` are kept on assistant messages in the API's ``function``
      or ``custom`` shape (a non-string ``arguments`` is JSON-encoded); a call
      in neither shape, or tool calls on another role, become a placeholder
      text holding their JSON.
    - A ``tool`` message without ``tool_call_id`` becomes a user message whose
      text says it is an unattributed tool result. ``name`` is kept on user,
      system and assistant messages and left out of tool messages; ``metadata``
      is always left out.
    """
    return [_openai_message(m) for m in _context(messages, context)]


def _openai_message(message: Message) -> dict[str, Any]:
    role: str = message.role
    notes: list[str] = []
    prefix: str | None = None
    if role == "tool" and message.tool_call_id is None:
        role = "user"
        prefix = "[tool result without a tool_call_id]"
    content = _openai_content(message.content, role, prefix)
    calls: list[dict[str, Any]] = []
    for call in message.tool_calls or ():
        if role != "assistant":
            notes.append(_left_out(f"tool call {_json(call)}", f"{role} messages have none"))
            continue
        mapped = _openai_call(call)
        if mapped is None:
            notes.append(
                _left_out(f"tool call {_json(call)}", "not in the function or custom shape")
            )
        else:
            calls.append(mapped)
    if notes:
        content = _with_notes(content, notes)
    out: dict[str, Any] = {"role": role, "content": content}
    if message.name is not None and role in ("user", "system", "assistant"):
        out["name"] = message.name
    if role == "tool":
        out["tool_call_id"] = message.tool_call_id
    if calls:
        out["tool_calls"] = calls
    return out


def _openai_content(
    content: str | tuple[ContentPart, ...], role: str, prefix: str | None
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content if prefix is None else f"{prefix}\n{content}"
    parts: list[dict[str, Any]] = [] if prefix is None else [_text(prefix)]
    for part in content:
        if isinstance(part, TextPart):
            parts.append(_text(part.text))
        elif isinstance(part, ImageUrlPart):
            if role == "user":
                image: dict[str, Any] = {"url": part.image_url.url}
                if part.image_url.detail in OPENAI_IMAGE_DETAILS:
                    image["detail"] = part.image_url.detail
                parts.append({"type": "image_url", "image_url": image})
            else:
                what = f"image {_describe_image(part.image_url.url)}"
                parts.append(_text(_left_out(what, f"{role} messages cannot carry images")))
        else:
            data = attachment_bytes(part)
            if data is None:
                parts.append(_text(_file_text(part)))
            elif role == "user":
                uri = f"data:{part.mime};base64,{part.content}"
                parts.append({"type": "file", "file": {"filename": part.name, "file_data": uri}})
            else:
                what = f"file {part.name} ({part.mime}, {len(data)} bytes)"
                parts.append(_text(_left_out(what, f"{role} messages cannot carry files")))
    return parts


def _with_notes(
    content: str | list[dict[str, Any]], notes: list[str]
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return "\n".join([content, *notes]) if content else "\n".join(notes)
    return [*content, *(_text(note) for note in notes)]


def _openai_call(call: Mapping[str, Any]) -> dict[str, Any] | None:
    call_id = call.get("id")
    if not isinstance(call_id, str):
        return None
    kind = call.get("type", "function")
    if kind == "function":
        function = call.get("function")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            return None
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = _json(_thaw(arguments))
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": function["name"], "arguments": arguments},
        }
    if kind == "custom":
        custom = call.get("custom")
        if (
            not isinstance(custom, Mapping)
            or not isinstance(custom.get("name"), str)
            or not isinstance(custom.get("input"), str)
        ):
            return None
        return {
            "id": call_id,
            "type": "custom",
            "custom": {"name": custom["name"], "input": custom["input"]},
        }
    return None


def _thaw(value: Any) -> Any:
    """Plain dicts and lists from the frozen ones a message holds."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


# --- Anthropic messages ----------------------------------------------------------


def anthropic_messages(
    messages: Sequence[Message], *, context: ContextMode = "omit"
) -> dict[str, Any]:
    """``{"messages": [...], "system": str}`` that ``anthropic``'s types accept
    (``system`` only when there is one), ready for
    ``client.messages.create(model=..., max_tokens=..., **body)``.

    - System messages (and ``context`` ones with ``context="system"``) are
      joined, in order and wherever they stand, by a blank line into
      ``system``; the Messages API has no system role in ``messages``. Their
      non-text parts become placeholders.
    - User and assistant messages keep their role; a ``tool`` message becomes
      a user message holding one ``tool_result`` block (``tool_use_id`` its
      ``tool_call_id``; its content a string when the message's is one, else
      blocks; without one, a text saying it is an unattributed tool
      result). Consecutive messages of one role are merged into one message,
      as the API requires alternating roles.
    - ``tool_calls`` of an assistant message become ``tool_use`` blocks: the
      ``input`` is the call's ``arguments`` parsed as JSON when that gives an
      object, else ``{"arguments": <the raw text>}``; a call in no known shape
      becomes a placeholder text holding its JSON.
    - Images become ``image`` blocks (a base64 source for a data URI of JPEG,
      PNG, GIF or WebP; a URL source for an http(s) URL) in user messages and
      tool results; other images, and images in assistant messages, become
      placeholders. A text file is inlined as text; a PDF becomes a
      ``document`` block in user messages; other binary files become
      placeholders. ``name`` and ``metadata`` are left out.
    """
    renderer = AnthropicRenderer(context)
    out = renderer.feed(messages)
    out += renderer.finish()
    body: dict[str, Any] = {"messages": out}
    if renderer.system is not None:
        body["system"] = renderer.system
    return body


class AnthropicRenderer:
    """``anthropic_messages`` a page of messages at a time (a long transcript
    is streamed): ``feed`` returns the messages that are complete (the last
    one may still merge with the next page's first), ``finish`` the rest;
    ``system`` is known once every page was fed."""

    def __init__(self, context: ContextMode = "omit") -> None:
        if context not in ("omit", "system"):
            raise ValueError(f"context must be 'omit' or 'system', not {context!r}")
        self.context: ContextMode = context
        self._system: list[str] = []
        self._pending: dict[str, Any] | None = None

    @property
    def system(self) -> str | None:
        return "\n\n".join(self._system) if self._system else None

    def feed(self, messages: Iterable[Message]) -> list[dict[str, Any]]:
        done: list[dict[str, Any]] = []
        for message in _context(messages, self.context):
            if message.role == "system":
                self._system.append(_system_text(message))
                continue
            role, blocks = _anthropic_message(message)
            pending = self._pending
            if pending is not None and pending["role"] == role:
                if blocks:
                    pending["content"] = _as_blocks(pending["content"]) + blocks
                continue
            if pending is not None:
                done.append(pending)
            if (
                len(blocks) == 1
                and blocks[0]["type"] == "text"
                and isinstance(message.content, str)
                and not message.tool_calls
            ):
                self._pending = {"role": role, "content": blocks[0]["text"]}
            else:
                self._pending = {"role": role, "content": blocks or ""}
        return done

    def finish(self) -> list[dict[str, Any]]:
        pending, self._pending = self._pending, None
        return [] if pending is None else [pending]


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    return content


def _system_text(message: Message) -> str:
    if isinstance(message.content, str):
        text = message.content
    else:
        # Text parts run on as Message.text() joins them; an inlined file or a
        # placeholder stands on lines of its own.
        pieces: list[str] = []
        for part in message.content:
            if isinstance(part, TextPart):
                pieces.append(part.text)
            else:
                block = _anthropic_parts((part,), "system", images=False)[0]
                pieces.append(f"\n{block['text']}\n")
        text = "".join(pieces)
    notes = [
        _left_out(f"tool call {_json(call)}", "system messages have none")
        for call in message.tool_calls or ()
    ]
    return "\n".join([text, *notes]) if notes else text


def _anthropic_message(message: Message) -> tuple[str, list[dict[str, Any]]]:
    role = message.role
    if role == "tool":
        blocks = _anthropic_blocks(message.content, "tool")
        if message.tool_call_id is None:
            return "user", [_text("[tool result without a tool_call_id]"), *blocks]
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        # A string stays a string (as the API takes it), so that what
        # protocol.sdk_in reads back is the message that was written.
        result["content"] = message.content if isinstance(message.content, str) else blocks
        if not result["content"]:
            result["content"] = []
        notes = [
            _text(_left_out(f"tool call {_json(call)}", "tool messages have none"))
            for call in message.tool_calls or ()
        ]
        return "user", [result, *notes]
    blocks = _anthropic_blocks(message.content, role)
    for call in message.tool_calls or ():
        if role != "assistant":
            blocks.append(
                _text(_left_out(f"tool call {_json(call)}", f"{role} messages have none"))
            )
            continue
        use = _tool_use(call)
        blocks.append(
            use
            if use is not None
            else _text(_left_out(f"tool call {_json(call)}", "not in the function shape"))
        )
    return role, blocks


def _anthropic_blocks(content: str | tuple[ContentPart, ...], role: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    return _anthropic_parts(content, role, images=role in ("user", "tool"))


def _anthropic_parts(
    content: tuple[ContentPart, ...], role: str, *, images: bool
) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append(_text(part.text))
        elif isinstance(part, ImageUrlPart):
            url = part.image_url.url
            source = _image_source(url) if images else None
            if source is not None:
                blocks.append({"type": "image", "source": source})
            else:
                why = (
                    f"{role} messages cannot carry images"
                    if not images
                    else "only JPEG, PNG, GIF and WebP data or http(s) URLs are accepted"
                )
                blocks.append(_text(_left_out(f"image {_describe_image(url)}", why)))
        else:
            data = attachment_bytes(part)
            if data is None:
                blocks.append(_text(_file_text(part)))
            elif part.mime == "application/pdf" and role == "user":
                blocks.append(
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": part.content,
                        },
                        "title": part.name,
                    }
                )
            else:
                what = f"file {part.name} ({part.mime}, {len(data)} bytes)"
                why = (
                    "only PDF files are accepted"
                    if role == "user"
                    else f"{role} messages cannot carry files"
                )
                blocks.append(_text(_left_out(what, why)))
    return blocks


def _image_source(url: str) -> dict[str, Any] | None:
    match = _DATA_URI_RE.fullmatch(url)
    if match is not None:
        mime = match.group(1)
        if mime in ANTHROPIC_IMAGE_TYPES:
            return {"type": "base64", "media_type": mime, "data": match.group(2)}
        return None
    if _WEB_URL_RE.fullmatch(url):
        return {"type": "url", "url": url}
    return None


def _tool_use(call: Mapping[str, Any]) -> dict[str, Any] | None:
    mapped = _openai_call(call)
    if mapped is None:
        return None
    if mapped["type"] == "custom":
        name, raw = mapped["custom"]["name"], mapped["custom"]["input"]
    else:
        name, raw = mapped["function"]["name"], mapped["function"]["arguments"]
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    tool_input = parsed if isinstance(parsed, dict) else {"arguments": raw}
    return {"type": "tool_use", "id": mapped["id"], "name": name, "input": tool_input}
