"""Issue 24 item 7: WebSocket fragments are bounded per message and per
second, whatever their size, and a read full of tiny frames is parsed in
slices with the loop free between them.

Before: one connection sending 4 million one-byte continuation fragments
(before authenticating) grew the server's RSS by 192 MB, about 48 bytes per
payload byte, and pushed every other connection's ping p50 to 455 ms for
25 s; zero-byte fragments were not bounded at all. Here the same 4 million
fragments (28 MB on the wire) are offered, and zero-byte ones in messages
under the per-message cap, while an unrelated client pings and a writer
appends; a message in a few fragments still goes through."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from tests.robustness.acknowledged import writing
from tests.robustness.harness import Target, assert_responsive, probing
from tests.support.rawsocket import RawSocket

FRAGMENTS = 4_000_000
BLOCK = 20_000  # fragments per write


def _continuations(count: int, payload: bytes) -> bytes:
    # Client frames are masked; a zero key leaves the payload as it is.
    return (bytes([0x00, 0x80 | len(payload)]) + b"\0\0\0\0" + payload) * count


async def _flood(conn: RawSocket, first: bytes, block: bytes, blocks: int) -> tuple[int, float]:
    """Write ``first`` then ``block`` up to ``blocks`` times, until the
    server stops taking them; how many blocks went out, and when it closed."""
    began = time.monotonic()
    conn.writer.write(first)
    sent = 0
    with contextlib.suppress(ConnectionError):
        for _ in range(blocks):
            conn.writer.write(block)
            await conn.writer.drain()
            sent += 1
    await conn.read(30)  # until the server's close (or a reset)
    return sent, time.monotonic() - began


def test_one_byte_fragments_close_the_sender(target_factory: Callable[..., Target]) -> None:
    target = target_factory()
    rss_before = target.rss()
    block = _continuations(BLOCK, b"a")

    async def attack() -> tuple[int, float]:
        conn = await RawSocket.connect(target.ws_url)  # no auth op: before authentication
        first = bytes([0x01, 0x81]) + b"\0\0\0\0" + b"a"  # a text frame, fin=0
        return await _flood(conn, first, block, FRAGMENTS // BLOCK)

    with writing(target.url, "bystander") as writer, probing(target.ws_url) as probe:
        sent, took = asyncio.run(attack())
        probe.wait_pings(5)
    # Closed after ws_max_fragments (1,024): well before the 4 million went out.
    assert sent * BLOCK < FRAGMENTS // 4, f"{sent * BLOCK} fragments were taken"
    assert took < 10, f"closed after {took:.1f} s"
    assert "more than 1024 fragments (ws_max_fragments)" in target.log()
    assert_responsive(probe)
    assert target.rss() - rss_before < 30 << 20
    writer.assert_nothing_lost()


def test_empty_fragments_are_counted_per_second(target_factory: Callable[..., Target]) -> None:
    target = target_factory(settings={"ws_max_fragments_per_s": 20_000})
    rss_before = target.rss()
    # Messages of 1,000 empty fragments each (under the per-message cap),
    # one after the other: only the rate can stop them.
    message = (
        bytes([0x01, 0x80]) + b"\0\0\0\0"
        + _continuations(998, b"")
        + bytes([0x80, 0x80]) + b"\0\0\0\0"
    )  # fmt: skip
    block = message * 20

    async def attack() -> tuple[int, float]:
        conn = await RawSocket.connect(target.ws_url)
        return await _flood(conn, b"", block, 1000)  # 20 million fragments at most

    with writing(target.url, "bystander") as writer, probing(target.ws_url) as probe:
        sent, took = asyncio.run(attack())
        probe.wait_pings(5)
    # A second's worth (20,000) at once, then the rate: closed within seconds.
    assert took < 10, f"closed after {took:.1f} s"
    assert sent < 200, f"{sent * 20_000} fragments were taken"
    assert "fragments faster than 20000 per second (ws_max_fragments_per_s)" in target.log()
    assert_responsive(probe)
    assert target.rss() - rss_before < 30 << 20
    writer.assert_nothing_lost()


def test_a_message_in_a_few_fragments_goes_through(target: Target) -> None:
    async def scenario() -> list[object]:
        conn = await RawSocket.connect(target.ws_url)
        text = b'{"op":"ping","ref":"frag"}'
        conn.send_text(text[:1], fin=False)
        for i in range(1, len(text) - 1):
            conn.send_continuation(text[i : i + 1])
        conn.send_continuation(text[-1:], fin=True)
        frames = await conn.read(10, until=lambda f: any(b'"frag"' in x.data for x in f))
        conn.abort()
        return [frame.data for frame in frames]

    answers = asyncio.run(scenario())
    assert any(b'"pong"' in data and b'"frag"' in data for data in answers), answers  # type: ignore[operator]
