"""Transcript messages as the AI SDK's ``UIMessage``s, and back.

The Vercel AI SDK (``ai`` on npm, ``useChat``) shows a conversation as
``UIMessage``s: ``{id, role, parts, metadata?}``, where an assistant reply is
one message whose ``parts`` are its steps (``step-start``), text, reasoning,
tool calls (``tool-<name>`` with their input and output), files, sources and
custom ``data-*`` parts. A transcript stores chat-completions messages: text
as ``content``, tool calls as ``tool_calls``, tool results as ``tool``
messages. This module maps one onto the other as docs/protocol.md ("UI
messages") says:

- ``to_ui_messages`` / ``UIMessageRenderer`` (``GET .../ui-messages``): each
  stored message becomes a ``UIMessage`` part list; a ``tool`` message
  answering a call of the assistant message being built becomes that call's
  output (``output-available``) instead of a message of its own; consecutive
  messages that name the same UI id in ``metadata.ui.id`` (the steps of one
  reply) form one ``UIMessage``.
- ``from_ui_message``: a ``UIMessage`` in its final state becomes the stored
  messages it stands for (one per step for an assistant reply with tool
  results), with what chat completions have no field for (reasoning, sources,
  data parts, approvals, the UI id, the parts' order) in ``metadata.ui``, so
  that ``to_ui_messages(from_ui_message(m)) == m``.

``metadata.ui`` is ``{"id": str, "parts": [...], "metadata": ...}``: ``parts``
is the order of the message's parts, where ``{"type": "text"}`` stands for the
next text part of ``content``, ``{"type": "file"}`` for the next file part and
``{"type": "tool", "toolCallId": ...}`` for that tool call (with ``state``,
``errorText`` or ``approval`` when it did not end with an output); every other
part is kept whole. ``metadata`` is the ``UIMessage``'s own metadata.

Pure: no I/O.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from protocol.chat import attachment_bytes
from protocol.types import AttachmentPart, ContentPart, ImageUrl, ImageUrlPart, Message, TextPart

__all__ = [
    "UI_KEY",
    "UIMessageRenderer",
    "from_ui_message",
    "to_ui_messages",
    "ui_id",
]

#: The ``metadata`` key that holds what a ``UIMessage`` has and a chat message has not.
UI_KEY: Final = "ui"

_DATA_URI_RE: Final = re.compile(r"data:([^;,]*)(;base64)?,(.*)", re.DOTALL)
_IMAGE_TYPES: Final = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "svg": "image/svg+xml",
}
_TOOL_STATES: Final = frozenset(
    {
        "input-streaming",
        "input-available",
        "approval-requested",
        "approval-responded",
        "output-available",
        "output-error",
        "output-denied",
    }
)


def _ui(message: Message) -> Mapping[str, Any] | None:
    metadata = message.metadata
    if metadata is None:
        return None
    ui = metadata.get(UI_KEY)
    return ui if isinstance(ui, Mapping) else None


def ui_id(message: Message, index: int) -> str:
    """The UI id of the message at ``index``: the one it was streamed with
    (``metadata.ui.id``), else ``msg-<index>`` (stable: index ``i`` always
    names the same message)."""
    ui = _ui(message)
    if ui is not None and isinstance(ui.get("id"), str) and ui["id"]:
        return str(ui["id"])
    return f"msg-{index}"


def _plain(value: Any) -> Any:
    """Frozen containers as plain dicts and lists (what JSON and JS see)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _media_type(url: str) -> str:
    match = _DATA_URI_RE.match(url)
    if match is not None and match.group(1):
        return match.group(1)
    ext = url.rsplit("?", 1)[0].rsplit(".", 1)[-1].lower()
    return _IMAGE_TYPES.get(ext, "image/*")


def _file_part(part: ImageUrlPart | AttachmentPart) -> dict[str, Any]:
    if isinstance(part, ImageUrlPart):
        return {
            "type": "file",
            "mediaType": _media_type(part.image_url.url),
            "url": part.image_url.url,
        }
    data = attachment_bytes(part)
    raw = data if data is not None else part.content.encode("utf-8")
    url = f"data:{part.mime};base64,{base64.b64encode(raw).decode('ascii')}"
    return {"type": "file", "mediaType": part.mime, "filename": part.name, "url": url}


def _content_parts(
    content: str | tuple[ContentPart, ...],
) -> tuple[list[str], list[dict[str, Any]]]:
    """The texts and the file parts of a message's content, in order."""
    if isinstance(content, str):
        return ([content] if content else []), []
    texts: list[str] = []
    files: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            texts.append(part.text)
        else:
            files.append(_file_part(part))
    return texts, files


def _parse_input(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return _plain(arguments)


def _parse_output(content: str | tuple[ContentPart, ...]) -> Any:
    if not isinstance(content, str):
        texts, files = _content_parts(content)
        if not files:
            content = "".join(texts)
        else:
            return {"text": "".join(texts), "files": files}
    try:
        return json.loads(content)
    except ValueError:
        return content


def _call_name(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    custom = call.get("custom")
    if isinstance(custom, Mapping) and isinstance(custom.get("name"), str):
        return str(custom["name"])
    name = call.get("name")
    return str(name) if isinstance(name, str) else "unknown"


def _call_arguments(call: Mapping[str, Any]) -> Any:
    function = call.get("function")
    if isinstance(function, Mapping):
        return function.get("arguments")
    custom = call.get("custom")
    if isinstance(custom, Mapping):
        return custom.get("input")
    return call.get("arguments", call.get("input"))


def _extras(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What a layout entry keeps of a text or file part besides its content
    (``state``, ``providerMetadata``, ...)."""
    return {str(k): _plain(v) for k, v in entry.items() if k != "type"}


class _Building:
    """One ``UIMessage`` being put together from consecutive stored messages."""

    def __init__(self, id_: str, role: str, stored_id: bool) -> None:
        self.id = id_
        self.role = role
        self.stored_id = stored_id
        self.parts: list[dict[str, Any]] = []
        self.calls: dict[str, dict[str, Any]] = {}
        self.metadata: Any = None
        self.steps = 0

    def done(self) -> dict[str, Any]:
        message: dict[str, Any] = {"id": self.id, "role": self.role, "parts": self.parts}
        if self.metadata is not None:
            message["metadata"] = self.metadata
        return message


class UIMessageRenderer:
    """Stored messages as ``UIMessage``s, a page at a time.

    ``feed`` takes the next messages (``start`` is the index of the first
    message ever fed) and returns the ``UIMessage``s that are complete; the
    last one may still take tool results or further steps, so ``finish``
    returns it once there is nothing more.

    ``context`` messages (an imported narrative's preamble) are left out, or
    shown as ``system`` messages with ``context="system"``.
    """

    def __init__(self, start: int = 0, *, context: str = "omit") -> None:
        if context not in ("omit", "system"):
            raise ValueError(f"context must be 'omit' or 'system', not {context!r}")
        self._index = start
        self._context = context
        self._open: _Building | None = None

    def feed(self, messages: Iterable[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            index = self._index
            self._index += 1
            self._take(message, index, out)
        return out

    def finish(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        last, self._open = self._open, None
        return [last.done()]

    def _close(self, out: list[dict[str, Any]]) -> None:
        if self._open is not None:
            out.append(self._open.done())
            self._open = None

    def _take(self, message: Message, index: int, out: list[dict[str, Any]]) -> None:
        role: str = message.role
        if role == "context":
            if self._context == "omit":
                return
            role = "system"
        ui = _ui(message)
        stored_id = ui is not None and isinstance(ui.get("id"), str) and bool(ui["id"])
        id_ = ui_id(message, index)
        open_ = self._open
        if role == "tool":
            call = open_.calls.get(message.tool_call_id or "") if open_ is not None else None
            if call is not None and call.get("state") == "input-available":
                call["state"] = "output-available"
                call["output"] = _parse_output(message.content)
                return
            self._close(out)
            orphan = _Building(id_, "assistant", stored_id)
            orphan.parts.append(self._orphan_result(message))
            self._open = orphan
            return
        joins = (
            open_ is not None
            and role == open_.role == "assistant"
            and stored_id
            and open_.stored_id
            and open_.id == id_
        )
        if joins and open_ is not None:
            building = open_
        else:
            self._close(out)
            building = self._open = _Building(id_, role, stored_id)
        self._add_step(building, message, ui)

    @staticmethod
    def _orphan_result(message: Message) -> dict[str, Any]:
        # A tool result whose call is not in the reply before it: shown as a
        # dynamic tool (the SDK's part for a tool it has no definition of).
        return {
            "type": "dynamic-tool",
            "toolName": message.name or "tool",
            "toolCallId": message.tool_call_id or "",
            "state": "output-available",
            "input": None,
            "output": _parse_output(message.content),
        }

    def _add_step(
        self, building: _Building, message: Message, ui: Mapping[str, Any] | None
    ) -> None:
        texts, files = _content_parts(message.content)
        calls = message.tool_calls or ()
        by_id: dict[str, Mapping[str, Any]] = {}
        for call in calls:
            call_id = call.get("id")
            by_id[str(call_id) if call_id is not None else f"call-{len(by_id)}"] = call
        layout = ui.get("parts") if ui is not None else None
        if ui is not None and "metadata" in ui:
            building.metadata = _plain(ui["metadata"])
        building.steps += 1
        if not isinstance(layout, list | tuple):
            layout = self._default_layout(building, texts, files, by_id)
        texts_left = list(texts)
        files_left = list(files)
        for entry in layout:
            if not isinstance(entry, Mapping):
                continue
            kind = entry.get("type")
            if kind == "text":
                # An empty string content holds one empty text part.
                part: dict[str, Any] = {
                    "type": "text",
                    "text": texts_left.pop(0) if texts_left else "",
                }
                building.parts.append(part | _extras(entry))
            elif kind == "file" and "url" not in entry:
                if files_left:
                    building.parts.append(files_left.pop(0) | _extras(entry))
            elif kind == "tool":
                call_id = entry.get("toolCallId")
                tool_call = by_id.pop(str(call_id), None)
                if tool_call is not None:
                    building.parts.append(self._tool_part(building, str(call_id), tool_call, entry))
            else:
                building.parts.append(_plain(entry))
        # What the layout did not place is shown all the same, after it.
        building.parts.extend({"type": "text", "text": t} for t in texts_left)
        building.parts.extend(files_left)
        for call_id, tool_call in by_id.items():
            building.parts.append(self._tool_part(building, call_id, tool_call, {}))
        if not building.parts:
            # A UIMessage has at least one part: an empty message shows as empty text.
            building.parts.append({"type": "text", "text": ""})

    @staticmethod
    def _default_layout(
        building: _Building,
        texts: Sequence[str],
        files: Sequence[dict[str, Any]],
        calls: Mapping[str, Mapping[str, Any]],
    ) -> list[dict[str, Any]]:
        layout: list[dict[str, Any]] = []
        if building.role == "assistant" and building.steps > 1:
            layout.append({"type": "step-start"})
        layout += [{"type": "text"} for _ in texts]
        layout += [{"type": "file"} for _ in files]
        layout += [{"type": "tool", "toolCallId": call_id} for call_id in calls]
        return layout

    @staticmethod
    def _tool_part(
        building: _Building, call_id: str, call: Mapping[str, Any], entry: Mapping[str, Any]
    ) -> dict[str, Any]:
        part: dict[str, Any] = {
            "type": f"tool-{_call_name(call)}",
            "toolCallId": call_id,
            "state": "input-available",
            "input": _parse_input(_call_arguments(call)),
        }
        state = entry.get("state")
        if isinstance(state, str) and state in _TOOL_STATES and state != "output-available":
            part["state"] = state
        for key in ("errorText", "approval", "title", "providerExecuted"):
            if key in entry:
                part[key] = _plain(entry[key])
        if part["state"] == "input-available":
            building.calls[call_id] = part
        return part


def to_ui_messages(
    messages: Sequence[Message], start: int = 0, *, context: str = "omit"
) -> list[dict[str, Any]]:
    """``messages`` (the first at index ``start``) as ``UIMessage``s."""
    renderer = UIMessageRenderer(start, context=context)
    return renderer.feed(messages) + renderer.finish()


# --- back: a UIMessage as stored messages -------------------------------------


def _file_content(part: Mapping[str, Any]) -> ContentPart:
    url = str(part.get("url", ""))
    media_type = str(part.get("mediaType", "application/octet-stream"))
    match = _DATA_URI_RE.fullmatch(url)
    filename = part.get("filename")
    if media_type.startswith("image/") and not isinstance(filename, str):
        return ImageUrlPart(image_url=ImageUrl(url=url))
    if match is not None and match.group(2):
        data = base64.b64decode(match.group(3))
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            content = match.group(3)
        name = filename if isinstance(filename, str) else "file"
        return AttachmentPart(name=name, mime=media_type, content=content)
    return ImageUrlPart(image_url=ImageUrl(url=url))


def from_ui_message(message: Mapping[str, Any]) -> list[Message]:
    """The stored messages a ``UIMessage`` (in its final state) stands for.

    A user or system message is one message; an assistant message is one
    assistant message per step (``step-start`` parts separate them), each
    followed by a ``tool`` message for every tool call of the step that has
    an output (JSON text). Everything else rides in ``metadata.ui``.
    Raises ``ValueError`` for what is not a ``UIMessage``.
    """
    id_ = message.get("id")
    role = message.get("role")
    parts = message.get("parts")
    if not isinstance(id_, str) or not id_:
        raise ValueError("a UIMessage needs a non-empty string id")
    if role not in ("system", "user", "assistant"):
        raise ValueError(f"a UIMessage's role is system, user or assistant, not {role!r}")
    if not isinstance(parts, list | tuple):
        raise ValueError("a UIMessage's parts must be a list")
    steps: list[list[Mapping[str, Any]]] = [[]]
    for part in parts:
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise ValueError("each part of a UIMessage is an object with a string type")
        if part["type"] == "step-start" and role == "assistant" and steps[-1]:
            steps.append([])
        steps[-1].append(part)
    out: list[Message] = []
    for n, step in enumerate(steps):
        out += _step_messages(id_, str(role), step, message.get("metadata") if n == 0 else None)
    return out


def _step_messages(
    id_: str, role: str, parts: Sequence[Mapping[str, Any]], metadata: Any
) -> list[Message]:
    content: list[ContentPart] = []
    layout: list[Any] = []
    calls: list[dict[str, Any]] = []
    results: list[Message] = []
    for part in parts:
        kind = str(part["type"])
        if kind == "text":
            content.append(TextPart(text=str(part.get("text", ""))))
            layout.append({k: v for k, v in part.items() if k != "text"})
        elif kind == "file":
            content.append(_file_content(part))
            layout.append(
                {k: v for k, v in part.items() if k not in ("url", "mediaType", "filename")}
            )
        elif kind.startswith("tool-") or kind == "dynamic-tool":
            name = kind[5:] if kind != "dynamic-tool" else str(part.get("toolName", "tool"))
            call_id = str(part.get("toolCallId", f"call-{len(calls)}"))
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(part.get("input"))},
                }
            )
            entry: dict[str, Any] = {"type": "tool", "toolCallId": call_id}
            state = part.get("state")
            if state != "output-available":
                entry["state"] = state
            for key in ("errorText", "approval", "title", "providerExecuted"):
                if key in part:
                    entry[key] = part[key]
            layout.append(entry)
            if state == "output-available":
                results.append(
                    Message(
                        role="tool",
                        content=json.dumps(part.get("output"), ensure_ascii=False),
                        tool_call_id=call_id,
                    )
                )
        else:
            layout.append(dict(part))
    ui: dict[str, Any] = {"id": id_, "parts": layout}
    if metadata is not None:
        ui["metadata"] = metadata
    text_only = all(isinstance(p, TextPart) for p in content)
    body: str | tuple[ContentPart, ...]
    if text_only and len(content) <= 1:
        body = content[0].text if content else ""  # type: ignore[union-attr]
    else:
        body = tuple(content)
    head = Message(
        role=role,  # type: ignore[arg-type]
        content=body,
        tool_calls=tuple(calls) if calls else None,
        metadata={UI_KEY: ui},
    )
    return [head, *results]
