"""The streams of the ``openai`` and ``anthropic`` SDKs as AI SDK
``UIMessageChunk``s: what a reply with parts is written with (a ``draft`` op
with ``chunks``, docs/protocol.md "Drafts" and "UI messages").

``UIChunks`` takes one item of a model's stream at a time (``add``) and
returns the chunks it stands for, then ``end()`` the chunks that close what
is still open. An item is any of:

- an OpenAI ``ChatCompletionChunk`` (the object or its dict): the first
  gives ``start`` (its ``id`` the message id) and ``start-step``;
  ``delta.reasoning_content`` / ``delta.reasoning`` (what OpenAI-compatible
  servers stream a model's thinking as) a ``reasoning`` part,
  ``delta.content`` and ``delta.refusal`` a ``text`` part, each
  ``delta.tool_calls[i]`` a tool call (``tool-input-start`` once its id and
  name are known, then ``tool-input-delta`` with the argument fragments);
  ``finish_reason`` closes the parts, gives every call its parsed input
  (``tool-input-available``, or ``tool-input-error`` when the arguments are
  not JSON) and ends the reply (``finish-step``, ``finish`` with the
  ``finishReason``). Only choice 0 is read (``n`` > 1 streams others).
- an Anthropic ``MessageStreamEvent`` (the object or its dict):
  ``message_start`` gives ``start`` (the message's id) and ``start-step``;
  the blocks ``text``, ``thinking``, ``redacted_thinking`` and ``tool_use``
  the parts (``content_block_start`` / ``_delta`` / ``_stop``; a
  ``signature_delta`` goes into the reasoning's
  ``providerMetadata.anthropic.signature``, a redacted block's data into
  ``providerMetadata.anthropic.redactedData``, as the AI SDK's Anthropic
  provider does; ``content_block_stop`` of a ``tool_use`` gives its parsed
  input); ``message_delta``'s ``stop_reason`` ends the reply. The SDK's own
  helper events (``text``, ``thinking``, ``input_json``, ``signature``,
  ``citation``: repeats of the raw deltas) and ``ping`` are skipped, and so
  are blocks of other types (server tools and their results).
- an AI SDK ``UIMessageChunk`` (a dict whose ``type`` is one of theirs):
  passed on as it is.

``message_id`` (optional) names the reply in place of the model's own id
(or of the ``messageId`` of the ``start`` chunks of a ``UIMessageChunk``
stream; one is put first when it has none).
The chunks are checked nowhere here: ``UIMessageState.check`` does that
(the converters give only chunks it takes, in the order it takes them).
Duck-typed (no SDK is imported) and pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

__all__ = ["UIChunks", "anthropic_finish_reason", "openai_finish_reason"]

#: The AI SDK's ``finishReason`` for OpenAI's ``finish_reason``.
_OPENAI_FINISH: Final = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}

#: The AI SDK's ``finishReason`` for Anthropic's ``stop_reason``.
_ANTHROPIC_FINISH: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "refusal": "content-filter",
}

#: The event types of Anthropic's raw stream.
_ANTHROPIC_EVENTS: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    }
)

#: What the SDK's ``MessageStream`` adds to the raw events (repeats of them).
_ANTHROPIC_HELPER_EVENTS: Final = frozenset(
    {"text", "thinking", "signature", "input_json", "citation"}
)

Kind = Literal["openai", "anthropic", "ui"]


def openai_finish_reason(reason: str) -> str:
    """The AI SDK's ``finishReason`` for OpenAI's ``finish_reason``."""
    return _OPENAI_FINISH.get(reason, "other")


def anthropic_finish_reason(reason: str) -> str:
    """The AI SDK's ``finishReason`` for Anthropic's ``stop_reason``."""
    return _ANTHROPIC_FINISH.get(reason, "other")


def _field(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def kind_of(item: Any) -> Kind:
    """Which stream ``item`` is of; ``TypeError`` when none."""
    kind = _field(item, "type")
    if isinstance(kind, str):
        if kind in _ANTHROPIC_EVENTS or kind in _ANTHROPIC_HELPER_EVENTS:
            return "anthropic"
        if isinstance(item, Mapping):
            return "ui"
    if _field(item, "choices") is not None or _field(item, "object") == "chat.completion.chunk":
        return "openai"
    raise TypeError(
        "an item of a reply's stream is an OpenAI ChatCompletionChunk, an Anthropic "
        f"stream event or an AI SDK UIMessageChunk (a dict with a type), not {item!r:.200}"
    )


def _parsed(arguments: str, call_id: str, name: str) -> dict[str, Any]:
    """``tool-input-available`` with the parsed input, else ``tool-input-error``."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        return {
            "type": "tool-input-error",
            "toolCallId": call_id,
            "toolName": name,
            "input": arguments,
            "errorText": f"the arguments are not JSON: {exc}",
        }
    return {"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": value}


class _OpenAICall:
    __slots__ = ("args", "id", "name", "started")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []
        self.started = False


class UIChunks:
    """A model's stream, item by item, as ``UIMessageChunk``s (see the module)."""

    def __init__(self, message_id: str | None = None) -> None:
        self.message_id = message_id
        #: The kind of stream, fixed by its first item.
        self.kind: Kind | None = None
        self.started = False
        self.finished = False
        # OpenAI: the open text or reasoning part, the tool calls by index.
        self._open: tuple[str, str] | None = None  # ("text" | "reasoning", id)
        self._parts = 0
        self._calls: dict[int, _OpenAICall] = {}
        # Anthropic: the blocks by index (kind, id, tool name, input fragments).
        self._blocks: dict[int, tuple[str, str, str, list[str]]] = {}

    def add(self, item: Any) -> list[dict[str, Any]]:
        """The chunks one item of the stream stands for (maybe none)."""
        kind = kind_of(item)
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TypeError(f"a stream of {self.kind} items holds an item of {kind}: {item!r:.200}")
        if kind == "ui":
            chunk = dict(item)
            out: list[dict[str, Any]] = []
            if self.message_id:
                if chunk["type"] == "start":
                    chunk["messageId"] = self.message_id
                elif not self.started:
                    out.append({"type": "start", "messageId": self.message_id})
            self.started = True
            return [*out, chunk]
        if kind == "openai":
            return self._openai(item)
        return self._anthropic(item)

    def end(self) -> list[dict[str, Any]]:
        """The chunks that close what the stream left open (none once it
        finished): the end of an OpenAI stream without a ``finish_reason``,
        of an Anthropic one without ``message_delta``."""
        if self.kind == "ui" or self.finished or not self.started:
            return []
        out: list[dict[str, Any]] = []
        if self.kind == "openai":
            return self._openai_finish(None)
        for index in sorted(self._blocks):
            out += self._block_stop(index)
        return out + self._finish(None)

    # -- both --

    def _start(self, model_id: Any) -> list[dict[str, Any]]:
        self.started = True
        message_id = self.message_id or (model_id if isinstance(model_id, str) else None)
        start: dict[str, Any] = {"type": "start"}
        if message_id:
            start["messageId"] = message_id
        return [start, {"type": "start-step"}]

    def _finish(self, reason: str | None) -> list[dict[str, Any]]:
        self.finished = True
        finish: dict[str, Any] = {"type": "finish"}
        if reason is not None:
            finish["finishReason"] = reason
        return [{"type": "finish-step"}, finish]

    # -- OpenAI --

    def _openai(self, item: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.started:
            out += self._start(_field(item, "id"))
        if self.finished:
            return out  # e.g. the usage chunk after the last one
        for choice in _field(item, "choices") or ():
            if (_field(choice, "index") or 0) != 0:
                continue
            delta = _field(choice, "delta")
            if delta is not None:
                reasoning = _field(delta, "reasoning_content") or _field(delta, "reasoning")
                if isinstance(reasoning, str) and reasoning:
                    out += self._openai_text("reasoning", reasoning)
                for key in ("content", "refusal"):
                    text = _field(delta, key)
                    if isinstance(text, str) and text:
                        out += self._openai_text("text", text)
                for call in _field(delta, "tool_calls") or ():
                    out += self._openai_call(call)
            reason = _field(choice, "finish_reason")
            if reason is not None:
                out += self._openai_finish(openai_finish_reason(str(reason)))
        return out

    def _openai_text(self, kind: str, text: str) -> list[dict[str, Any]]:
        out = []
        if self._open is None or self._open[0] != kind:
            out += self._openai_close()
            self._parts += 1
            self._open = (kind, f"{kind}-{self._parts}")
            out.append({"type": f"{kind}-start", "id": self._open[1]})
        out.append({"type": f"{kind}-delta", "id": self._open[1], "delta": text})
        return out

    def _openai_close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        kind, part_id = self._open
        self._open = None
        return [{"type": f"{kind}-end", "id": part_id}]

    def _openai_call(self, delta: Any) -> list[dict[str, Any]]:
        index = _field(delta, "index")
        if not isinstance(index, int):
            raise ValueError(f"a tool call delta has no integer index: {delta!r:.200}")
        call = self._calls.setdefault(index, _OpenAICall())
        out = self._openai_close()
        call_id = _field(delta, "id")
        if isinstance(call_id, str) and call_id and not call.id:
            call.id = call_id
        function = _field(delta, "function")
        arguments = ""
        if function is not None:
            name = _field(function, "name")
            if isinstance(name, str) and name and not call.started:
                call.name += name
            fragment = _field(function, "arguments")
            if isinstance(fragment, str):
                arguments = fragment
        if not call.started:
            call.args.append(arguments)
            if not (call.id and call.name):
                return out  # its id and name first
            call.started = True
            out.append({"type": "tool-input-start", "toolCallId": call.id, "toolName": call.name})
            arguments = "".join(call.args)
        else:
            call.args.append(arguments)
        if arguments:
            out.append(
                {"type": "tool-input-delta", "toolCallId": call.id, "inputTextDelta": arguments}
            )
        return out

    def _openai_finish(self, reason: str | None) -> list[dict[str, Any]]:
        out = self._openai_close()
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.started:
                missing = "an id" if not call.id else "a function name"
                raise ValueError(f"tool call {index} was streamed without {missing}")
            out.append(_parsed("".join(call.args), call.id, call.name))
        return out + self._finish(reason)

    # -- Anthropic --

    def _anthropic(self, item: Any) -> list[dict[str, Any]]:
        kind = _field(item, "type")
        if kind == "error":
            error = _field(item, "error")
            raise ValueError(f"the model's stream failed: {_field(error, 'message') or error!r}")
        if kind == "message_start":
            if self.started:
                return []
            return self._start(_field(_field(item, "message"), "id"))
        out: list[dict[str, Any]] = []
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            if not self.started:
                out += self._start(None)
            if self.finished:
                return out
            index = _field(item, "index")
            if not isinstance(index, int):
                raise ValueError(f"a {kind} event has no integer index: {item!r:.200}")
            if kind == "content_block_start":
                out += self._block_start(index, _field(item, "content_block"))
            elif kind == "content_block_delta":
                out += self._block_delta(index, _field(item, "delta"))
            else:
                out += self._block_stop(index)
        elif kind == "message_delta":
            reason = _field(_field(item, "delta"), "stop_reason")
            if reason is not None and self.started and not self.finished:
                for index in sorted(self._blocks):
                    out += self._block_stop(index)
                out += self._finish(anthropic_finish_reason(str(reason)))
        elif kind == "message_stop":
            out += self.end()
        return out  # ping, and the SDK's helper events: nothing new

    def _block_start(self, index: int, block: Any) -> list[dict[str, Any]]:
        kind = _field(block, "type")
        part_id = f"{index}"
        if kind == "text":
            self._blocks[index] = ("text", part_id, "", [])
            out: list[dict[str, Any]] = [{"type": "text-start", "id": part_id}]
            text = _field(block, "text")
            if isinstance(text, str) and text:
                out.append({"type": "text-delta", "id": part_id, "delta": text})
            return out
        if kind == "thinking":
            self._blocks[index] = ("reasoning", part_id, "", [])
            out = [{"type": "reasoning-start", "id": part_id}]
            text = _field(block, "thinking")
            if isinstance(text, str) and text:
                out.append({"type": "reasoning-delta", "id": part_id, "delta": text})
            signature = _field(block, "signature")
            if isinstance(signature, str) and signature:
                out.append(_signature(part_id, signature))
            return out
        if kind == "redacted_thinking":
            self._blocks[index] = ("reasoning", part_id, "", [])
            meta = {"anthropic": {"redactedData": _field(block, "data")}}
            return [{"type": "reasoning-start", "id": part_id, "providerMetadata": meta}]
        if kind == "tool_use":
            call_id, name = _field(block, "id"), _field(block, "name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ValueError(f"a tool_use block without an id or a name: {block!r:.200}")
            self._blocks[index] = ("tool", call_id, name, [])
            return [{"type": "tool-input-start", "toolCallId": call_id, "toolName": name}]
        return []  # server tools, their results: not parts a reply is written with here

    def _block_delta(self, index: int, delta: Any) -> list[dict[str, Any]]:
        block = self._blocks.get(index)
        if block is None:
            return []
        kind, part_id, _name, fragments = block
        delta_type = _field(delta, "type")
        if delta_type == "text_delta" and kind == "text":
            text = _field(delta, "text")
            if isinstance(text, str) and text:
                return [{"type": "text-delta", "id": part_id, "delta": text}]
        elif delta_type == "thinking_delta" and kind == "reasoning":
            text = _field(delta, "thinking")
            if isinstance(text, str) and text:
                return [{"type": "reasoning-delta", "id": part_id, "delta": text}]
        elif delta_type == "signature_delta" and kind == "reasoning":
            signature = _field(delta, "signature")
            if isinstance(signature, str):
                return [_signature(part_id, signature)]
        elif delta_type == "input_json_delta" and kind == "tool":
            fragment = _field(delta, "partial_json")
            if isinstance(fragment, str) and fragment:
                fragments.append(fragment)
                return [
                    {"type": "tool-input-delta", "toolCallId": part_id, "inputTextDelta": fragment}
                ]
        return []  # citations, and what a newer API adds

    def _block_stop(self, index: int) -> list[dict[str, Any]]:
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        kind, part_id, name, fragments = block
        if kind == "tool":
            return [_parsed("".join(fragments), part_id, name)]
        return [{"type": f"{kind}-end", "id": part_id}]


def _signature(part_id: str, signature: str) -> dict[str, Any]:
    return {
        "type": "reasoning-delta",
        "id": part_id,
        "delta": "",
        "providerMetadata": {"anthropic": {"signature": signature}},
    }
