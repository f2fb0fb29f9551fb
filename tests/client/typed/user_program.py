"""A user's program that calls every public API of ``client_py``, with types.

Not run: ``tests/client/test_public_types.py`` type-checks it with
``mypy --strict`` as a user's own file, so a signature that leaks ``Any``
where a user needs a type, or a missing ``py.typed``, fails the suite. Each
``reveal``-like assignment names the type a user gets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import client_py
from client_py import (
    Ack,
    Client,
    ClientCounters,
    ClientError,
    Created,
    DraftClosed,
    DraftEvent,
    DraftUpdated,
    DraftView,
    DraftWriter,
    EventStream,
    HttpApi,
    Imported,
    Mirror,
    MirrorUpdate,
    Receipt,
    RevisionConflict,
    ServerError,
    Window,
    chunk_text,
    endpoints,
)
from protocol.chat import anthropic_messages, openai_messages
from protocol.types import Message, TranscriptSnapshot, View


async def tokens() -> AsyncIterator[str]:
    yield "Hel"
    yield "lo"


async def token() -> str:
    return "secret"


async def websocket_calls(url: str) -> None:
    async with client_py.connect(url, token) as client:
        assert isinstance(client, Client)
        created: Created = await client.create("t", [{"role": "user", "content": "hi"}])
        snapshot: TranscriptSnapshot = await client.get(created.transcript_id)
        mirror: Mirror = await client.subscribe("t", window=Window(tail=10))
        await mirror.wait_ready(timeout=5)
        messages: tuple[Message, ...] = mirror.messages
        revision: int = mirror.revision
        epoch: str | None = mirror.epoch
        bounds: tuple[int, int, int] = (mirror.start, mirror.length, mirror.active_start)
        views: tuple[View, ...] = mirror.views
        drafts: Mapping[str, DraftView] = mirror.drafts
        ready: bool = mirror.ready
        loaded: int = await mirror.load_earlier(5)
        updates: EventStream[MirrorUpdate] = mirror.events()
        everything: EventStream[MirrorUpdate | DraftEvent] = mirror.events(drafts=True)
        pending: int = updates.pending
        ack: Ack = await client.append("t", [{"role": "assistant", "content": "hello"}])
        await mirror.wait_for_revision(ack.revision, timeout=5)
        update: MirrorUpdate = await anext(updates)
        event: MirrorUpdate | DraftEvent = await anext(everything)
        if isinstance(event, DraftUpdated | DraftClosed):
            draft_id: str = event.draft_id
            del draft_id
        updates.close()
        everything.close()
        segment: Ack = await client.start_segment("t")
        view: Ack = await client.set_view("t", "recent", 0, None)
        left: Ack = await client.leave_view("t", "recent")
        writer: DraftWriter = client.draft("t", role="assistant")
        async with writer as d:
            await d.write("Hel")
            await d.replace("Hello")
            n: int = await d.sync(timeout=5)
            text: str = d.text
            committed: Ack = await d.commit({"metadata": {"model": "m1"}})
        cancelled = client.draft("t")
        await cancelled.open()
        await cancelled.cancel()
        streamed: Ack = await client.stream("t", tokens(), expected_revision=committed.revision)
        async with client.draft("t", parts=True) as reply:
            await reply.write_chunks([{"type": "text-start", "id": "a"}])
            ui: dict[str, Any] = reply.message
            await reply.commit({"metadata": {"model": "m1"}})
            del ui
        replied: Ack = await client.stream_reply(
            "t", [{"type": "text-start", "id": "a"}], message_id="m", fields={"metadata": {}}
        )
        del replied
        try:
            await client.append("t", [], expected_revision=0, idempotency_key="k")
        except RevisionConflict as conflict:
            current: int | None = conflict.current
            del current
        rtt: float = await client.ping(timeout=5)
        counters: ClientCounters = client.counters
        as_dict: dict[str, Any] = counters.as_dict()
        connected: bool = client.connected
        await client.unsubscribe("t")
        del (snapshot, messages, revision, epoch, bounds, views, drafts, ready, loaded, pending)
        del (update, segment, view, left, n, text, streamed, rtt, as_dict, connected)


async def http_calls(url: str) -> None:
    base, ws_url = endpoints(url)
    async with HttpApi(base, "secret", timeout=5) as api:
        created: Created = await api.create("h", [{"role": "user", "content": "hi"}])
        snapshot: TranscriptSnapshot = await api.get("h", start=0, end=1)
        receipt: Receipt = await api.append("h", [{"role": "user", "content": "more"}])
        segment: Receipt = await api.start_segment("h")
        view: Receipt = await api.set_view("h", "v", 0)
        views: list[View] = await api.views("h")
        left: Receipt = await api.leave_view("h", "v")
        usage = await api.usage("h", segments="all")
        page = await api.list(limit=10)
        part = await api.messages("h", 0, 2, epoch=created.epoch)
        lmml: bytes = await api.export("h")
        bundle: bytes = await api.export("h", bundle=True)
        imported: Imported = await api.import_file("a.lmml", lmml, transcript_id="h2")
        openai_body: dict[str, Any] = await api.chat("h")
        anthropic_body: dict[str, Any] = await api.chat("h", format="anthropic", segment="all")
        await api.delete("h2")
        rendered: list[dict[str, Any]] = openai_messages(snapshot.messages, context="system")
        both: dict[str, Any] = anthropic_messages(snapshot.messages)
        del (ws_url, receipt, segment, view, views, left, usage, page, part, bundle, imported)
        del (openai_body, anthropic_body, rendered, both)


def chunk(value: object) -> str | None:
    return chunk_text(value)


def errors(error: Exception) -> str:
    if isinstance(error, ServerError):
        code: str = error.code
        return code
    if isinstance(error, ClientError):
        return str(error)
    return "?"
