"""Reading a model's stream for a draft: the text and tool calls of OpenAI-style
streaming chunks (``chunk_text``, ``StreamedCalls``), a stream read sync or
async (``iterate_chunks``), and in batches of what arrived while the last was
being sent (``batches``), closing what is read no further.

Used by ``client_py.client.Client.stream`` and ``stream_reply``; split from
``client_py.drafts`` (the writers) so that each reads as one job.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterable,
    Mapping,
)
from typing import TYPE_CHECKING, Any

from client_py.errors import ClientError

if TYPE_CHECKING:
    pass


if TYPE_CHECKING:
    from client_py.drafts import DraftWriter

__all__ = ["StreamedCalls", "batches", "chunk_text", "iterate_chunks"]


def chunk_text(chunk: Any) -> str | None:
    """The text of one streamed chunk: a ``str`` itself, or an OpenAI-style
    streaming chunk (an object or a dict) with ``choices[0].delta.content``
    (``None`` when it carries no text, e.g. the last chunk or a tool call's).
    Duck-typed: no LLM SDK is needed. Raises ``TypeError`` for anything else."""
    if isinstance(chunk, str):
        return chunk
    try:
        choices = chunk["choices"] if isinstance(chunk, Mapping) else chunk.choices
        if not choices:
            return None  # e.g. a usage-only chunk
        delta = choices[0]["delta"] if isinstance(choices[0], Mapping) else choices[0].delta
        content = delta.get("content") if isinstance(delta, Mapping) else delta.content
    except (AttributeError, KeyError, IndexError, TypeError):
        raise TypeError(
            f"a chunk is a str or has choices[0].delta.content, not {type(chunk).__name__}"
        ) from None
    if content is not None and not isinstance(content, str):
        raise TypeError(f"choices[0].delta.content is {type(content).__name__}, not str")
    return content


async def iterate_chunks(chunks: AsyncIterable[object] | Iterable[object]) -> AsyncIterator[object]:
    """Yield the chunks of an async or a plain iterable."""
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


class StreamedCalls:
    """What an OpenAI chunk stream says besides ``delta.content``, gathered
    for the message it is committed as (``Client.stream``): the
    ``delta.tool_calls`` fragments (by ``index``: the ``id``, the
    ``function.name`` and the ``function.arguments`` pieces, joined in
    order) and the ``delta.refusal`` text. ``add`` returns the refusal text
    of a chunk (the draft shows it: it is what the model said); ``fields``
    the ``tool_calls`` and ``metadata.refusal`` to commit, or raises
    ``ClientError`` when the stream holds what a message cannot carry (a
    legacy ``function_call``, a tool call without an id or a name, or of a
    type other than ``function``): never an empty message in its place."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}
        self._refusal: list[str] = []

    def add(self, chunk: Any) -> str | None:
        if isinstance(chunk, str):
            return None
        choices = _field(chunk, "choices")
        if not choices:
            return None
        delta = _field(choices[0], "delta")
        if delta is None:
            return None
        if _field(delta, "function_call") is not None:
            raise ClientError(
                "the stream holds a legacy function_call delta, which a message cannot "
                "carry: ask for tools (tool_calls) instead"
            )
        for call in _field(delta, "tool_calls") or ():
            self._add_call(call)
        refusal = _field(delta, "refusal")
        if refusal is None:
            return None
        if not isinstance(refusal, str):
            raise TypeError(f"choices[0].delta.refusal is {type(refusal).__name__}, not str")
        self._refusal.append(refusal)
        return refusal

    def _add_call(self, delta: Any) -> None:
        index = _field(delta, "index")
        if not isinstance(index, int):
            raise ClientError(f"a tool call delta has no integer index: {delta!r:.200}")
        call = self._calls.setdefault(index, {"id": "", "type": "function", "name": "", "args": []})
        kind = _field(delta, "type")
        if kind is not None and kind != "function":
            raise ClientError(
                f"tool call {index} is of type {kind!r}: only function calls can be carried"
            )
        call_id = _field(delta, "id")
        if call_id:
            if call["id"] and call["id"] != call_id:
                raise ClientError(f"tool call {index} has two ids: {call['id']!r}, {call_id!r}")
            call["id"] = call_id
        function = _field(delta, "function")
        if function is not None:
            name = _field(function, "name")
            if name:
                call["name"] += name
            arguments = _field(function, "arguments")
            if arguments:
                call["args"].append(arguments)

    def fields(self) -> dict[str, Any]:
        """The ``tool_calls`` (in index order) and ``metadata`` to commit."""
        out: dict[str, Any] = {}
        calls: list[dict[str, Any]] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call["id"] or not call["name"]:
                missing = "an id" if not call["id"] else "a function name"
                raise ClientError(
                    f"tool call {index} was streamed without {missing}: it cannot be committed"
                )
            calls.append(
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["args"])},
                }
            )
        if calls:
            out["tool_calls"] = calls
        if self._refusal:
            out["metadata"] = {"refusal": "".join(self._refusal)}
        return out


async def _close_stream(stream: object) -> None:
    """Close a model's stream read no further (an async generator's
    ``aclose``, the SDKs' ``AsyncStream.close``): the model stops writing."""
    for name in ("aclose", "close"):
        close = getattr(stream, name, None)
        if callable(close):
            with contextlib.suppress(Exception):
                result = close()
                if inspect.isawaitable(result):
                    await result
            return


async def batches(
    stream: AsyncIterable[object] | Iterable[object], writer: DraftWriter
) -> AsyncGenerator[list[object], None]:
    """The items of a model's stream in batches: each batch is every item
    that arrived while the one before was being sent (so a fast stream costs
    fewer ops, and a slow one one op per item). An async iterable is read by
    a task of its own; a plain iterable one item at a time, in the loop (as
    ``Client.stream`` reads it). Ends at once, without the items read
    meanwhile, when the writer ends (a reader stopped the reply, a refusal):
    the model's stream is closed and read no further. Use it with
    ``contextlib.aclosing``."""
    if not isinstance(stream, AsyncIterable):
        for item in stream:
            if writer.state != "open":
                return
            yield [item]
        return
    queue: asyncio.Queue[tuple[str, object]] = asyncio.Queue()

    async def read() -> None:
        try:
            async for item in stream:
                queue.put_nowait(("item", item))
        except Exception as exc:
            queue.put_nowait(("error", exc))
        else:
            queue.put_nowait(("end", None))

    reader = asyncio.create_task(read(), name="tsync-reply-reader")
    writer.on_end = lambda: queue.put_nowait(("ended", None))
    finished = False
    try:
        while True:
            entries = [await queue.get()]
            while not queue.empty():
                entries.append(queue.get_nowait())
            batch: list[object] = []
            for kind, value in entries:
                if kind == "item":
                    batch.append(value)
                elif kind == "error":
                    assert isinstance(value, Exception)
                    raise value
                elif kind == "ended":
                    return
                else:
                    finished = True
            if batch:
                yield batch
            if finished:
                return
    finally:
        writer.on_end = None
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if not finished:
            await _close_stream(stream)
