"""A reply as the AI SDK streams it: ``UIMessageChunk``s folded into a ``UIMessage``.

``UIMessageState.apply`` folds the chunks of an AI SDK UI message stream
(``streamText(...).toUIMessageStream()``: ``text-start``/``-delta``/``-end``,
``reasoning-*``, ``tool-input-start``/``-delta``/``-available``,
``tool-output-*``, approvals, files, sources, ``data-*``, steps, metadata)
into the message they describe, exactly as the SDK's own
``readUIMessageStream`` does (held to it, chunk by chunk, by a test that runs
``ai`` from npm on the same chunks: tests/server/web/test_ui_stream_sdk.py).
``UIMessageState.chunks`` is the stream so far, compacted (a run of deltas
of one part is one delta, a data part updated by id is one chunk): what a
reader that joins late, or resumes, is sent instead of every token. Folded,
it gives the same message, and the live chunks go on from it (held to the SDK
on drawn streams cut anywhere).

The port keeps the SDK's notion of "absent" (JavaScript's ``undefined``) apart
from JSON ``null``: an absent key is left out of what ``message()`` returns.
A chunk the SDK would refuse (a delta for a part never started, a tool output
for an unknown call) raises ``UIStreamError`` and changes nothing.

Why one module of over 600 lines: it is a port of one function of the SDK
(``processUIMessageStream``'s fold, one branch per chunk type) with its
compacted log and the dry run of its checks, which must change together
with it; kept whole, it reads side by side with the SDK's source.

Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from protocol.partial_json import UNDEF, fix_json, parse_partial_json

__all__ = [
    "UIMessageState",
    "UIStreamError",
    "fix_json",
    "parse_partial_json",
]


class UIStreamError(ValueError):
    """A chunk that does not fit the stream so far (the SDK's ``UIMessageStreamError``)."""


def _get(mapping: Mapping[str, Any], key: str) -> Any:
    return mapping.get(key, UNDEF)


def _nullish(value: Any) -> bool:
    return value is None or value is UNDEF


def _coalesce(value: Any, fallback: Any) -> Any:
    """JavaScript's ``value ?? fallback``."""
    return fallback if _nullish(value) else value


def _strip(value: Any) -> Any:
    """A deep copy without the keys set to ``undefined`` (what JSON.stringify writes)."""
    if isinstance(value, Mapping):
        return {k: _strip(v) for k, v in value.items() if v is not UNDEF}
    if isinstance(value, list | tuple):
        return [None if v is UNDEF else _strip(v) for v in value]
    return value


def _is_object(value: Any) -> bool:
    return isinstance(value, Mapping)


def merge_objects(base: Any, overrides: Any) -> Any:
    """The SDK's ``mergeObjects``: a deep merge of plain objects."""
    if _nullish_undef(base) and _nullish_undef(overrides):
        return UNDEF
    if base is UNDEF:
        return overrides
    if overrides is UNDEF:
        return base
    result = dict(base)
    for key, value in overrides.items():
        if key in ("__proto__", "constructor", "prototype") or value is UNDEF:
            continue
        base_value = base.get(key, UNDEF)
        if _is_object(value) and _is_object(base_value):
            result[key] = merge_objects(base_value, value)
        else:
            result[key] = value
    return result


def _nullish_undef(value: Any) -> bool:
    return value is UNDEF


# --- the state ---------------------------------------------------------------


def _is_tool(part: Mapping[str, Any]) -> bool:
    kind = part["type"]
    return bool(kind.startswith("tool-") or kind == "dynamic-tool")


def _is_static_tool(part: Mapping[str, Any]) -> bool:
    return bool(part["type"].startswith("tool-"))


def _static_name(part: Mapping[str, Any]) -> str:
    return "-".join(part["type"].split("-")[1:])


_RESULT_STATES: Final = ("output-available", "output-error")


class UIMessageState:
    """One assistant ``UIMessage`` being streamed, as ``readUIMessageStream``
    builds it from the chunks (with ``resetStateOnMessageIdChange``)."""

    def __init__(self, message_id: str = "") -> None:
        self._reset(message_id)
        self.finish_reason: Any = UNDEF
        self._log: list[dict[str, Any]] = []
        # Where the delta that the next delta of a part joins sits in the log.
        self._text_runs: dict[Any, int] = {}
        self._reasoning_runs: dict[Any, int] = {}
        self._tool_runs: dict[Any, int] = {}
        self._data_at: dict[tuple[str, Any], int] = {}

    def _reset(self, message_id: str) -> None:
        self.msg: dict[str, Any] = {
            "id": message_id,
            "metadata": UNDEF,
            "role": "assistant",
            "parts": [],
        }
        self.active_text: dict[str, dict[str, Any]] = {}
        self.active_reasoning: dict[str, dict[str, Any]] = {}
        self.partial_tools: dict[str, dict[str, Any]] = {}

    @property
    def id(self) -> str:
        return str(self.msg["id"])

    @property
    def parts(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = self.msg["parts"]
        return parts

    def message(self) -> dict[str, Any]:
        """The message as the SDK shows it now (a copy, JSON-ready)."""
        message: dict[str, Any] = _strip(self.msg)
        return message

    def chunks(self) -> list[dict[str, Any]]:
        """The chunks so far, compacted: what a reader that joins late or
        resumes gets instead of every token. Folded (by the SDK or by this
        class) they give this state, and the writer's next chunks go on from
        them. Each run of deltas of one text, reasoning or tool input is one
        delta (a run ends where another chunk touches that part or a step
        begins); a ``data-*`` part updated by id is its first chunk with the
        last data; chunks that change nothing (``finish-step``, ``abort``,
        ``error``, transient data) are left out; a ``start`` with a new
        message id begins the log anew, as it begins the message."""
        return copy.deepcopy(self._log)

    # -- helpers, named as the SDK's --

    def _step_parts(self) -> list[dict[str, Any]]:
        parts = self.parts
        start = len(parts) - 1
        while start >= 0 and parts[start]["type"] != "step-start":
            start -= 1
        return parts[start + 1 :]

    def _tool_invocation(self, call_id: Any) -> dict[str, Any]:
        for part in self._step_parts():
            if _is_tool(part) and part.get("toolCallId") == call_id:
                return part
        earlier: dict[str, Any]
        for earlier in reversed(self.parts):
            if _is_tool(earlier) and earlier.get("toolCallId") == call_id:
                return earlier
        raise UIStreamError(f'No tool invocation found for tool call ID "{call_id}".')

    def _update_tool(
        self,
        options: dict[str, Any],
        existing: dict[str, Any] | None,
        *,
        dynamic: bool,
    ) -> None:
        part = existing
        if part is None:
            for candidate in self._step_parts():
                same_kind = (
                    candidate["type"] == "dynamic-tool" if dynamic else _is_static_tool(candidate)
                )
                if same_kind and candidate.get("toolCallId") == options["toolCallId"]:
                    part = candidate
                    break
        state = options["state"]
        provider_metadata = _get(options, "providerMetadata")
        if part is not None:
            part["state"] = state
            if dynamic:
                part["toolName"] = options["toolName"]
            else:
                part["type"] = f"tool-{options['toolName']}"
            part["input"] = _get(options, "input")
            part["output"] = _get(options, "output")
            part["errorText"] = _get(options, "errorText")
            part["rawInput"] = _get(options, "rawInput")
            if not _nullish(_get(options, "inputEncoding")):
                part["inputEncoding"] = options["inputEncoding"]
            else:
                part.pop("inputEncoding", None)
            part["preliminary"] = _get(options, "preliminary")
            if _get(options, "title") is not UNDEF:
                part["title"] = options["title"]
            if _get(options, "toolMetadata") is not UNDEF:
                part["toolMetadata"] = options["toolMetadata"]
            part["providerExecuted"] = _coalesce(
                _get(options, "providerExecuted"), part.get("providerExecuted", UNDEF)
            )
            if not _nullish(provider_metadata):
                key = (
                    "resultProviderMetadata" if state in _RESULT_STATES else "callProviderMetadata"
                )
                part[key] = provider_metadata
            return
        new: dict[str, Any] = {"type": "dynamic-tool", "toolName": options["toolName"]}
        if not dynamic:
            new = {"type": f"tool-{options['toolName']}"}
        new["toolCallId"] = options["toolCallId"]
        new["state"] = state
        new["title"] = _get(options, "title")
        if _get(options, "toolMetadata") is not UNDEF:
            new["toolMetadata"] = options["toolMetadata"]
        new["input"] = _get(options, "input")
        if not _nullish(_get(options, "inputEncoding")):
            new["inputEncoding"] = options["inputEncoding"]
        new["output"] = _get(options, "output")
        if not dynamic:  # the SDK's new dynamic part has no rawInput (until its next update)
            new["rawInput"] = _get(options, "rawInput")
        new["errorText"] = _get(options, "errorText")
        new["providerExecuted"] = _get(options, "providerExecuted")
        new["preliminary"] = _get(options, "preliminary")
        if not _nullish(provider_metadata):
            key = "resultProviderMetadata" if state in _RESULT_STATES else "callProviderMetadata"
            new[key] = provider_metadata
        self.parts.append(new)

    def _metadata(self, metadata: Any) -> bool:
        if _nullish(metadata):
            return False
        current = self.msg["metadata"]
        self.msg["metadata"] = (
            merge_objects(current, metadata) if not _nullish(current) else metadata
        )
        return True

    # -- the chunks --

    def apply(self, chunk: Mapping[str, Any]) -> bool:
        """Fold one chunk in (a copy of it: the caller's chunk is not kept).

        True when the SDK would show a new state of the message for it (its
        ``write()``): not for ``start-step`` (a step's first part shows it),
        ``finish-step``, ``abort``, ``error``, a transient data part, nor a
        ``start``, ``finish`` or ``message-metadata`` that changed nothing.
        """
        if not isinstance(chunk, Mapping) or not isinstance(chunk.get("type"), str):
            raise UIStreamError("a chunk is an object with a string type")
        kind: str = chunk["type"]
        for key in _REQUIRED.get(kind, ()):
            if not isinstance(chunk.get(key), str):
                raise UIStreamError(f"a {kind} chunk needs {key} (a string)")
        handler = _HANDLERS.get(kind)
        own: dict[str, Any] = copy.deepcopy(dict(chunk))
        if handler is not None:
            shown = handler(self, own) is not False
        elif kind.startswith("data-"):
            shown = self._data(own)
        else:
            # Any other type (abort, error and what a newer SDK adds) changes
            # nothing here, as in the SDK.
            return False
        self._keep(kind, own)
        return shown

    def _keep(self, kind: str, chunk: dict[str, Any]) -> None:
        """Add a chunk that was folded in to the compacted log."""
        log = self._log
        if kind in ("text-delta", "reasoning-delta", "tool-input-delta"):
            runs = (
                self._text_runs
                if kind == "text-delta"
                else self._reasoning_runs
                if kind == "reasoning-delta"
                else self._tool_runs
            )
            key = chunk.get("toolCallId") if kind == "tool-input-delta" else chunk.get("id")
            at = runs.get(key)
            if at is None:
                runs[key] = len(log)
                log.append(chunk)
                return
            field = "inputTextDelta" if kind == "tool-input-delta" else "delta"
            log[at][field] = log[at].get(field, "") + str(chunk.get(field, ""))
            if not _nullish(_get(chunk, "providerMetadata")):
                log[at]["providerMetadata"] = chunk["providerMetadata"]
            return
        if kind == "finish-step":
            return
        if kind.startswith("data-"):
            if chunk.get("transient"):
                return
            if not _nullish(_get(chunk, "id")):
                key = (kind, chunk["id"])
                at = self._data_at.get(key)
                if at is not None:
                    log[at]["data"] = _get(chunk, "data")
                    return
                self._data_at[key] = len(log)
            log.append(chunk)
            return
        if kind in ("text-start", "text-end"):
            self._text_runs.pop(chunk.get("id"), None)
        elif kind in ("reasoning-start", "reasoning-end"):
            self._reasoning_runs.pop(chunk.get("id"), None)
        elif "toolCallId" in chunk:
            self._tool_runs.pop(chunk["toolCallId"], None)
        else:
            # A step begins or ends, an approval answers some call, the
            # message begins anew: the next delta of a tool input starts a run.
            self._tool_runs.clear()
        if kind in ("reset-step", "start"):
            self._text_runs.clear()
            self._reasoning_runs.clear()
            self._data_at.clear()
        log.append(chunk)

    def apply_all(self, chunks: Iterable[Mapping[str, Any]]) -> bool:
        """Fold chunks in, in order; True when any would show a new state."""
        shown = False
        for chunk in chunks:
            shown = self.apply(chunk) or shown
        return shown

    def check(self, chunks: Sequence[Any]) -> None:
        """Raise ``UIStreamError`` (saying which chunk and why) when one of
        ``chunks``, folded in after those before it, would be refused;
        changes nothing. So a writer's batch of chunks is taken whole or not
        at all: ``apply_all`` of checked chunks does not raise."""
        _Dry(self).run(chunks)

    def _text_start(self, chunk: dict[str, Any]) -> None:
        part = {
            "type": "text",
            "text": "",
            "providerMetadata": _get(chunk, "providerMetadata"),
            "state": "streaming",
        }
        self.active_text[chunk["id"]] = part
        self.parts.append(part)

    def _text_delta(self, chunk: dict[str, Any]) -> None:
        part = self.active_text.get(chunk.get("id"))  # type: ignore[arg-type]
        if part is None:
            raise UIStreamError(
                f'Received text-delta for missing text part with ID "{chunk.get("id")}".'
            )
        part["text"] += str(chunk.get("delta", ""))
        part["providerMetadata"] = _coalesce(
            _get(chunk, "providerMetadata"), part["providerMetadata"]
        )

    def _text_end(self, chunk: dict[str, Any]) -> None:
        part = self.active_text.get(chunk.get("id"))  # type: ignore[arg-type]
        if part is None:
            raise UIStreamError(
                f'Received text-end for missing text part with ID "{chunk.get("id")}".'
            )
        part["state"] = "done"
        if not _nullish(_get(chunk, "citations")):
            part["citations"] = chunk["citations"]
        part["providerMetadata"] = _coalesce(
            _get(chunk, "providerMetadata"), part["providerMetadata"]
        )
        del self.active_text[chunk["id"]]

    def _custom(self, chunk: dict[str, Any]) -> None:
        self.parts.append(
            {
                "type": "custom",
                "kind": chunk.get("kind"),
                "providerMetadata": _get(chunk, "providerMetadata"),
            }
        )

    def _reasoning_start(self, chunk: dict[str, Any]) -> None:
        part = {
            "type": "reasoning",
            "id": chunk.get("id"),
            "text": "",
            "providerMetadata": _get(chunk, "providerMetadata"),
            "state": "streaming",
        }
        self.active_reasoning[chunk["id"]] = part
        self.parts.append(part)

    def _reasoning_delta(self, chunk: dict[str, Any]) -> None:
        part = self.active_reasoning.get(chunk.get("id"))  # type: ignore[arg-type]
        if part is None:
            raise UIStreamError(
                f'Received reasoning-delta for missing reasoning part with ID "{chunk.get("id")}".'
            )
        part["text"] += str(chunk.get("delta", ""))
        part["providerMetadata"] = _coalesce(
            _get(chunk, "providerMetadata"), part["providerMetadata"]
        )

    def _reasoning_end(self, chunk: dict[str, Any]) -> None:
        part = self.active_reasoning.get(chunk.get("id"))  # type: ignore[arg-type]
        if part is None:
            raise UIStreamError(
                f'Received reasoning-end for missing reasoning part with ID "{chunk.get("id")}".'
            )
        part["providerMetadata"] = _coalesce(
            _get(chunk, "providerMetadata"), part["providerMetadata"]
        )
        part["state"] = "done"
        del self.active_reasoning[chunk["id"]]

    def _file(self, chunk: dict[str, Any]) -> None:
        part = {"type": chunk["type"], "mediaType": chunk.get("mediaType"), "url": chunk.get("url")}
        if not _nullish(_get(chunk, "providerMetadata")):
            part["providerMetadata"] = chunk["providerMetadata"]
        self.parts.append(part)

    def _source_url(self, chunk: dict[str, Any]) -> None:
        self.parts.append(
            {
                "type": "source-url",
                "sourceId": chunk.get("sourceId"),
                "url": chunk.get("url"),
                "title": _get(chunk, "title"),
                "providerMetadata": _get(chunk, "providerMetadata"),
            }
        )

    def _source_document(self, chunk: dict[str, Any]) -> None:
        self.parts.append(
            {
                "type": "source-document",
                "sourceId": chunk.get("sourceId"),
                "mediaType": chunk.get("mediaType"),
                "title": chunk.get("title"),
                "filename": _get(chunk, "filename"),
                "providerMetadata": _get(chunk, "providerMetadata"),
            }
        )

    def _tool_input_start(self, chunk: dict[str, Any]) -> None:
        statics = [p for p in self._step_parts() if _is_static_tool(p)]
        dynamic = bool(_get(chunk, "dynamic"))
        self.partial_tools[chunk["toolCallId"]] = {
            "text": "",
            "inputEncoding": _get(chunk, "inputEncoding"),
            "toolName": chunk.get("toolName"),
            "index": len(statics),
            "dynamic": dynamic,
            "title": _get(chunk, "title"),
            "toolMetadata": _get(chunk, "toolMetadata"),
        }
        self._update_tool(
            {
                "toolCallId": chunk["toolCallId"],
                "toolName": chunk.get("toolName"),
                "state": "input-streaming",
                "inputEncoding": _get(chunk, "inputEncoding"),
                "input": UNDEF,
                "providerExecuted": _get(chunk, "providerExecuted"),
                "title": _get(chunk, "title"),
                "toolMetadata": _get(chunk, "toolMetadata"),
                "providerMetadata": _get(chunk, "providerMetadata"),
            },
            None,
            dynamic=dynamic,
        )

    def _tool_input_delta(self, chunk: dict[str, Any]) -> None:
        partial = self.partial_tools.get(chunk.get("toolCallId"))  # type: ignore[arg-type]
        if partial is None:
            raise UIStreamError(
                "Received tool-input-delta for missing tool call with ID"
                f' "{chunk.get("toolCallId")}".'
            )
        partial["text"] += str(chunk.get("inputTextDelta", ""))
        args = (
            partial["text"]
            if partial["inputEncoding"] == "text"
            else parse_partial_json(partial["text"])
        )
        self._update_tool(
            {
                "toolCallId": chunk["toolCallId"],
                "toolName": partial["toolName"],
                "state": "input-streaming",
                "inputEncoding": partial["inputEncoding"],
                "input": args,
                "rawInput": partial["text"],
                "title": partial["title"],
                "toolMetadata": partial["toolMetadata"],
            },
            None,
            dynamic=partial["dynamic"],
        )

    def _tool_input_available(self, chunk: dict[str, Any]) -> None:
        self._update_tool(
            {
                "toolCallId": chunk["toolCallId"],
                "toolName": chunk.get("toolName"),
                "state": "input-available",
                "input": _get(chunk, "input"),
                "providerExecuted": _get(chunk, "providerExecuted"),
                "providerMetadata": _get(chunk, "providerMetadata"),
                "title": _get(chunk, "title"),
                "toolMetadata": _get(chunk, "toolMetadata"),
            },
            None,
            dynamic=bool(_get(chunk, "dynamic")),
        )

    def _tool_input_error(self, chunk: dict[str, Any]) -> None:
        existing = next(
            (
                p
                for p in self._step_parts()
                if _is_tool(p) and p.get("toolCallId") == chunk.get("toolCallId")
            ),
            None,
        )
        dynamic = existing["type"] == "dynamic-tool" if existing else bool(_get(chunk, "dynamic"))
        self._update_tool(
            {
                "toolCallId": chunk["toolCallId"],
                "toolName": chunk.get("toolName"),
                "state": "output-error",
                "input": _get(chunk, "input"),
                "errorText": _get(chunk, "errorText"),
                "providerExecuted": _get(chunk, "providerExecuted"),
                "providerMetadata": _get(chunk, "providerMetadata"),
                "toolMetadata": _get(chunk, "toolMetadata"),
            },
            None,
            dynamic=dynamic,
        )

    def _approval_request(self, chunk: dict[str, Any]) -> None:
        part = self._tool_invocation(chunk.get("toolCallId"))
        part["state"] = "approval-requested"
        approval: dict[str, Any] = {"id": chunk.get("approvalId")}
        if not _nullish(_get(chunk, "approvalDescriptor")):
            approval["descriptor"] = chunk["approvalDescriptor"]
        if "inputSchemaInput" in chunk:
            approval["inputSchemaInput"] = chunk["inputSchemaInput"]
        if not _nullish(_get(chunk, "reason")):
            approval["requestReason"] = chunk["reason"]
        if chunk.get("isAutomatic") is True:
            approval["isAutomatic"] = True
        if not _nullish(_get(chunk, "signature")):
            approval["signature"] = chunk["signature"]
        part["approval"] = approval

    def _approval_response(self, chunk: dict[str, Any]) -> None:
        approval_id = chunk.get("approvalId")
        part = next(
            (
                p
                for p in self.parts
                if _is_tool(p)
                and isinstance(p.get("approval"), Mapping)
                and p["approval"].get("id") == approval_id
            ),
            None,
        )
        if part is None:
            raise UIStreamError(f'No tool invocation found for approval ID "{approval_id}".')
        approval = dict(part.get("approval") or {"id": approval_id})
        approval["id"] = approval_id
        approval["approved"] = chunk.get("approved")
        if not _nullish(_get(chunk, "reason")):
            approval["reason"] = chunk["reason"]
        part["state"] = "approval-responded"
        part["approval"] = approval
        if not _nullish(_get(chunk, "providerExecuted")):
            part["providerExecuted"] = chunk["providerExecuted"]
        if not _nullish(_get(chunk, "providerMetadata")):
            part["callProviderMetadata"] = chunk["providerMetadata"]

    def _output_denied(self, chunk: dict[str, Any]) -> None:
        self._tool_invocation(chunk.get("toolCallId"))["state"] = "output-denied"

    def _output(self, chunk: dict[str, Any], state: str) -> None:
        part = self._tool_invocation(chunk.get("toolCallId"))
        dynamic = part["type"] == "dynamic-tool"
        options: dict[str, Any] = {
            "toolCallId": chunk["toolCallId"],
            "toolName": part["toolName"] if dynamic else _static_name(part),
            "state": state,
            "input": part.get("input", UNDEF),
            "providerExecuted": _get(chunk, "providerExecuted"),
            "providerMetadata": _get(chunk, "providerMetadata"),
            "title": part.get("title", UNDEF),
            "toolMetadata": _coalesce(_get(chunk, "toolMetadata"), part.get("toolMetadata", UNDEF)),
        }
        if state == "output-available":
            options["output"] = _get(chunk, "output")
            options["preliminary"] = _get(chunk, "preliminary")
        else:
            options["errorText"] = _get(chunk, "errorText")
            if not dynamic:
                options["rawInput"] = part.get("rawInput", UNDEF)
        self._update_tool(options, part, dynamic=dynamic)

    def _steering(self, chunk: dict[str, Any]) -> None:
        self.parts.append(
            {"type": "steering-message", "id": chunk.get("id"), "parts": chunk.get("parts")}
        )

    def _start_step(self, chunk: dict[str, Any]) -> bool:
        self.parts.append({"type": "step-start"})
        return False

    def _reset_step(self, chunk: dict[str, Any]) -> bool:
        step = self._step_parts()
        self.active_text = {}
        self.active_reasoning = {}
        self.partial_tools = {}
        if step:
            del self.parts[len(self.parts) - len(step) :]
        return bool(step)

    def _start(self, chunk: dict[str, Any]) -> bool:
        message_id = _get(chunk, "messageId")
        if not _nullish(message_id) and message_id != self.msg["id"]:
            self._reset(message_id)
            self.finish_reason = UNDEF
            self._log.clear()  # the message begins anew, and so does its log
        if not _nullish(message_id):
            self.msg["id"] = message_id
        return self._metadata(_get(chunk, "messageMetadata")) or not _nullish(message_id)

    def _finish(self, chunk: dict[str, Any]) -> bool:
        if not _nullish(_get(chunk, "finishReason")):
            self.finish_reason = chunk["finishReason"]
        return self._metadata(_get(chunk, "messageMetadata"))

    def _message_metadata(self, chunk: dict[str, Any]) -> bool:
        return self._metadata(_get(chunk, "messageMetadata"))

    def _data(self, chunk: dict[str, Any]) -> bool:
        if chunk.get("transient"):
            return False
        chunk_id = _get(chunk, "id")
        if not _nullish(chunk_id):
            for part in self.parts:
                if part["type"] == chunk["type"] and part.get("id", UNDEF) == chunk_id:
                    part["data"] = _get(chunk, "data")
                    return True
        self.parts.append(chunk)
        return True


_HANDLERS: Final[dict[str, Callable[[UIMessageState, dict[str, Any]], bool | None]]] = {
    "text-start": UIMessageState._text_start,
    "text-delta": UIMessageState._text_delta,
    "text-end": UIMessageState._text_end,
    "custom": UIMessageState._custom,
    "reasoning-start": UIMessageState._reasoning_start,
    "reasoning-delta": UIMessageState._reasoning_delta,
    "reasoning-end": UIMessageState._reasoning_end,
    "file": UIMessageState._file,
    "reasoning-file": UIMessageState._file,
    "source-url": UIMessageState._source_url,
    "source-document": UIMessageState._source_document,
    "tool-input-start": UIMessageState._tool_input_start,
    "tool-input-delta": UIMessageState._tool_input_delta,
    "tool-input-available": UIMessageState._tool_input_available,
    "tool-input-error": UIMessageState._tool_input_error,
    "tool-approval-request": UIMessageState._approval_request,
    "tool-approval-response": UIMessageState._approval_response,
    "tool-output-denied": UIMessageState._output_denied,
    "tool-output-available": lambda s, c: s._output(c, "output-available"),
    "tool-output-error": lambda s, c: s._output(c, "output-error"),
    "steering-message": UIMessageState._steering,
    "start-step": UIMessageState._start_step,
    "reset-step": UIMessageState._reset_step,
    "start": UIMessageState._start,
    "finish": UIMessageState._finish,
    "message-metadata": UIMessageState._message_metadata,
}


#: The fields each chunk type must carry as strings (the SDK's schema; the
#: fold reads them).
_REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "text-start": ("id",),
    "text-delta": ("id", "delta"),
    "text-end": ("id",),
    "reasoning-start": ("id",),
    "reasoning-delta": ("id", "delta"),
    "reasoning-end": ("id",),
    "custom": ("kind",),
    "error": ("errorText",),
    "tool-input-start": ("toolCallId", "toolName"),
    "tool-input-delta": ("toolCallId", "inputTextDelta"),
    "tool-input-available": ("toolCallId", "toolName"),
    "tool-input-error": ("toolCallId", "toolName", "errorText"),
    "tool-approval-request": ("approvalId", "toolCallId"),
    "tool-approval-response": ("approvalId",),
    "tool-output-available": ("toolCallId",),
    "tool-output-error": ("toolCallId", "errorText"),
    "tool-output-denied": ("toolCallId",),
    "source-url": ("sourceId", "url"),
    "source-document": ("sourceId", "mediaType", "title"),
    "file": ("url", "mediaType"),
    "reasoning-file": ("url", "mediaType"),
    "steering-message": ("id",),
}


class _Dry:
    """What ``UIMessageState.apply`` checks, followed through a batch of
    chunks without changing the state: the open texts, reasonings and tool
    inputs, and the tool calls and approvals there are (all, and in the
    current step)."""

    def __init__(self, state: UIMessageState) -> None:
        self.message_id = state.msg["id"]
        self.texts = set(state.active_text)
        self.reasonings = set(state.active_reasoning)
        self.partials = set(state.partial_tools)
        self.calls: Counter[Any] = Counter()
        self.approvals: Counter[Any] = Counter()
        self.step_calls: list[Any] = []
        self.step_approvals: list[Any] = []
        for part in state.parts:
            if part["type"] == "step-start":
                self.step_calls, self.step_approvals = [], []
            elif _is_tool(part):
                self._add_call(part.get("toolCallId"))
                approval = part.get("approval")
                if isinstance(approval, Mapping):
                    self.approvals[approval.get("id")] += 1
                    self.step_approvals.append(approval.get("id"))

    def _add_call(self, call: Any) -> None:
        self.calls[call] += 1
        self.step_calls.append(call)

    def run(self, chunks: Sequence[Any]) -> None:
        for index, chunk in enumerate(chunks):
            try:
                self._one(chunk)
            except UIStreamError as exc:
                raise UIStreamError(f"chunk {index}: {exc}") from None

    def _one(self, chunk: Any) -> None:
        if not isinstance(chunk, Mapping) or not isinstance(chunk.get("type"), str):
            raise UIStreamError("a chunk is an object with a string type")
        kind = chunk["type"]
        for key in _REQUIRED.get(kind, ()):
            if not isinstance(chunk.get(key), str):
                raise UIStreamError(f"a {kind} chunk needs {key} (a string)")
        if kind == "tool-approval-response" and not isinstance(chunk.get("approved"), bool):
            raise UIStreamError("a tool-approval-response chunk needs approved (true or false)")
        if kind.startswith("data-") and "data" not in chunk:
            raise UIStreamError(f"a {kind} chunk needs data")
        if kind == "text-start":
            self.texts.add(chunk["id"])
        elif kind in ("text-delta", "text-end"):
            if chunk["id"] not in self.texts:
                raise UIStreamError(f'{kind} for missing text part with ID "{chunk["id"]}"')
            if kind == "text-end":
                self.texts.discard(chunk["id"])
        elif kind == "reasoning-start":
            self.reasonings.add(chunk["id"])
        elif kind in ("reasoning-delta", "reasoning-end"):
            if chunk["id"] not in self.reasonings:
                raise UIStreamError(f'{kind} for missing reasoning part with ID "{chunk["id"]}"')
            if kind == "reasoning-end":
                self.reasonings.discard(chunk["id"])
        elif kind == "tool-input-start":
            self.partials.add(chunk["toolCallId"])
            self._ensure_in_step(chunk["toolCallId"])
        elif kind == "tool-input-delta":
            if chunk["toolCallId"] not in self.partials:
                raise UIStreamError(
                    f'tool-input-delta for missing tool call with ID "{chunk["toolCallId"]}"'
                )
            self._ensure_in_step(chunk["toolCallId"])
        elif kind in ("tool-input-available", "tool-input-error"):
            self._ensure_in_step(chunk["toolCallId"])
        elif kind in (
            "tool-approval-request",
            "tool-output-available",
            "tool-output-error",
            "tool-output-denied",
        ):
            if not self.calls[chunk["toolCallId"]]:
                raise UIStreamError(
                    f'no tool invocation found for tool call ID "{chunk["toolCallId"]}"'
                )
            if kind == "tool-approval-request":
                self.approvals[chunk["approvalId"]] += 1
                if chunk["toolCallId"] in self.step_calls:
                    self.step_approvals.append(chunk["approvalId"])
        elif kind == "tool-approval-response":
            if not self.approvals[chunk["approvalId"]]:
                raise UIStreamError(
                    f'no tool invocation found for approval ID "{chunk["approvalId"]}"'
                )
        elif kind == "start-step":
            self.step_calls, self.step_approvals = [], []
        elif kind == "reset-step":
            self.calls.subtract(self.step_calls)
            self.approvals.subtract(self.step_approvals)
            self.step_calls, self.step_approvals = [], []
            self.texts.clear()
            self.reasonings.clear()
            self.partials.clear()
        elif kind == "start":
            message_id = chunk.get("messageId")
            if message_id is not None and message_id != self.message_id:
                self.message_id = message_id
                self.texts.clear()
                self.reasonings.clear()
                self.partials.clear()
                self.calls.clear()
                self.approvals.clear()
                self.step_calls, self.step_approvals = [], []

    def _ensure_in_step(self, call: Any) -> None:
        # The fold updates the call's part in the current step, else adds one.
        if call not in self.step_calls:
            self._add_call(call)
