"""``Client``: one WebSocket connection, kept up, and the mirrors it feeds.

One task (the runner) owns the connection. It connects (again and again,
with exponential backoff and full jitter) and re-sends the calls that are
still waiting; everything else a consumer must decide is the consumer core's
(``protocol.consumer.Consumer``): the runner hands it every message and
sends the ops it asks for (resubscribes from each copy's revision and epoch,
barrier pings), then acts on its updates (an event applied to a mirror's
copy, a baseline that replaced it, a subscription stopped, the answer to a
call). Nothing the server sends is trusted blindly: gaps, repeats, foreign
frames, new epochs and events that do not fit the copy are repaired as the
contract says.

Calls (``append``, ``start_segment``, ``ping``) carry a ``ref``; their answer
is matched by it. An append always carries an idempotency key (a fresh uuid4
when the caller gave none), so re-sending it after a lost connection or a
lost frame lands it exactly once.

Drafts (``client_py.drafts``): ``client.draft`` opens a writer, ``client.stream``
writes one from chunks and commits it; on every new connection the client
sends the whole text of each open writer before re-sending its calls.

Why one module of over 600 lines: the client's public API is one class (connect,
reconnect with backoff, calls matched by ``ref``, subscriptions and their mirrors) whose
state is shared by every method; the mirror, drafts and HTTP halves are modules of their
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import websockets
from websockets.asyncio.client import ClientConnection

from client_py.drafts import DraftWriter
from client_py.errors import (
    ClientClosed,
    Disconnected,
    RequestTimeout,
    ServerError,
    Unreachable,
    error_for,
    error_from_frame,
)
from client_py.http import Ack, Created, HttpApi, sdk_plain
from client_py.mirror import Mirror
from client_py.model_streams import StreamedCalls, batches, chunk_text, iterate_chunks
from client_py.tokens import TokenProvider
from client_py.ui_chunks import UIChunks
from protocol import codes, wire
from protocol.consumer import (
    Answered,
    Applied,
    Consumer,
    DraftClosed,
    DraftUpdated,
    ErrorReceived,
    FramesLost,
    InvalidFrameReceived,
    PresenceChanged,
    Replaced,
    Resubscribed,
    Stopped,
    Update,
)
from protocol.continuity import SeqCounters, SeqTracker
from protocol.limits import MAX_PRESENCE_STATE_BYTES
from protocol.types import Role, TranscriptSnapshot
from protocol.views import Window

__all__ = ["Client", "ClientCounters", "connect"]

log = logging.getLogger("tsync.client")
#: The ref of the ping each connection starts with; its pong means "connected".
_HELLO = "hello"


@dataclass(frozen=True, slots=True)
class ClientCounters:
    """What the client's connection has been through (mirrors count the rest).

    ``connections``: connections opened; ``reconnects``: those after the
    first; ``seq``: the ``SeqTracker`` verdicts over every connection;
    ``invalid_frames``: frames ``accept_transcript_update`` refused;
    ``resent``: calls sent again after a lost connection or a ``seq`` gap.
    """

    connections: int
    reconnects: int
    seq: SeqCounters
    invalid_frames: int
    resent: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "connections": self.connections,
            "reconnects": self.reconnects,
            "seq": self.seq.as_dict(),
            "invalid_frames": self.invalid_frames,
            "resent": self.resent,
        }


_CallOp = (
    wire.Append
    | wire.StartSegment
    | wire.SetView
    | wire.LeaveView
    | wire.Draft
    | wire.Ping
    | wire.Auth
)


@dataclass(slots=True)
class _Call:
    """A call waiting for its answer. ``sent_on`` is the connection number it was
    last sent on; ``retry`` says whether it may be sent again on another one."""

    op: _CallOp
    future: asyncio.Future[wire.ServerFrame]
    retry: bool
    sent_on: int = 0


@contextlib.asynccontextmanager
async def connect(
    url: str, token: str | TokenProvider | None = None, **options: Any
) -> AsyncIterator[Client]:
    """Open a ``Client`` (see its options), wait for its first connection, and
    close it on exit. ``url`` is ``ws://host:port/v1/ws`` or an ``http(s)``
    base URL; ``token`` a bearer token or an async function that returns a
    fresh one. Raises ``Unreachable`` when no connection is made in
    ``connect_timeout`` seconds, ``Unauthorized`` when the server refuses
    the credentials."""
    client = Client(url, token, **options)
    try:
        await client.start()
        yield client
    finally:
        await client.aclose()


class Client:
    """The async client. Prefer ``async with connect(url) as client``.

    Options: ``connect_timeout`` (first connection), ``request_timeout``
    (default per call), ``backoff_min``/``backoff_max`` (reconnect delays:
    full jitter over ``min(backoff_max, backoff_min * 2**attempt)``),
    ``heartbeat`` (seconds between ``ping`` ops; a pong carries a ``seq``,
    so a frame lost at the end of a burst is noticed; ``None`` disables),
    ``open_timeout`` (per connection attempt), ``seed`` (for the jitter).

    Credentials: ``token`` is a bearer token, or an async function that
    returns a fresh one (a token provider). With a provider the client asks
    for a new token before the current one expires (a JWT's ``exp``) and
    hands it to the server on the open connection (the ``auth`` op), and
    asks again when the server closes with 4001 (credentials refused or
    expired); without one, or when the provider's token is refused as well,
    the client stops with ``Unauthorized``. A close that says "retry" (1001,
    1011, 1012, 1013, 4008, 4010) reconnects with backoff; one that says "not
    before fixing the cause" (1007, 1008, 1009) stops it with a ``ServerError``.
    """

    def __init__(
        self,
        url: str,
        token: str | TokenProvider | None = None,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float = 10.0,
        backoff_min: float = 0.1,
        backoff_max: float = 5.0,
        heartbeat: float | None = 5.0,
        open_timeout: float = 5.0,
        seed: int | None = None,
    ) -> None:
        self.http = HttpApi(url, token, timeout=request_timeout)
        self.ws_url = self.http.ws_url
        #: The bearer token and where new ones come from (shared with ``http``).
        self.tokens = self.http.tokens
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.heartbeat = heartbeat
        self.open_timeout = open_timeout
        self.mirrors: dict[str, Mirror] = {}
        #: The consumer core: seq, continuity and every mirror's copy.
        self.core = Consumer()
        self._random = random.Random(seed)
        self._calls: dict[str, _Call] = {}
        self._refs = itertools.count(1)
        self._ws: ClientConnection | None = None
        self._connection = 0  # number of the current connection (0: none yet)
        self._connected = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._fatal: ServerError | None = None
        self._last_error: BaseException | None = None
        self._closed = False
        self._resent = 0
        #: The open draft writers, by (transcript id, draft id).
        self._writers: dict[tuple[str, str], DraftWriter] = {}

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, *, wait: bool = True) -> None:
        """Start the runner; with ``wait``, return once connected (or raise
        ``Unreachable``/``Unauthorized``)."""
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name=f"tsync-client {self.ws_url}")
        if not wait:
            return
        waiter = asyncio.create_task(self._connected.wait())
        try:
            await asyncio.wait(
                {waiter, self._runner},
                timeout=self.connect_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
        if self._fatal is not None:
            raise self._fatal
        if not self._connected.is_set():
            reason = f": {self._last_error}" if self._last_error else ""
            raise Unreachable(
                f"no connection to {self.ws_url} within {self.connect_timeout} s{reason}"
            )

    async def aclose(self) -> None:
        """Close the connection, stop the runner, and fail whatever still waits
        with ``ClientClosed``. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        ws = self._ws
        if ws is not None:
            # A normal exit closes with 1000 first: cancelling the runner in
            # the middle of ``async with ws`` would close with 1011 (internal
            # error), and the server would log every exit as a failure.
            with contextlib.suppress(Exception):
                await ws.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        self._fail_everything(ClientClosed("the client was closed"))
        await self.http.aclose()

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def seq(self) -> SeqTracker:
        """The connection's ``SeqTracker`` (the core's)."""
        return self.core.seq

    @property
    def counters(self) -> ClientCounters:
        return ClientCounters(
            connections=self._connection,
            reconnects=max(0, self._connection - 1),
            seq=self.seq.counters,
            invalid_frames=self.core.invalid_frames,
            resent=self._resent,
        )

    # -- transcripts ------------------------------------------------------------------

    async def subscribe(
        self,
        transcript_id: str,
        *,
        window: Window | Mapping[str, Any] | None = None,
        timeout: float | None = None,
        presence: bool = False,
    ) -> Mirror:
        """A live mirror of the transcript, returned once its baseline arrived.

        ``presence``: follow who is on the transcript too (``mirror.presence``,
        ``mirror.wait_presence``; state this client's own with
        ``state_presence``).

        ``window`` (a ``protocol.views.Window`` or its plain form:
        ``{"tail": 50}``, ``{"from": 120}``, ``{"segment": "active"}``,
        ``{"view": "name"}``) makes the mirror hold only that part,
        ``[mirror.start, mirror.length)``; ``mirror.load_earlier(n)`` widens it.
        Subscribing twice returns the same mirror (with its first window).
        Raises ``NotFound`` (or another ``ServerError``) when the server
        refuses, ``RequestTimeout`` when no baseline arrives in time.
        """
        self._check_open()
        mirror = self.mirrors.get(transcript_id)
        if mirror is None:
            if window is not None and not isinstance(window, Window):
                window = msgspec.convert(window, Window)
            mirror = Mirror(
                self.core.subscribe(transcript_id, window=window, presence=presence),
                reader=lambda start, end, epoch: self.http.messages(
                    transcript_id, start, end, epoch=epoch
                ),
            )
            self.mirrors[transcript_id] = mirror
            await self._send_ops()
        limit = self.request_timeout if timeout is None else timeout
        try:
            await mirror.wait_ready(limit)
        except TimeoutError:
            if mirror.failed is None:
                await self.unsubscribe(transcript_id)
                raise RequestTimeout(
                    f"no baseline for {transcript_id!r} within {limit} s"
                ) from None
            raise
        return mirror

    async def unsubscribe(self, transcript_id: str) -> None:
        """Stop following the transcript; its mirror ends (``ClientClosed``)."""
        mirror = self.mirrors.pop(transcript_id, None)
        if mirror is None:
            return
        mirror._close()
        self.core.unsubscribe(transcript_id)
        await self._send_ops()

    async def state_presence(
        self,
        transcript_id: str,
        *,
        kind: wire.PresenceKind | None = None,
        state: Mapping[str, Any] | msgspec.UnsetType | None = msgspec.UNSET,
        name: str | None = None,
    ) -> None:
        """State this client's presence on a subscribed transcript, or change
        it: ``kind`` (``viewer``, ``writer``, ``agent``), ``state`` (a small
        JSON object, ``{}`` or ``None`` clears it; left out: kept), ``name``
        (on a server that asks for no credentials). Stated again on every new
        connection. Raises ``ValueError`` for a state over 1 KiB of JSON or
        a transcript not subscribed."""
        self._check_open()
        if isinstance(state, Mapping):
            state = dict(state)
            size = wire.presence_state_bytes(state)
            if size > MAX_PRESENCE_STATE_BYTES:
                raise ValueError(
                    f"a presence state is at most {MAX_PRESENCE_STATE_BYTES} bytes of JSON "
                    f"(this one is {size})"
                )
        self.core.state_presence(
            wire.Presence(transcript_id=transcript_id, kind=kind, state=state, name=name)
        )
        await self._send_ops()

    async def leave_presence(self, transcript_id: str) -> None:
        """End this client's presence on the transcript (it stays subscribed)."""
        self._check_open()
        self.core.state_presence(wire.Presence(transcript_id=transcript_id, leave=True))
        await self._send_ops()

    async def append(
        self,
        transcript_id: str,
        messages: Iterable[Any],
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        *,
        timeout: float | None = None,
        draft_id: str | None = None,
        format: Literal["openai", "anthropic", "ui"] | None = None,
        system: Any = None,
    ) -> Ack:
        """Append one batch (``Message`` structs or plain dicts) over the WebSocket.

        ``format="openai"`` or ``"anthropic"``: the messages are what that
        API's SDK gives (its objects, or dicts): an OpenAI
        ``completion.choices[0].message``, an Anthropic ``Message``, tool
        calls and results included; the server converts them
        (docs/protocol.md, "SDK input"). ``system`` is Anthropic's system
        prompt (``format="anthropic"`` only).

        Retried on every new connection with the same idempotency key until
        answered, so it lands exactly once. Raises ``RevisionConflict``
        (``.current``), ``NotFound``, ``InvalidMessage``, ``ServerError``, or
        ``RequestTimeout`` after ``timeout`` (default ``request_timeout``).
        ``draft_id`` commits that draft: it closes in the same step (prefer
        ``DraftWriter.commit``).
        """
        key = idempotency_key or uuid.uuid4().hex
        batch = [sdk_plain(m) for m in messages]
        system = sdk_plain(system)
        frame = await self._call(
            lambda ref: wire.Append(
                transcript_id=transcript_id,
                messages=batch,
                expected_revision=expected_revision,
                idempotency_key=key,
                ref=ref,
                draft_id=draft_id,
                format=format,
                system=system,
            ),
            retry=True,
            timeout=timeout,
        )
        assert isinstance(frame, wire.Ack)
        return _ack(frame)

    async def start_segment(
        self, transcript_id: str, start: int | None = None, *, timeout: float | None = None
    ) -> Ack:
        """Start a segment at ``start`` (default: the transcript's length).

        Not repeated on a new connection (it is not idempotent): if the
        connection drops before the answer, raises ``Disconnected``.
        """
        frame = await self._call(
            lambda ref: wire.StartSegment(transcript_id=transcript_id, start=start, ref=ref),
            retry=False,
            timeout=timeout,
        )
        assert isinstance(frame, wire.Ack)
        return _ack(frame)

    async def set_view(
        self,
        transcript_id: str,
        name: str,
        start: int,
        end: int | None = None,
        *,
        timeout: float | None = None,
    ) -> Ack:
        """Create the View ``name`` or move it to ``[start, end)`` (``end``
        ``None``: open, it follows the transcript). Setting a View to the
        range it has changes nothing (``duplicate``), so the call is retried
        on a new connection. Raises ``InvalidView``, ``NotFound``."""
        frame = await self._call(
            lambda ref: wire.SetView(
                transcript_id=transcript_id, name=name, start=start, end=end, ref=ref
            ),
            retry=True,
            timeout=timeout,
        )
        assert isinstance(frame, wire.Ack)
        return _ack(frame)

    async def leave_view(
        self, transcript_id: str, name: str, *, timeout: float | None = None
    ) -> Ack:
        """Leave the View ``name``: no message is deleted, no segment moves;
        leaving one that does not exist changes nothing (``duplicate``)."""
        frame = await self._call(
            lambda ref: wire.LeaveView(transcript_id=transcript_id, name=name, ref=ref),
            retry=True,
            timeout=timeout,
        )
        assert isinstance(frame, wire.Ack)
        return _ack(frame)

    def draft(
        self,
        transcript_id: str,
        *,
        role: Role = "assistant",
        draft_id: str | None = None,
        parts: bool = False,
    ) -> DraftWriter:
        """A writer of a new draft of the transcript (``draft_id``: a fresh
        uuid4 by default). Use it as ``async with client.draft(tid) as d:``,
        which opens it (raising ``ServerError`` such as ``too-many-drafts``
        when the server refuses) and cancels it on the way out unless it was
        committed, whether the block ended normally or on an exception::

            async with client.draft("chat-1") as d:
                async for token in tokens:
                    await d.write(token)
                await d.commit({"metadata": {"model": "m1"}})

        ``parts=True``: a reply with parts, written with AI SDK
        ``UIMessageChunk``s (``d.write_chunks``) and committed as the
        ``UIMessage`` they fold into (see ``stream_reply``).
        """
        self._check_open()
        return DraftWriter(self, transcript_id, draft_id or uuid.uuid4().hex, role, parts=parts)

    async def stream(
        self,
        transcript_id: str,
        chunks: AsyncIterable[object] | Iterable[object],
        *,
        role: Role = "assistant",
        draft_id: str | None = None,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Ack:
        """Stream ``chunks`` as a draft, then commit it as one message and
        return the append's ``Ack``.

        A chunk is a ``str`` or an OpenAI-style streaming chunk (object or
        dict) whose ``choices[0].delta.content`` is the text (chunks with
        none are skipped; no LLM SDK needed): ``await client.stream(tid,
        await openai.chat.completions.create(..., stream=True))`` works as
        is. The chunks' ``delta.tool_calls`` are gathered (by index: id,
        function name, argument fragments) and committed as the message's
        ``tool_calls``; a ``delta.refusal`` is written as text and kept in
        ``metadata.refusal``; what cannot be carried (a legacy
        ``function_call``, a call without an id or name) raises
        ``ClientError`` instead of committing an empty message
        (``drafts.StreamedCalls``). The draft's live text is the text only.
        ``fields`` are laid over the message (see ``DraftWriter.commit``).
        When the chunks raise, or the commit is refused, the draft is
        cancelled and the error goes on. When a reader stops the reply
        (``docs/protocol.md``, Stop), it stops reading ``chunks`` at once and
        returns the server's commit of what was written (``stopped`` set).
        """
        streamed = StreamedCalls()
        async with self.draft(transcript_id, role=role, draft_id=draft_id) as writer:
            try:
                async for chunk in iterate_chunks(chunks):
                    if writer.stopped_at is not None:
                        break  # a reader stopped the reply: read no more of the model
                    text = chunk_text(chunk)
                    if text:
                        await writer.write(text)
                    refusal = streamed.add(chunk)
                    if refusal:
                        await writer.write(refusal)
            except ServerError:
                if writer.stopped_at is None:
                    raise
            if writer.stopped_at is not None:
                return Ack(transcript_id, writer.stopped_at, stopped=True)
            message = streamed.fields()  # ClientError: the draft is cancelled
            if fields:
                message.update(fields)
            return await writer.commit(
                message or None,
                expected_revision=expected_revision,
                idempotency_key=idempotency_key,
                timeout=timeout,
            )

    async def stream_reply(
        self,
        transcript_id: str,
        stream: AsyncIterable[object] | Iterable[object],
        *,
        draft_id: str | None = None,
        message_id: str | None = None,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Ack:
        """Stream a model's reply as a draft with parts (its text, its
        reasoning, its tool calls as they are written), then commit it as
        the ``UIMessage`` it folds into; returns the append's ``Ack``.

        ``stream`` (async or not) is what the ``openai`` SDK streams
        (``ChatCompletionChunk``s), what the ``anthropic`` SDK streams
        (``MessageStreamEvent``s: ``messages.create(..., stream=True)`` or
        ``messages.stream(...)``), or AI SDK ``UIMessageChunk`` dicts; which
        one is told by its first item (``client_py.ui_chunks.UIChunks``
        says what each becomes). The items that arrived while an op was
        being sent go together in the next ``draft`` op's ``chunks`` (never
        a ``ref``: not answered; a plain iterable, such as the sync SDK
        clients' streams, is read one item per op, in the event loop as
        ``stream`` reads it: prefer the async clients), and the writer folds
        them too, so its
        ``UIMessage`` is the one the subscribers see (``DraftCopy.message``).
        ``message_id`` names the message (default: the model's response
        id); ``fields`` are laid over it (``{"metadata": {...}}``).

        Committed with ``append(format="ui", messages=[message],
        draft_id=...)``: ``GET .../ui-messages`` gives the same UIMessage
        back, ``/chat`` the tool calls with their parsed arguments. When the
        stream raises (or holds what no chunk stands for), the draft is
        cancelled and the error goes on. When a reader stops the reply, it
        stops reading the stream at once (an async one is closed) and
        returns the server's commit of what was written (``stopped`` set),
        as ``stream`` does. A connection lost while chunks were in flight
        cancels the draft and raises ``Disconnected`` (a reply with parts
        is not sent again whole: see ``client_py.drafts``).
        """
        converter = UIChunks(message_id)
        writer = self.draft(transcript_id, draft_id=draft_id, parts=True)
        async with writer:
            try:
                async with contextlib.aclosing(batches(stream, writer)) as items:
                    async for batch in items:
                        chunks = [chunk for item in batch for chunk in converter.add(item)]
                        await writer.write_chunks(chunks)
                if writer.state == "open":
                    await writer.write_chunks(converter.end())
            except ServerError:
                if writer.stopped_at is None:
                    raise
            if writer.stopped_at is not None:
                return Ack(transcript_id, writer.stopped_at, stopped=True)
            return await writer.commit(
                fields,
                expected_revision=expected_revision,
                idempotency_key=idempotency_key,
                timeout=timeout,
            )

    async def ping(self, *, timeout: float | None = None) -> float:
        """Round trip over the WebSocket, in seconds."""
        began = time.perf_counter()
        await self._call(lambda ref: wire.Ping(ref=ref), retry=True, timeout=timeout)
        return time.perf_counter() - began

    async def create(
        self, transcript_id: str | None = None, messages: Iterable[Any] = ()
    ) -> Created:
        """``POST /v1/transcripts``: a new transcript (id generated when ``None``)."""
        return await self.http.create(transcript_id, list(messages))

    async def get(self, transcript_id: str) -> TranscriptSnapshot:
        """``GET /v1/transcripts/{id}``: the server's snapshot now."""
        return await self.http.get(transcript_id)

    # -- calls --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the client is closed")
        if self._fatal is not None:
            raise self._fatal

    async def _call(
        self,
        make: Callable[[str], _CallOp],
        *,
        retry: bool,
        timeout: float | None,
    ) -> wire.ServerFrame:
        self._check_open()
        ref = f"r{next(self._refs)}"
        call = _Call(make(ref), asyncio.get_running_loop().create_future(), retry)
        self._calls[ref] = call
        limit = self.request_timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(limit) as scope:
                if self._ws is not None:
                    await self._send_call(call)
                return await call.future
        except TimeoutError:
            if scope.expired():
                raise RequestTimeout(
                    f"{type(call.op).__name__.lower()} got no answer within {limit} s"
                    + ("" if self.connected else " (not connected)")
                ) from None
            raise
        finally:
            self._calls.pop(ref, None)

    async def _send_call(self, call: _Call) -> None:
        connection = self._connection
        if call.sent_on == connection:
            return
        if call.sent_on:
            self._resent += 1
        call.sent_on = connection
        await self._send(call.op)

    async def _send(self, op: wire.ClientOp) -> None:
        ws = self._ws
        if ws is None:
            return  # the next connection sends what is still needed
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(wire.encode_json(op).decode())

    # -- drafts ---------------------------------------------------------------------------

    async def _draft_call(self, op: wire.Draft, timeout: float | None) -> wire.Ack:
        frame = await self._call(
            lambda ref: msgspec.structs.replace(op, ref=ref), retry=True, timeout=timeout
        )
        assert isinstance(frame, wire.Ack)
        return frame

    def _adopt_writer(self, writer: DraftWriter) -> None:
        self._writers[(writer.transcript_id, writer.draft_id)] = writer

    def _forget_writer(self, writer: DraftWriter) -> None:
        key = (writer.transcript_id, writer.draft_id)
        if self._writers.get(key) is writer:
            del self._writers[key]

    def _draft_refused(self, frame: wire.ErrorFrame) -> None:
        """A ref-less error naming a transcript: it may be the refusal of a
        draft update (they carry no ref); hand it to that transcript's writers."""
        writers = [w for w in self._writers.values() if w.transcript_id == frame.transcript_id]
        if writers:
            error = error_from_frame(frame)
            for writer in writers:
                writer._refused(frame, error)

    def _draft_closed(self, update: DraftClosed) -> None:
        """A draft this client writes was closed by someone else (cancelled,
        expired): its writer takes no more updates."""
        writer = self._writers.get((update.transcript_id, update.draft_id))
        if writer is not None and update.state in ("cancelled", "expired"):
            writer._failed(
                error_for(
                    codes.DRAFT_CLOSED,
                    f"draft {update.draft_id!r} was {update.state}",
                    transcript_id=update.transcript_id,
                )
            )

    async def _send_ops(self) -> None:
        """Send what the core asks for (it asks nothing while disconnected)."""
        for op in self.core.ops_to_send():
            await self._send(op)

    def _answer(self, ref: wire.Ref, result: wire.ServerFrame | BaseException) -> None:
        call = self._calls.get(str(ref)) if ref is not None else None
        if call is None or call.future.done():
            return  # a late answer to a call already answered (it was re-sent)
        if isinstance(result, BaseException):
            call.future.set_exception(result)
        else:
            call.future.set_result(result)

    def _fail_everything(self, error: BaseException) -> None:
        for call in self._calls.values():
            if not call.future.done():
                call.future.set_exception(error)
        for mirror in self.mirrors.values():
            mirror._fail(error)

    # -- the runner ---------------------------------------------------------------------

    async def _run(self) -> None:
        attempt = 0
        while True:
            received = False
            closed: int | None = None
            reason = ""
            try:
                token = await self.tokens.get()
                ws = await websockets.connect(
                    self.ws_url,
                    compression=None,
                    subprotocols=[wire.SUBPROTOCOL_JSON],  # type: ignore[list-item]
                    additional_headers=({"Authorization": f"Bearer {token}"} if token else None),
                    open_timeout=self.open_timeout,
                    close_timeout=1.0,
                    max_size=None,
                )
            except websockets.InvalidStatus as exc:
                status = exc.response.status_code
                if status == 401:  # a server that refuses at the handshake (older ones)
                    closed, reason = codes.CLOSE_UNAUTHORIZED, "HTTP 401"
                self._last_error = exc
            except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                self._last_error = exc
            except Exception as exc:  # the token provider failed: try again later
                log.warning("the token provider failed: %r", exc)
                self._last_error = exc
            else:
                async with ws:
                    received = await self._session(ws)
                if self._closed:  # aclose closed it: nothing to reconnect
                    return
                closed, reason = ws.close_code, ws.close_reason or ""
            if received:
                attempt = 0
            if closed is not None and not await self._may_reconnect(closed, reason):
                return
            attempt += 1
            ceiling = min(self.backoff_max, self.backoff_min * 2 ** min(attempt, 30))
            await asyncio.sleep(self._random.uniform(0, ceiling))

    async def _may_reconnect(self, code: int, reason: str) -> bool:
        """Whether to connect again after the server closed with ``code``
        (the error table says); if not, the client stops with the error."""
        row = codes.close(code)
        if row is None or row.reconnect in ("backoff", "resume"):
            return True
        if row.reconnect == "new-token" and self.tokens.renewable:
            refused = self.tokens.token
            try:
                if await self.tokens.renew() != refused:
                    return True
            except Exception as exc:
                log.warning("the token provider failed: %r", exc)
                return True  # it may work next time; the backoff paces it
        error_code = codes.code_for_close(code)
        self._fatal = error_for(error_code, f"the server closed the connection: {reason}")
        self._fail_everything(self._fatal)
        return False

    async def _session(self, ws: ClientConnection) -> bool:
        """Serve one connection until it closes; True if any frame arrived.

        The client counts as connected once the server answered the ``ping``
        it sends first: a server that refuses the credentials, or is full,
        accepts the WebSocket and then closes it (with a code that says what
        to do)."""
        self._connection += 1
        self._ws = ws
        received = False
        heartbeat = (
            asyncio.create_task(self._heartbeat(ws), name="tsync-heartbeat")
            if self.heartbeat
            else None
        )
        refresher = asyncio.create_task(self._refresh_credentials(), name="tsync-credentials")
        try:
            await self._send(wire.Ping(ref=_HELLO))
            # The resumes first, so that a mirror is current when the ack of
            # a call re-sent below arrives.
            self.core.connection_made()
            await self._send_ops()
            # Then the drafts: updates sent into the dead connection may be lost.
            for writer in list(self._writers.values()):
                op = writer._reconnected_op()
                if op is not None:
                    await self._send(op)
            for call in list(self._calls.values()):
                if call.future.done():
                    continue
                if call.sent_on and not call.retry:
                    call.future.set_exception(
                        Disconnected(
                            f"the connection dropped before {type(call.op).__name__} was answered"
                        )
                    )
                    continue
                await self._send_call(call)
            async for message in ws:
                received = True
                self.core.receive_data(message)
                await self._send_ops()
                for update in self.core.updates_received():
                    await self._on_update(update)
        except websockets.ConnectionClosed as exc:
            self._last_error = exc
        except Exception as exc:  # a bug must not end the client: log, reconnect
            log.exception("client connection failed; reconnecting")
            self._last_error = exc
        finally:
            self._connected.clear()
            self._ws = None
            for writer in self._writers.values():
                writer._connection_lost()
            for task in (heartbeat, refresher):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self.core.connection_lost()
        return received

    async def _refresh_credentials(self) -> None:
        """Hand the server a new token before the current one expires (the
        ``auth`` op), for as long as the connection lasts. A failure is
        tried again a little later; at the expiry the server closes with
        4001 and the next connection asks the provider again."""
        while True:
            wait = self.tokens.renew_in()
            if wait == float("inf"):
                return  # a fixed token, or one that never expires
            await asyncio.sleep(max(0.0, wait))
            try:
                token = await self.tokens.renew()
                assert token is not None  # renew_in is finite only with a provider
                await self._call(functools.partial(_auth_op, token), retry=False, timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("renewing the credentials failed: %r", exc)
                await asyncio.sleep(1.0)

    async def _heartbeat(self, ws: ClientConnection) -> None:
        assert self.heartbeat is not None
        beats = itertools.count(1)
        while True:
            await asyncio.sleep(self.heartbeat)
            # Answers to "h" refs match no call and are dropped; what counts is
            # that the pong carries a seq.
            with contextlib.suppress(websockets.ConnectionClosed):
                await ws.send(wire.encode_json(wire.Ping(ref=f"h{next(beats)}")).decode())

    async def _on_update(self, update: Update) -> None:
        """Carry out one update of the core."""
        match update:
            case Applied(transcript_id=transcript_id, event=event):
                mirror = self.mirrors.get(transcript_id)
                if mirror is not None:
                    mirror._applied(event)
            case Replaced(transcript_id=transcript_id, snapshot=snapshot):
                mirror = self.mirrors.get(transcript_id)
                if mirror is not None:
                    mirror._replaced(snapshot)
            case Stopped(transcript_id=transcript_id, code=code, message=message):
                mirror = self.mirrors.pop(transcript_id, None)
                if mirror is not None:
                    mirror._fail(error_for(code, message, transcript_id=transcript_id))
                if code in (codes.NOT_FOUND, codes.FORBIDDEN) and self._writers:
                    # (a refused draft update of a followed transcript ends up here)
                    error = error_for(code, message, transcript_id=transcript_id)
                    for writer in list(self._writers.values()):
                        if writer.transcript_id == transcript_id:
                            writer._failed(error)
            case Answered(frame=wire.Pong(ref=ref)) if ref == _HELLO:
                self._connected.set()  # the server took the credentials: connected
            case Answered(frame=wire.ErrorFrame() as frame):
                self._answer(frame.ref, error_from_frame(frame))
            case Answered(frame=frame):
                self._answer(frame.ref, frame)
            case FramesLost():
                # Any call sent on this connection may have lost its answer.
                for call in list(self._calls.values()):
                    if call.retry and not call.future.done():
                        call.sent_on = -1  # force a re-send on this connection
                        await self._send_call(call)
            case Resubscribed(reason="mismatch", transcript_id=transcript_id):
                log.error("%s: an event did not fit the copy; taking a new baseline", transcript_id)
            case PresenceChanged(transcript_id=transcript_id, frame=frame):
                mirror = self.mirrors.get(transcript_id)
                if mirror is not None:
                    mirror._presence_changed(frame)
            case Resubscribed(reason="digest", transcript_id=transcript_id):
                log.error(
                    "%s: the copy's digest differs from the server's; taking a new baseline",
                    transcript_id,
                )
                mirror = self.mirrors.get(transcript_id)
                if mirror is not None:
                    mirror.digest_mismatches += 1
            case DraftUpdated(transcript_id=transcript_id):
                mirror = self.mirrors.get(transcript_id)
                if mirror is not None:
                    mirror._draft(update)
            case DraftClosed(transcript_id=transcript_id):
                mirror = self.mirrors.get(transcript_id)
                if mirror is not None:
                    mirror._draft(update)
                if self._writers:
                    self._draft_closed(update)
            case ErrorReceived(frame=frame):
                if frame.transcript_id is not None and self._writers:
                    self._draft_refused(frame)
                log.warning("server error: %s: %s", frame.code, frame.message)
            case InvalidFrameReceived(reason=reason):
                log.warning("invalid frame ignored: %s", reason)


def _auth_op(token: str, ref: str) -> wire.Auth:
    return wire.Auth(token=token, ref=ref)


def _ack(frame: wire.Ack) -> Ack:
    return Ack(
        transcript_id=frame.transcript_id,
        revision=frame.revision,
        start=frame.start,
        count=frame.count,
        duplicate=frame.duplicate,
    )
