"""Long-poll reads answered in front of the app (``server.streams.longpoll``):
one encoding per append for every reader it wakes, each with its own
cursor; the same answer as the app's; refusals still the app's; the
connection going on (or closing) as after any other answer."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import jwt

from server.streams.http import ANSWERS
from server.streams.longpoll import FAST
from server.streams.transcripts import PAGES
from tests.support.servers import running_server
from tests.support.waiting import until

READERS = 12
SECRET = "longpoll-suite-secret-0123456789abcdef"
JSON = {"content-type": "application/json"}


def _parked(srv: Any) -> int:
    """Live reads the server's HTTP protocol counts as parked now."""
    counters = srv.server.config.http_protocol_class.counters
    return int(counters.parked)


def _token(**claims: object) -> str:
    return jwt.encode({"sub": "s", "exp": int(time.time()) + 600, **claims}, SECRET, "HS256")


async def test_one_append_wakes_every_reader_with_one_encoded_answer_and_its_own_cursor() -> None:
    limits = httpx.Limits(max_connections=READERS + 4)
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, limits=limits, timeout=20) as http,
    ):
        url = "/v1/stream/lp/shared"
        created = await http.put(url, headers=JSON)
        tail = created.headers["stream-next-offset"]
        # Cursors past the server's interval: each answer's follows its own.
        cursors = [str(10**9 + 1000 * i) for i in range(READERS)]
        parked, built, shared, answered = _parked(srv), ANSWERS.built, ANSWERS.shared, FAST.answered
        reads = [
            asyncio.create_task(
                http.get(url, params={"offset": tail, "live": "long-poll", "cursor": cursor})
            )
            for cursor in cursors
        ]
        await until(lambda: _parked(srv) >= parked + READERS, timeout=10)
        assert (await http.post(url, content=b'{"n":1}', headers=JSON)).status_code == 204
        answers = await asyncio.gather(*reads)

        assert [a.status_code for a in answers] == [200] * READERS
        assert {a.content for a in answers} == {b'[{"n":1}]'}
        assert len({a.headers["etag"] for a in answers}) == 1
        for cursor, answer in zip(cursors, answers, strict=True):
            assert int(answer.headers["stream-cursor"]) > int(cursor)
        # Built once, taken as it was by every other reader; all answered in front.
        assert ANSWERS.built - built == 1
        assert ANSWERS.shared - shared == READERS - 1
        assert FAST.answered - answered == READERS

        # The app's own answer to the same read (a conditional read goes its
        # way) has the same headers and body.
        handed_on = FAST.handed_on
        slow = await http.get(
            url,
            params={"offset": tail, "live": "long-poll"},
            headers={"if-none-match": '"another"'},
        )
        assert FAST.handed_on - handed_on == 1
        fast = answers[0]
        assert slow.content == fast.content

        def comparable(response: httpx.Response) -> dict[str, str]:
            return {k: v for k, v in response.headers.items() if k not in ("date", "stream-cursor")}

        assert comparable(slow) == comparable(fast)
        # ... and its If-None-Match of that answer is a 304 there.
        again = await http.get(
            url,
            params={"offset": tail, "live": "long-poll"},
            headers={"if-none-match": fast.headers["etag"]},
        )
        assert again.status_code == 304


async def test_a_timed_out_long_poll_is_a_204_with_a_cursor_answered_in_front() -> None:
    async with (
        running_server(stream_long_poll_s=0.3) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url = "/v1/stream/lp/quiet"
        tail = (await http.put(url, headers=JSON)).headers["stream-next-offset"]
        answered = FAST.answered
        empty = await http.get(url, params={"offset": tail, "live": "long-poll"})
        assert empty.status_code == 204
        assert empty.headers["stream-next-offset"] == tail
        assert empty.headers["stream-up-to-date"] == "true"
        assert int(empty.headers["stream-cursor"]) > 0
        assert empty.headers["x-content-type-options"] == "nosniff"
        assert FAST.answered - answered == 1
        # Closed at the reader's offset: 204 at once, closed, no cursor.
        assert (await http.post(url, headers={**JSON, "stream-closed": "true"})).status_code == 204
        closed = await http.get(url, params={"offset": tail, "live": "long-poll"})
        assert closed.status_code == 204
        assert closed.headers["stream-closed"] == "true"
        assert "stream-cursor" not in closed.headers


async def test_refusals_are_still_the_apps() -> None:
    async with (
        running_server(jwt_secret=SECRET) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url = "/v1/stream/chat-1/lp"
        writer = {"authorization": f"Bearer {_token(write=['chat-1/*'], read=['chat-1/*'])}"}
        other = {"authorization": f"Bearer {_token(read=['other-*'])}"}
        created = await http.put(url, headers={**writer, **JSON})
        tail = created.headers["stream-next-offset"]
        live = {"offset": tail, "live": "long-poll"}
        handed_on = FAST.handed_on
        unauthenticated = await http.get(url, params=live)
        assert unauthenticated.status_code == 401
        assert "www-authenticate" in unauthenticated.headers
        assert (await http.get(url, params=live, headers=other)).status_code == 403
        missing = await http.get("/v1/stream/chat-1/none", params=live, headers=writer)
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        bad = await http.get(url, params={**live, "offset": "x"}, headers=writer)
        assert bad.status_code == 400
        twice = await http.get(f"{url}?offset={tail}&offset={tail}&live=long-poll", headers=writer)
        assert twice.status_code == 400
        assert FAST.handed_on - handed_on == 5


def _answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One answer read off ``sock``: its head and its body (by its length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    assert len(body) == length, (head, body)
    return head, body


async def test_the_raw_answer_keeps_the_connection_alive_or_closes_it_as_asked() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url = "/v1/stream/lp/raw"
        start = (await http.put(url, headers=JSON)).headers["stream-next-offset"]
        for n in range(2):
            await http.post(url, content=b'{"n":%d}' % n, headers=JSON)
        port = int(srv.url.rsplit(":", 1)[1])

        def exchange() -> list[tuple[bytes, bytes]]:
            answers = []
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                request = f"GET {url}?offset={start}&live=long-poll HTTP/1.1\r\nhost: localhost\r\n"
                # Two on one connection, then one that asks it to close.
                for extra in ("", "", "connection: close\r\n"):
                    sock.sendall((request + extra + "\r\n").encode())
                    answers.append(_answer(sock))
                assert sock.recv(1) == b""  # closed by the server
            return answers

        answered = FAST.answered
        answers = await asyncio.to_thread(exchange)
        assert FAST.answered - answered == 3
        for head, body in answers:
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"\r\nserver: uvicorn\r\n" in head and b"\r\ndate: " in head
            assert body == b'[{"n":0},{"n":1}]'
        assert b"\r\nconnection: close" in answers[2][0]
        assert b"connection: close" not in answers[0][0]


async def test_transcript_readers_of_one_revision_share_one_encoded_page() -> None:
    limits = httpx.Limits(max_connections=READERS + 4)
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, limits=limits, timeout=20) as http,
    ):
        tid = "lp-transcript"
        created = await http.post("/v1/transcripts", json={"id": tid})
        assert created.status_code == 201, created.text
        url = f"/v1/stream/transcripts/{tid}"
        head = await http.head(url)
        tail = head.headers["stream-next-offset"]
        built, shared = PAGES.built, PAGES.shared
        answered, parked = FAST.answered, FAST.parked
        reads = [
            asyncio.create_task(http.get(url, params={"offset": tail, "live": "long-poll"}))
            for _ in range(READERS)
        ]
        message = {"messages": [{"role": "user", "content": "hello"}]}
        # Each reader is at the transcript's end: parked by the HTTP protocol
        # with the others, no page read (the app's long-poll, under h11, reads
        # the empty page at its offset, then parks).
        await until(
            lambda: FAST.parked - parked + PAGES.built + PAGES.shared - built - shared >= READERS,
            timeout=10,
        )
        at_end = FAST.parked - parked
        assert at_end in (0, READERS)
        appended = await http.post(f"/v1/transcripts/{tid}/messages", json=message)
        assert appended.status_code == 201, appended.text
        answers = await asyncio.gather(*reads)
        assert [a.status_code for a in answers] == [200] * READERS
        assert len({a.content for a in answers}) == 1
        assert b"hello" in answers[0].content
        if at_end:
            # The page after the append, encoded once, for all of them.
            assert (PAGES.built - built, PAGES.shared - shared) == (1, 0)
        else:
            # One page before the append, one after: each encoded once.
            assert PAGES.built - built == 2
            assert PAGES.shared - shared == 2 * READERS - 2
        # Answered in front of the app, as a generic stream's long-poll.
        assert FAST.answered - answered == READERS
        assert answers[0].headers["stream-cursor"] and answers[0].headers["etag"]
        assert answers[0].headers["x-content-type-options"] == "nosniff"
