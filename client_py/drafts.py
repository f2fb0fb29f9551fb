"""Writing drafts: an assistant's answer shared live, token by token, then
committed as a real message (``docs/protocol.md``, "Drafts").

``client.draft(transcript_id)`` opens a ``DraftWriter``; ``client.stream``
writes one from an async iterator of chunks and commits it. A writer keeps
its whole text, so that after a reconnect it sends that text in one op and
the subscribers see the draft go on where it was (a token sent into a
connection that was already dead is not lost).

Updates (``write``, ``replace``) carry no ``ref``: the server does not ack
each token. A refusal still comes back as an ``error`` frame naming the
transcript (not the draft): the client hands it to its open writers of that
transcript. ``draft-too-large``, ``draft-closed``, ``forbidden`` and
``not-found`` end the writer (its next call raises the error); a refusal to
retry later (``rate-limited``, ``unavailable``) makes the next update send
the whole text, so the subscribers' copies catch up. One client writing
several drafts of one transcript at once cannot tell which of them such a
refusal was about: each of them takes it. ``sync()`` asks the server for an
answer (an op with a ``ref``) and raises a refusal exactly.

A reply with parts (``client.draft(tid, parts=True)``, ``client.stream_reply``)
is written with AI SDK ``UIMessageChunk``s (``write_chunks``) and folded by
the writer too (``UIMessageState``: ``message`` is its ``UIMessage``); its
commit appends that message (``format="ui"``). It cannot be sent again whole
after a reconnect as a text is (the server has no op that replaces a reply's
chunks): the server keeps the draft as it got it, and a writer that sent
chunks the server never answered (no ``sync`` since) cannot tell whether the
old connection delivered them, so on the new connection it cancels the
draft and fails with ``Disconnected`` (its next call raises it): the readers
never see a reply with a hole. A commit already under way is not touched:
its append, re-sent, carries the writer's whole message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    Callable,
    Iterable,
    Mapping,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from client_py.errors import ClientError, Disconnected, ServerError
from client_py.model_streams import StreamedCalls, chunk_text
from protocol import codes, wire
from protocol.types import Role
from protocol.ui_stream import UIMessageState, UIStreamError

if TYPE_CHECKING:
    from client_py.http import Ack

# StreamedCalls and chunk_text lived here: their old imports still work.
__all__ = ["DraftView", "DraftWriter", "StreamedCalls", "chunk_text"]

#: How long a commit refused during a reader's stop waits for the stop's
#: notice (which follows the stop's own commit).
_STOP_NOTICE_S = 5.0
#: The refusals of a ref-less update after which the writer goes on, sending
#: its whole text with the next update (the server did not apply one).
_RESEND_CODES = frozenset({codes.RATE_LIMITED, codes.UNAVAILABLE, codes.INTERNAL})

#: The refusals that end the writer but leave the draft open on the server,
#: as it was: ``cancel`` still drops it.
_STILL_OPEN_CODES = frozenset({codes.DRAFT_TOO_LARGE, codes.INVALID_FRAME})


class _Sender(Protocol):
    """What a writer needs of its client (``client_py.client.Client``)."""

    async def _send(self, op: wire.ClientOp) -> None: ...

    async def _draft_call(self, op: wire.Draft, timeout: float | None) -> wire.Ack: ...

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
    ) -> Ack: ...

    def _adopt_writer(self, writer: DraftWriter) -> None: ...

    def _forget_writer(self, writer: DraftWriter) -> None: ...


@dataclass(frozen=True, slots=True)
class DraftView:
    """A draft as a mirror holds it (``Mirror.drafts``): its ``role``, its
    whole ``text`` and ``n``, the number of the server's update that text is
    as of."""

    draft_id: str
    role: str
    text: str
    n: int


class DraftWriter:
    """One draft being written; use it as ``async with client.draft(tid) as d``.

    ``await d.write(delta)`` appends text, ``await d.replace(text)`` replaces
    it, ``await d.commit(fields)`` appends the message (``{"role": role,
    "content": text}`` updated with ``fields``) and closes the draft in the
    same step; ``await d.cancel()`` drops it. Leaving the ``async with``
    block without a commit cancels the draft, and so does leaving it on an
    exception (the exception goes on). ``text`` is the writer's whole text.

    With ``parts`` (a reply with parts) it takes ``write_chunks`` instead of
    ``write`` and ``replace``, ``message`` is the ``UIMessage`` folded so far
    and ``commit`` appends it (see the module).
    """

    def __init__(
        self,
        client: _Sender,
        transcript_id: str,
        draft_id: str,
        role: Role,
        *,
        parts: bool = False,
    ) -> None:
        self._client = client
        self.transcript_id = transcript_id
        self.draft_id = draft_id
        self.role = role
        self._parts: list[str] = []
        #: ``open`` while it takes updates; ``committing`` while its append
        #: is under way; then ``committed``, ``cancelled`` or ``failed``.
        self.state: Literal["open", "committing", "committed", "cancelled", "failed"] = "open"
        #: The refusal that ended the writer (raised by its next call), or
        #: ``Disconnected`` for a reply with parts whose chunks may be lost.
        self.error: ClientError | None = None
        self._resend = False  # the next update sends the whole text
        self._adopted = False  # the client knows it (and re-sends it on a new connection)
        self._sent = False  # an op went out (the role rides on the first and on texts)
        #: A reader stopped the draft: the revision that committed what it held.
        self.stopped_at: int | None = None
        self._stop_notice = asyncio.Event()  # set with stopped_at
        #: A reply with parts: the UIMessage as the writer folded its chunks.
        self.ui: UIMessageState | None = UIMessageState(draft_id) if parts else None
        # Chunk ops sent since the server last answered one of this writer's ops.
        self._unanswered = 0
        #: Called once when the writer ends other than by its own doing (a
        #: refusal, a stop, a lost reply): ``Client.stream_reply`` stops
        #: reading the model at once.
        self.on_end: Callable[[], None] | None = None

    def __repr__(self) -> str:
        where = f"{self.transcript_id}/{self.draft_id}"
        return f"<DraftWriter {where} {self.state} {len(self.text)} chars>"

    @property
    def text(self) -> str:
        """The whole text written so far (of a reply with parts: its text
        parts, joined)."""
        if self.ui is not None:
            return "".join(p["text"] for p in self.ui.parts if p["type"] == "text")
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    # -- writing --------------------------------------------------------------------------

    async def open(self, *, timeout: float | None = None) -> None:
        """Open the draft on the server and wait for its answer (``async
        with`` does this): raises ``ServerError`` (``too-many-drafts``,
        ``draft-closed``, ``forbidden``, ...) when it is refused. From
        then on the client sends the writer's whole text on every new
        connection."""
        self._check_open()
        op = self._op(chunks=[]) if self.ui is not None else self._op()
        try:
            await self._client._draft_call(op, timeout)
        except ServerError as exc:
            self._failed(exc)
            raise
        self._adopt()

    @property
    def message(self) -> dict[str, Any]:
        """A reply with parts: its ``UIMessage`` as written so far (a copy)."""
        if self.ui is None:
            raise ClientError("a text draft has no UIMessage: open it with parts=True")
        return self.ui.message()

    async def write_chunks(self, chunks: Iterable[Mapping[str, Any]]) -> None:
        """A reply with parts: fold AI SDK ``UIMessageChunk``s into the
        message and send them in one op (not answered). Raises
        ``ClientError`` and sends nothing when one of them does not fit the
        reply so far (``UIMessageState.check``: the server would refuse the
        op whole)."""
        self._check_open()
        if self.ui is None:
            raise ClientError("write_chunks writes a reply with parts: open it with parts=True")
        batch = [dict(chunk) for chunk in chunks]
        if not batch:
            return
        try:
            self.ui.check(batch)
        except UIStreamError as exc:
            raise ClientError(f"draft {self.draft_id!r}: {exc}") from None
        if not self._adopted:
            self._adopt()
        self.ui.apply_all(batch)
        self._unanswered += 1
        await self._client._send(self._op(chunks=batch))

    async def write(self, delta: str) -> None:
        """Append ``delta`` to the text and send it (not answered)."""
        self._check_open()
        self._check_text()
        if not delta:
            return
        if not self._adopted:
            self._adopt()
        self._parts.append(delta)
        if self._resend:
            self._resend = False
            await self._client._send(self._op(text=self.text))
        else:
            await self._client._send(self._op(delta=delta))

    async def replace(self, text: str) -> None:
        """Replace the whole text (not answered). A draft expires
        ``draft_ttl_s`` (30 s) after its last update: ``sync()`` keeps an
        idle one alive."""
        self._check_open()
        self._check_text()
        if not self._adopted:
            self._adopt()
        self._parts = [text]
        self._resend = False
        await self._client._send(self._op(text=text))

    async def sync(self, *, timeout: float | None = None) -> int:
        """Wait until the server has taken every update sent before; returns
        the number of its latest update (``n``). Raises the refusal when the
        draft is closed or a limit was hit, by this op or by an update sent
        before it. It also keeps an idle draft alive (a draft expires
        ``draft_ttl_s`` after its last update)."""
        self._check_open()
        resend = self._resend and self.ui is None
        op = self._op(text=self.text) if resend else self._op()
        self._resend = False
        unanswered = self._unanswered
        try:
            ack = await self._client._draft_call(op, timeout)
        except ServerError as exc:
            self._failed(exc)
            if self.error is not None and self.error is not exc:
                # It ended before this answer came (a reply with parts lost
                # on a reconnect, which cancelled it): that is the cause.
                raise self.error from exc
            raise
        # The server answers in order: a refusal of an update sent before
        # came before this answer.
        self._check_open()
        self._unanswered -= unanswered
        return ack.n or 0

    async def commit(
        self,
        fields: Mapping[str, Any] | None = None,
        *,
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Ack:
        """Append the message and close the draft in the same step; returns
        the append's ``Ack``. The message is ``{"role": role, "content":
        text}`` with ``fields`` laid over it (``name``, ``metadata``, or a
        ``content`` of its own). Like every append it lands exactly once
        across reconnects. A refused append (``RevisionConflict``,
        ``InvalidMessage``) leaves the draft open: fix and commit again, or
        cancel.

        A reply with parts commits its ``UIMessage`` (``message``, with
        ``fields`` laid over it: ``metadata``, say) as ``format="ui"``: the
        stored messages are what ``protocol.ui_messages.from_ui_message``
        makes of it, and ``GET .../ui-messages`` gives it back.

        A draft a reader stopped was committed by the stop: its commit
        returns that commit's receipt (``stopped``), whether the stop's
        notice came before the commit was asked for or crossed it."""
        if self.stopped_at is not None and self.state == "failed":
            from client_py.http import Receipt

            return Receipt(self.transcript_id, self.stopped_at, stopped=True)
        self._check_open()
        message: dict[str, Any]
        if self.ui is not None:
            message = self.ui.message()
        else:
            message = {"role": self.role, "content": self.text}
        if fields:
            message.update(fields)
        self.state = "committing"
        try:
            ack = await self._client.append(
                self.transcript_id,
                [message],
                expected_revision,
                idempotency_key,
                timeout=timeout,
                draft_id=self.draft_id,
                format="ui" if self.ui is not None else None,
            )
        except ServerError as exc:
            if self.state == "committing":
                self.state = "open"
            stopped = await self._stopped_by_reader(exc)
            if stopped is None:
                raise
            return stopped
        except BaseException:
            if self.state == "committing":
                self.state = "open"
            raise
        self.state = "committed"
        self._client._forget_writer(self)
        return ack

    async def cancel(self) -> None:
        """Drop the draft: the subscribers see it closed with no message.
        Does nothing once it is committed or cancelled, nor after a refusal
        that closed it on the server (a writer failed on ``draft-too-large``
        or ``invalid-frame`` still cancels: the server kept the draft as it
        was)."""
        if self.state == "failed" and self.error is not None:
            if isinstance(self.error, ServerError) and self.error.code in _STILL_OPEN_CODES:
                self.error = None  # once
                await self._client._send(self._op(cancel=True))
            return
        if self.state != "open":
            return
        self.state = "cancelled"
        self._client._forget_writer(self)
        await self._client._send(self._op(cancel=True))

    async def __aenter__(self) -> DraftWriter:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cancel()

    # -- the client's side -------------------------------------------------------------

    def _op(
        self,
        *,
        delta: str | None = None,
        text: str | None = None,
        cancel: bool = False,
        chunks: list[dict[str, Any]] | None = None,
    ) -> wire.Draft:
        # A token carries no role: the op that opened the draft (or a text
        # sent again after a reconnect, which may open it anew) did.
        token = delta is not None or bool(chunks)
        role = None if token and self._sent else self.role
        self._sent = True
        return wire.Draft(
            transcript_id=self.transcript_id,
            draft_id=self.draft_id,
            role=role,
            delta=delta,
            text=text,
            cancel=cancel,
            chunks=chunks,
        )

    def _adopt(self) -> None:
        self._adopted = True
        self._client._adopt_writer(self)

    def _connection_lost(self) -> None:
        """Updates sent lately may be lost: whatever goes first on the next
        connection (this writer's next update, or ``_reconnected_op``)
        carries the whole text, so no reader sees a text with a hole."""
        self._resend = True

    def _reconnected_op(self) -> wire.Draft | None:
        """The op to send on a new connection: the whole text (nothing while
        a commit is under way: its append is sent again, and the draft it
        closes must not be opened again by a late text)."""
        if self.state != "open":
            return None
        self._resend = False
        if self.ui is None:
            return self._op(text=self.text)
        if not self._unanswered:
            return None  # the server has all of it, and keeps the draft
        self._failed(
            Disconnected(
                f"the connection dropped while draft {self.draft_id!r} was written: chunks "
                "sent may be lost and a reply with parts cannot be sent again whole, so "
                "the draft was cancelled"
            )
        )
        return self._op(cancel=True)

    def _refused(self, frame: wire.ErrorFrame, error: ServerError) -> None:
        """A ref-less update of this transcript was refused (see the module)."""
        stopped = frame.code == codes.DRAFT_CLOSED and frame.revision is not None
        if stopped and self.state in ("open", "committing"):
            # A reader stopped it, and its stop committed what it held (a
            # commit under way hears of it too: it is refused for it).
            self.stopped_at = frame.revision
            self._stop_notice.set()
        if self.state != "open":
            return
        if frame.code in _RESEND_CODES:
            self._resend = True
        else:
            self._failed(error)

    async def _stopped_by_reader(self, error: ServerError) -> Ack | None:
        """The commit was refused because a reader stopped the draft (its
        stop committed what it held): that commit's receipt, ``stopped``.
        Waits a moment for the stop's notice when the commit met the draft
        while the stop's own commit was under way. ``None``: not a stop."""
        if error.code != codes.DRAFT_CLOSED:
            return None
        revision = error.details.get("revision")
        if revision is None and "stopped" in error.message:
            with contextlib.suppress(TimeoutError):  # the notice is on its way
                await asyncio.wait_for(self._stop_notice.wait(), _STOP_NOTICE_S)
            revision = self.stopped_at
        if revision is None:
            return None
        from client_py.http import Receipt

        self.stopped_at = revision
        self.state = "failed"
        self.error = error
        self._client._forget_writer(self)
        return Receipt(self.transcript_id, revision, stopped=True)

    def _failed(self, error: ClientError) -> None:
        if self.state == "open":
            self.state = "failed"
            self.error = error
            self._client._forget_writer(self)
            on_end, self.on_end = self.on_end, None
            if on_end is not None:
                on_end()

    def _check_text(self) -> None:
        if self.ui is not None:
            raise ClientError("a reply with parts is written with write_chunks")

    def _check_open(self) -> None:
        if self.state == "open":
            return
        if self.error is not None:
            raise self.error
        raise ClientError(f"draft {self.draft_id!r} is {self.state}: it takes no more updates")
