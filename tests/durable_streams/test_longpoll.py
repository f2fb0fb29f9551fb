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
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.streams.http import ANSWERS
from server.streams.longpoll import FAST
from server.streams.transcripts import PAGES, WAITING
from tests.support.servers import running_server
from tests.support.waiting import until

READERS = 12
SECRET = "longpoll-suite-secret-0123456789abcdef"
JSON = {"content-type": "application/json"}


def _parked(srv: Any) -> int:
    """Live reads the server's HTTP protocol counts as parked now."""
    counters = srv.server.config.http_protocol_class.counters
    return int(counters.parked)


def _taken(srv: Any) -> bool:
    """Whether the server's HTTP protocol lets the app take a transcript's
    long-poll with no task (httptools; not h11: ``TRANSCRIPT_SYNC_HTTP_PARSER``)."""
    return issubclass(srv.server.config.http_protocol_class, HttpToolsProtocol)


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
    return _answers(sock, 1)[0]


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


# --- a transcript's long-poll taken by the HTTP protocol (no task per read) ---


LIMITS = httpx.Limits(max_connections=20)


def _answers(sock: socket.socket, count: int) -> list[tuple[bytes, bytes]]:
    """``count`` answers read off ``sock`` (pipelined ones may come in one
    segment): each one's head and body (by its length)."""
    data = b""
    answers: list[tuple[bytes, bytes]] = []
    while len(answers) < count:
        head, sep, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if sep and len(rest) >= length:
            answers.append((head, rest[:length]))
            data = rest[length:]
            continue
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    assert data == b""
    return answers


def _head_lines(head: bytes) -> list[bytes]:
    """An answer's head but for what differs from one answer to the next."""
    return sorted(
        line
        for line in head.split(b"\r\n")
        if not line.lower().startswith((b"date:", b"stream-cursor:"))
    )


async def _transcript(http: httpx.AsyncClient, tid: str, *contents: str) -> tuple[str, str]:
    """A transcript with ``contents`` appended: its stream's URL and its first offset."""
    assert (await http.post("/v1/transcripts", json={"id": tid})).status_code == 201
    url = f"/v1/stream/transcripts/{tid}"
    start = (await http.head(url, params={"offset": "-1"})).headers["stream-next-offset"]
    for content in contents:
        message = {"messages": [{"role": "user", "content": content}]}
        assert (await http.post(f"/v1/transcripts/{tid}/messages", json=message)).status_code == 201
    return url, start


async def test_a_ready_read_is_answered_at_once_with_the_apps_very_answer() -> None:
    """A read whose page the transcript's window holds is answered from the
    HTTP protocol as it arrives (no task), byte for byte as the async way
    answers it (the same read with a proxy header, which goes that way),
    pipelined reads in order, and the connection goes on as after any other
    answer."""
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url, start = await _transcript(http, "lp-at-once", "one", "two")
        port = int(srv.url.rsplit(":", 1)[1])
        request = f"GET {url}?offset={start}&live=long-poll HTTP/1.1\r\nhost: localhost\r\n"

        def exchange() -> list[tuple[bytes, bytes]]:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                # One at once; then one the async way; then two pipelined
                # in one write and a health check (the first's cycle is not
                # the protocol's any more when it is answered: the async way).
                sock.sendall((request + "\r\n").encode())
                answers = _answers(sock, 1)
                sock.sendall((request + "x-forwarded-for: 10.0.0.1\r\n\r\n").encode())
                answers += _answers(sock, 1)
                health = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n"
                sock.sendall((request + "\r\n" + request + "\r\n").encode() + health)
                answers += _answers(sock, 3)
            return answers

        at_once, answered = FAST.at_once, FAST.answered
        first, through_app, second, third, health = await asyncio.to_thread(exchange)
        assert FAST.at_once - at_once == (1 if _taken(srv) else 0)
        assert FAST.answered - answered == 4
        assert second[1] == third[1] and _head_lines(second[0]) == _head_lines(third[0])
        for head, body in (first, second, through_app):
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert body == b"[" + body[1:]  # (a JSON array)
            assert b'"one"' in body and b'"two"' in body
        assert first[1] == second[1] == through_app[1]
        assert _head_lines(first[0]) == _head_lines(second[0]) == _head_lines(through_app[0])
        assert b"\r\nstream-cursor: " in first[0]
        assert health[0].startswith(b"HTTP/1.1 200 OK\r\n")


async def test_readers_parked_at_the_end_are_answered_together_or_with_a_204() -> None:
    """Readers at the transcript's end are parked by the HTTP protocol (no
    task each), each with its own deadline: those whose wait ran out get the
    app's 204, the others the page after the next append, all in one pass;
    the parked share of the connection cap is given back."""
    async with (
        running_server(stream_long_poll_s=1.0) as srv,
        httpx.AsyncClient(
            base_url=srv.url, timeout=10, limits=httpx.Limits(max_connections=20)
        ) as http,
    ):
        url, start = await _transcript(http, "lp-parked")
        live = {"offset": start, "live": "long-poll"}
        parked, answered = FAST.parked, FAST.answered
        early = asyncio.create_task(http.get(url, params=live))
        await until(lambda: _parked(srv) == 1, timeout=5)
        assert FAST.parked - parked == (1 if _taken(srv) else 0)
        began = time.monotonic()
        quiet = await early  # nothing came: its wait ran out
        assert time.monotonic() - began >= 0.5
        assert quiet.status_code == 204
        assert quiet.headers["stream-next-offset"] == start
        assert quiet.headers["stream-up-to-date"] == "true"
        assert int(quiet.headers["stream-cursor"]) > 0
        through_app = await http.get(url, params=live, headers={"x-forwarded-for": "10.0.0.1"})
        assert through_app.status_code == 204
        assert {k: v for k, v in quiet.headers.items() if k not in ("date", "stream-cursor")} == {
            k: v for k, v in through_app.headers.items() if k not in ("date", "stream-cursor")
        }

        reads = [asyncio.create_task(http.get(url, params=live)) for _ in range(5)]
        await until(lambda: _parked(srv) == 5, timeout=5)
        assert FAST.parked - parked == (6 if _taken(srv) else 0)
        message = {"messages": [{"role": "user", "content": "hello"}]}
        assert (
            await http.post(f"/v1/transcripts/{tid_of(url)}/messages", json=message)
        ).status_code == 201
        answers = await asyncio.gather(*reads)
        assert [a.status_code for a in answers] == [200] * 5
        assert len({a.content for a in answers}) == 1 and b"hello" in answers[0].content
        assert FAST.answered - answered == 7
        await until(lambda: _parked(srv) == 0, timeout=5)


def tid_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def test_a_parked_read_of_a_deleted_transcript_gets_the_apps_answer() -> None:
    """When a parked read's wait fails (its transcript deleted), it is
    handed back to the app, which answers it as always; a reader that went
    away meanwhile is simply forgotten."""
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url, start = await _transcript(http, "lp-deleted")
        port = int(srv.url.rsplit(":", 1)[1])
        parked = FAST.parked
        gone = socket.create_connection(("127.0.0.1", port), timeout=10)
        gone.sendall(
            f"GET {url}?offset={start}&live=long-poll HTTP/1.1\r\nhost: localhost\r\n\r\n".encode()
        )
        read = asyncio.create_task(http.get(url, params={"offset": start, "live": "long-poll"}))
        await until(lambda: _parked(srv) == 2, timeout=5)
        assert FAST.parked - parked == (2 if _taken(srv) else 0)
        gone.close()
        await until(lambda: _parked(srv) == 1, timeout=5)
        assert (await http.delete(f"/v1/transcripts/{tid_of(url)}")).status_code == 204
        answer = await read
        after = await http.get(url, params={"offset": start, "live": "long-poll"})
        assert answer.status_code == after.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"
        await until(lambda: _parked(srv) == 0, timeout=5)


async def test_a_parked_read_with_a_request_pipelined_behind_it_answers_both_in_order() -> None:
    """A parked read whose client pipelined another request behind it is
    no longer its connection's current request when the append comes: it is
    handed back to the app, which sends it, and then the next one goes."""
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url, start = await _transcript(http, "lp-pipelined")
        port = int(srv.url.rsplit(":", 1)[1])
        parked, answered = FAST.parked, FAST.answered
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            read = f"GET {url}?offset={start}&live=long-poll HTTP/1.1\r\nhost: localhost\r\n\r\n"
            health = "GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n"
            sock.sendall((read + health).encode())
            await until(lambda: _parked(srv) == 1, timeout=5)
            assert FAST.parked - parked == (1 if _taken(srv) else 0)
            message = {"messages": [{"role": "user", "content": "behind"}]}
            appended = await http.post(f"/v1/transcripts/{tid_of(url)}/messages", json=message)
            assert appended.status_code == 201
            (head, body), (health_head, _) = await asyncio.to_thread(_answers, sock, 2)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b'"behind"' in body
        assert health_head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert FAST.answered - answered == 1
        await until(lambda: _parked(srv) == 0, timeout=5)


async def test_reads_parked_at_shutdown_get_a_task_each_and_the_shutdowns_answer() -> None:
    """The server's shutdown hands every parked read back to the app (a
    task each), so that it answers them, or cancels them past its grace, as
    any request in flight: no reader is left hanging on a parked read."""
    sock = None
    async with (
        running_server(graceful_shutdown_s=1.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        url, start = await _transcript(http, "lp-shutdown")
        port = int(srv.url.rsplit(":", 1)[1])
        parked = FAST.parked
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        read = f"GET {url}?offset={start}&live=long-poll HTTP/1.1\r\nhost: localhost\r\n\r\n"
        sock.sendall(read.encode())
        await until(lambda: _parked(srv) == 1, timeout=5)
        assert FAST.parked - parked == len(WAITING) == (1 if _taken(srv) else 0)
    assert not WAITING
    with sock:
        answer = await asyncio.to_thread(sock.recv, 65536)
    assert answer.startswith(b"HTTP/1.1 5")
