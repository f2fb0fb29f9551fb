"""The property of issue 23, item 1, through a real server: any value, put
in a message's ``metadata``, ``tool_calls`` or a content part and sent as
JSON or MessagePack, is either refused at validation (``invalid-message``
with a path into that field) or stored and then delivered identically to a
JSON and a MessagePack subscriber, exported as LMML and imported back, each
time exactly what the server received (types and the sign of zero too).

The server runs in a thread of its own (its own event loop) for the whole
module, once per store (memory, SQLite, a private ``redis-server``);
hypothesis drives it with plain blocking clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from protocol import wire
from server.config import ServerConfig
from tests.conftest import require_binary
from tests.strategies import carried_exactly, loose_values, same_exactly
from tests.support.redis_server import RedisServer
from tests.support.servers import running_server

TIMEOUT = 10.0


@dataclass
class Peer:
    """A blocking WebSocket client that reads plain frames (dicts)."""

    ws: ClientConnection
    binary: bool

    @classmethod
    def open(cls, url: str, binary: bool, stack: contextlib.ExitStack) -> Peer:
        sub = wire.SUBPROTOCOL_MSGPACK if binary else wire.SUBPROTOCOL_JSON
        ws = stack.enter_context(connect(url, subprotocols=[sub], compression=None))  # type: ignore[list-item]
        return cls(ws, binary)

    def send(self, op: dict[str, Any]) -> None:
        self.ws.send(
            msgspec.msgpack.encode(op) if self.binary else msgspec.json.encode(op).decode()
        )

    def frames(self) -> Iterator[dict[str, Any]]:
        while True:
            data = self.ws.recv(TIMEOUT)
            if self.binary:
                assert isinstance(data, bytes)
                yield msgspec.msgpack.decode(data)
            else:
                assert isinstance(data, str)
                for line in data.split("\n"):
                    if line.strip():
                        yield msgspec.json.decode(line)

    def wait(self, kind: str, transcript_id: str) -> dict[str, Any]:
        """The next frame of ``kind`` (``baseline``, ``increment``, an answer:
        ``answer``) about ``transcript_id``; pongs, and frames about the
        transcripts of earlier examples (left over when one failed), are
        skipped."""
        for frame in self.frames():
            about = frame.get("transcriptId")
            if frame["type"] in ("baseline", "increment"):
                about = frame.get("snapshot", frame.get("event", {})).get("transcriptId")
            if about != transcript_id:
                continue
            if frame["type"] == kind or (kind == "answer" and frame["type"] in ("ack", "error")):
                return frame
            raise AssertionError(f"expected {kind}, got {frame}")
        raise AssertionError("unreachable")


@dataclass
class Setup:
    url: str
    http: httpx.Client
    writers: dict[bool, Peer]
    readers: dict[bool, Peer]


def _serve(config: ServerConfig, box: dict[str, Any], ready: threading.Event) -> None:
    async def main() -> None:
        async with running_server(config) as srv:
            box["url"], box["ws_url"] = srv.url, srv.ws_url
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            ready.set()
            await box["stop"].wait()

    try:
        asyncio.run(main())
    finally:
        ready.set()


@pytest.fixture(scope="module", params=["memory", "sqlite", "redis"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    with contextlib.ExitStack() as stack:
        if request.param == "redis":
            binary = require_binary("redis-server")
            redis = stack.enter_context(RedisServer(binary, tmp_path_factory.mktemp("redis")))
            store = redis.url
        elif request.param == "sqlite":
            store = f"sqlite:{tmp_path_factory.mktemp('data')}"
        else:
            store = "memory"
        yield from _serving(ServerConfig(store=store, graceful_shutdown_s=2.0))


def _serving(config: ServerConfig) -> Iterator[Setup]:
    box: dict[str, Any] = {}
    ready = threading.Event()
    thread = threading.Thread(target=_serve, args=(config, box, ready), daemon=True)
    thread.start()
    assert ready.wait(30) and "url" in box, "the server did not start"
    try:
        with contextlib.ExitStack() as stack:
            peers = [Peer.open(box["ws_url"], b, stack) for b in (False, True, False, True)]
            http = stack.enter_context(httpx.Client(base_url=box["url"], timeout=TIMEOUT))
            yield Setup(
                box["url"],
                http,
                writers={False: peers[0], True: peers[1]},
                readers={False: peers[2], True: peers[3]},
            )
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)


#: Where the value goes, and the path its refusal must point into.
PLACES: dict[str, tuple[str, Any]] = {
    "metadata": ("messages[0].metadata", lambda v: {"content": "x", "metadata": {"v": v}}),
    "tool_calls": (
        "messages[0].tool_calls",
        lambda v: {"content": "", "tool_calls": [{"id": "c", "function": {"arguments": v}}]},
    ),
    "text": ("messages[0].content", lambda v: {"content": [{"type": "text", "text": v}]}),
    "detail": (
        "messages[0].content",
        lambda v: {"content": [{"type": "image_url", "image_url": {"url": "u", "detail": v}}]},
    ),
    "attachment": (
        "messages[0].content",
        lambda v: {
            "content": [{"type": "attachment", "name": "a", "mime": "text/plain", "content": v}]
        },
    ),
    "part": ("messages[0].content", lambda v: {"content": [v]}),
}
_ids = itertools.count(1)
#: Strings the LMML export must take care with (delimiters, fences, embeds,
#: line breaks of every kind, NUL), besides any other value.
_TRICKY = st.lists(
    st.sampled_from(
        ["<!-- user -->", "-->", "@@@", "@x", "```", "\n", "\r", "\u2028", "\x00", "é", " ", "a"]
    ),
    max_size=8,
).map("".join)


def _canonical(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as the server keeps it: an optional field of the
    message or of an image part that is ``null`` is the same as one left out
    (inside ``metadata`` and ``tool_calls``, ``null`` is a value like any)."""
    kept = {k: v for k, v in message.items() if v is not None or k in ("role", "content")}
    content = kept.get("content")
    if isinstance(content, list):
        parts = []
        for part in content:
            image = part.get("image_url") if isinstance(part, dict) else None
            if isinstance(image, dict) and image.get("detail", "") is None:
                part = {**part, "image_url": {k: v for k, v in image.items() if k != "detail"}}
            parts.append(part)
        kept["content"] = parts
    return kept


def _encodes(message: dict[str, Any], binary: bool) -> bool:
    try:
        (msgspec.msgpack if binary else msgspec.json).encode(message)
    except (TypeError, ValueError, OverflowError, msgspec.MsgspecError):
        return False
    return True


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    value=loose_values() | _TRICKY,
    place=st.sampled_from(list(PLACES)),
    prefer_msgpack=st.booleans(),
)
# The reproduction, and what only MessagePack can send, every time.
@example(value=2**64, place="metadata", prefer_msgpack=False)
@example(value=[float("nan")], place="metadata", prefer_msgpack=True)
@example(value={"a": {1: "b"}}, place="tool_calls", prefer_msgpack=True)
@example(value=b"\x00", place="text", prefer_msgpack=True)
@example(value=2**64 - 1, place="metadata", prefer_msgpack=True)
@example(value=-0.0, place="tool_calls", prefer_msgpack=False)
@example(value=None, place="detail", prefer_msgpack=False)
def test_a_value_is_refused_or_carried_exactly_everywhere(
    setup: Setup, value: Any, place: str, prefer_msgpack: bool
) -> None:
    path, build = PLACES[place]
    message = {"role": "assistant", **build(value)}
    forms = [b for b in (prefer_msgpack, not prefer_msgpack) if _encodes(message, b)]
    assume(forms)  # (a lone surrogate: no client can send it; the unit tests cover it)
    binary = forms[0]
    codec = msgspec.msgpack if binary else msgspec.json
    received = codec.decode(codec.encode(message))  # what the server gets
    tid = f"p{next(_ids)}"
    http = setup.http
    assert http.post("/v1/transcripts", json={"id": tid}).status_code == 201
    for reader in setup.readers.values():
        reader.send({"op": "subscribe", "transcriptId": tid})
        assert reader.wait("baseline", tid)["snapshot"]["revision"] == 0
    writer = setup.writers[binary]
    writer.send({"op": "append", "transcriptId": tid, "messages": [received], "ref": tid})
    answer = writer.wait("answer", tid)
    expected = _canonical(received)
    event(f"{place} {answer['type']}")
    try:
        if answer["type"] == "error":
            assert answer["code"] == "invalid-message", answer
            assert answer["message"].startswith(path), (answer["message"], path)
            if place in ("metadata", "tool_calls"):  # any JSON value fits there
                assert not carried_exactly(received), (
                    f"refused a value both formats carry: {answer}"
                )
            return
        assert answer["revision"] == 1, answer
        # Both subscribers get exactly what the server received.
        for reader in setup.readers.values():
            increment = reader.wait("increment", tid)["event"]
            assert increment["revision"] == 1
            (got,) = increment["change"]["messages"]
            assert same_exactly(got, expected), (reader.binary, got, expected)
        # Stored: read back, exported as LMML and imported again, exactly.
        stored = http.get(f"/v1/transcripts/{tid}").json()["messages"]
        assert same_exactly(stored, [expected]), stored
        export = http.get(f"/v1/transcripts/{tid}/export.lmml")
        assert export.status_code == 200, export.text
        imported = http.post(
            "/v1/transcripts/import", params={"id": f"{tid}i"}, content=export.content
        )
        assert imported.status_code == 201, imported.text
        back = http.get(f"/v1/transcripts/{tid}i").json()["messages"]
        assert same_exactly(back, [expected]), (back, expected)
    finally:
        for reader in setup.readers.values():
            reader.send({"op": "unsubscribe", "transcriptId": tid})
