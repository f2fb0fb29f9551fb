"""The Durable Streams face as tight as the WebSocket face, on the memory,
SQLite and Redis stores: a fork needs the right to read its source, a
stream has one name whatever the spelling of its URL, producers are
bounded and counted, and malformed input is a 400 problem (never a 500)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from server.store.redis import RedisStore
from server.store.sqlite import SQLiteStore
from tests.conftest import require_binary
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, running_server

SECRET = "streams-tight-secret-0123456789abcdef"
TEXT = {"content-type": "text/plain"}
JSON = {"content-type": "application/json"}
STORES = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]


def bearer(**claims: object) -> dict[str, str]:
    payload = {"sub": "s", "exp": int(time.time()) + 600, **claims}
    return {"authorization": f"Bearer {jwt.encode(payload, SECRET, 'HS256')}"}


@pytest.fixture(scope="module")
def redis_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], RedisServer]]:
    """One Redis for the module's Redis cases, started on first use."""
    with contextlib.ExitStack() as stack:
        holder: list[RedisServer] = []

        def start() -> RedisServer:
            if not holder:
                binary = require_binary("redis-server")
                folder = tmp_path_factory.mktemp("redis")
                holder.append(stack.enter_context(RedisServer(binary, folder)))
            return holder[0]

        yield start


@contextlib.asynccontextmanager
async def served(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer], **settings: Any
) -> AsyncIterator[tuple[RunningServer, httpx.AsyncClient]]:
    made: Any = None
    if store == "sqlite":
        made = SQLiteStore(tmp_path / "data")
    elif store == "redis":
        made = RedisStore(f"{redis_once().url}?prefix=t{uuid.uuid4().hex[:8]}:")
    async with (
        running_server(store=made, **settings) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        yield srv, http


def is_problem(answer: httpx.Response, status: int) -> bool:
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/problem+json"), answer.headers
    body = answer.json()
    assert body["status"] == status and body["detail"], body
    return True


# --- 1. forks and rights ---------------------------------------------------------------


@pytest.mark.parametrize("store", STORES)
async def test_a_fork_needs_the_right_to_read_its_source(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer]
) -> None:
    async with served(store, tmp_path, redis_once, jwt_secret=SECRET) as (_, http):
        owner = bearer(read=["secret/*"], write=["secret/*"])
        mallory = bearer(sub="mallory", read=["mallory/*"], write=["mallory/*"])
        secret = "/v1/stream/secret/s1"
        made = await http.put(secret, headers={**owner, **TEXT}, content=b"top")
        assert made.status_code == 201
        assert (await http.get(secret, headers=mallory)).status_code == 403
        fork = await http.put(
            "/v1/stream/mallory/f", headers={**mallory, **TEXT, "stream-forked-from": secret}
        )
        assert is_problem(fork, 403)
        assert "secret/s1" in fork.json()["detail"]
        # Nothing was made: not the fork, and the source counts no fork.
        missing = await http.get("/v1/stream/mallory/f", headers=mallory, params={"offset": "-1"})
        assert missing.status_code == 404
        assert (await http.delete(secret, headers=owner)).status_code == 204
        again = await http.put(secret, headers={**owner, **TEXT}, content=b"new")
        assert again.status_code == 201
        # One spelled with escapes is the same source, refused alike.
        spelled = await http.put(
            "/v1/stream/mallory/g",
            headers={**mallory, **TEXT, "stream-forked-from": "/v1/stream/secret%2Fs1"},
        )
        assert is_problem(spelled, 403)
        # A reader of the source may fork it, and reads it through the fork.
        reader = bearer(sub="r", read=["secret/*", "mine/*"], write=["mine/*"])
        mine = await http.put(
            "/v1/stream/mine/f", headers={**reader, **TEXT, "stream-forked-from": secret}
        )
        assert mine.status_code == 201
        read = await http.get("/v1/stream/mine/f", headers=reader, params={"offset": "-1"})
        assert read.content == b"new"


@pytest.mark.parametrize("store", STORES)
async def test_one_stream_has_one_name_whatever_its_spelling(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer]
) -> None:
    async with served(store, tmp_path, redis_once, jwt_secret=SECRET) as (_, http):
        admin = bearer(admin=True)
        made = await http.put("/v1/stream/x%3Fy", headers={**admin, **TEXT}, content=b"q")
        assert made.status_code == 201
        await http.put("/v1/stream/x", headers={**admin, **TEXT}, content=b"plain x")
        reader = bearer(read=["x?y"])
        read = await http.get("/v1/stream/x%3Fy", headers=reader, params={"offset": "-1"})
        assert read.status_code == 200 and read.content == b"q"
        # The other spellings are other names: refused by the same rule.
        assert (await http.get("/v1/stream/x", headers=reader)).status_code == 403
        other = await http.get("/v1/stream/x%253Fy", headers=reader, params={"offset": "-1"})
        assert other.status_code == 403
        # ``x%253Fy`` is the stream ``x%3Fy``, which does not exist: not ``x?y``
        # reached by a token with rights on ``x%3Fy`` only.
        literal = bearer(read=["x%3Fy"])
        assert (await http.get("/v1/stream/x%3Fy", headers=literal)).status_code == 403
        absent = await http.get("/v1/stream/x%253Fy", headers=literal, params={"offset": "-1"})
        assert absent.status_code == 404, absent.text
        assert (await http.get("/v1/stream/x%253Fy", headers=admin)).status_code == 404
        hashed = await http.put("/v1/stream/a%23b", headers={**admin, **TEXT}, content=b"h")
        assert hashed.status_code == 201
        back = await http.get("/v1/stream/a%23b", headers=bearer(read=["a#b"]))
        assert back.status_code == 200 and back.content == b"h"
        # A fork names its source as the URL does: decoded once.
        fork = await http.put(
            "/v1/stream/f", headers={**admin, **TEXT, "stream-forked-from": "/v1/stream/x%3Fy"}
        )
        assert fork.status_code == 201
        through = await http.get("/v1/stream/f", headers=admin, params={"offset": "-1"})
        assert through.content == b"q"


# --- 6. producers ------------------------------------------------------------------------


def producer(pid: str, seq: int = 0) -> dict[str, str]:
    return {"producer-id": pid, "producer-epoch": "0", "producer-seq": str(seq)}


@pytest.mark.parametrize("store", STORES)
async def test_producers_are_capped_per_stream_and_their_ids_bounded(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer]
) -> None:
    async with served(
        store, tmp_path, redis_once, max_stream_producers=3, max_producer_id_bytes=40
    ) as (srv, http):
        url = "/v1/stream/p"
        assert (await http.put(url, headers=TEXT)).status_code == 201
        for n in range(3):
            answer = await http.post(url, headers={**TEXT, **producer(f"p{n}")}, content=b"x")
            assert answer.status_code == 200
        full = await http.post(url, headers={**TEXT, **producer("p3")}, content=b"x")
        assert is_problem(full, 409) and "max_stream_producers" in full.json()["detail"]
        # Those it has go on (and their retries are still recognised).
        assert (
            await http.post(url, headers={**TEXT, **producer("p1", 1)}, content=b"y")
        ).status_code == 200
        assert (
            await http.post(url, headers={**TEXT, **producer("p1", 1)}, content=b"y")
        ).status_code == 204
        long = await http.post(url, headers={**TEXT, **producer("i" * 41)}, content=b"x")
        assert is_problem(long, 400) and "max_producer_id_bytes" in long.json()["detail"]
        # Their state counts with the stream's bytes: ids and state, not just 4 bytes.
        held = srv.app.state.streams.size
        assert held >= 4 + sum(len(f"p{n}") for n in range(3)) + 3 * 32


async def test_a_producers_state_counts_against_max_stream_bytes() -> None:
    async with (
        running_server(max_stream_bytes=2000, max_producer_id_bytes=600) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        url = "/v1/stream/p"
        assert (await http.put(url, headers=TEXT)).status_code == 201
        codes = [
            (await http.post(url, headers={**TEXT, **producer(f"{n:0600d}")}, content=b"x"))
            for n in range(5)
        ]
        assert [c.status_code for c in codes[:3]] == [200, 200, 200]
        assert is_problem(codes[3], 507)
        assert srv.app.state.streams.size <= 2000


def test_a_producer_is_found_by_its_id_not_by_a_scan() -> None:
    from server.streams.model import Producer, Stream

    stream = Stream(path="/s", content_type=None, created_at=0.0, last_access=0.0)
    for n in range(20_000):
        stream.put_producer(f"p{n}", Producer(0, 0, 0.0))
    many = _timed(lambda: stream.check_producer("p7", 0, 1, 10.0))
    stream = Stream(path="/s", content_type=None, created_at=0.0, last_access=0.0)
    stream.put_producer("p7", Producer(0, 0, 0.0))
    one = _timed(lambda: stream.check_producer("p7", 0, 1, 10.0))
    assert many < one * 20 + 5e-6, (many, one)


def _timed(call: Any) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200):
            call()
        best = min(best, (time.perf_counter() - start) / 200)
    return best


# --- 8. bad input -----------------------------------------------------------------------

BAD_READS = [
    {"offset": "1" * 4400 + "_1"},
    {"offset": "1_" + "1" * 4400},
    {"offset": "\u00b2_1"},
    {"offset": "\u0661_\u0661"},
    {"offset": "\u0660" * 16 + "_" + "\u0660" * 16},
    {"offset": "1_1"},
    {"offset": "-1", "cursor": "9" * 5000},
    {"offset": "now", "live": "long-poll", "cursor": "1" * 21},
]


@pytest.mark.parametrize("store", STORES)
async def test_malformed_input_is_a_400_problem_never_a_500(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer]
) -> None:
    async with served(store, tmp_path, redis_once) as (_, http):
        url = "/v1/stream/bad"
        assert (await http.put(url, headers=TEXT, content=b"x")).status_code == 201
        for params in BAD_READS:
            assert is_problem(await http.get(url, params=params), 400), params
        bad_headers = [
            {"stream-ttl": "9" * 5000},
            {"stream-ttl": "\u0661\u0660"},
            {"stream-forked-from": url, "stream-fork-offset": "1" * 4400 + "_1"},
            {"stream-forked-from": url, "stream-fork-offset": "\u0661_\u0661"},
            {
                "stream-forked-from": url,
                "stream-fork-offset": "0000000000000000_0000000000000000",
                "stream-fork-sub-offset": "9" * 5000,
            },
            {"stream-forked-from": "/v1/stream/\x01"},
        ]
        for n, extra in enumerate(bad_headers):
            sent = {k: v.encode() for k, v in {**TEXT, **extra}.items()}
            made = await http.put(f"/v1/stream/bad-{n}", headers=sent)
            assert is_problem(made, 400), extra
        for epoch, seq in (("9" * 5000, "0"), ("0", "9" * 5000), ("\u0661", "0"), ("0", "\u00b2")):
            headers = {**TEXT, "producer-id": "p", "producer-epoch": epoch, "producer-seq": seq}
            sent = {k: v.encode() for k, v in headers.items()}
            assert is_problem(await http.post(url, headers=sent, content=b"y"), 400)
        transcript = await http.get("/v1/stream/transcripts/t1", params={"offset": "\u00b2_1"})
        assert transcript.status_code in (400, 404), transcript.text


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("body", [b"NaN", b"[1, Infinity]", b"-Infinity", b"1e999", b"[-1e400]"])
async def test_json_mode_refuses_what_json_has_no_value_for(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer], body: bytes
) -> None:
    async with served(store, tmp_path, redis_once) as (_, http):
        url = "/v1/stream/j"
        assert (await http.put(url, headers=JSON)).status_code == 201
        assert is_problem(await http.post(url, headers=JSON, content=body), 400)
        assert is_problem(await http.put("/v1/stream/j2", headers=JSON, content=body), 400)
        assert (await http.post(url, headers=JSON, content=b"[1.5]")).status_code == 204
        read = await http.get(url, params={"offset": "-1"})
        assert read.json() == [1.5]


@pytest.mark.parametrize("store", STORES)
async def test_fork_chains_are_bounded_and_read_without_recursion(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer]
) -> None:
    depth = 40
    async with served(store, tmp_path, redis_once, max_fork_depth=depth) as (srv, http):
        assert (await http.put("/v1/stream/c0", headers=TEXT, content=b"0")).status_code == 201
        for n in range(1, depth + 1):
            made = await http.put(
                f"/v1/stream/c{n}",
                headers={**TEXT, "stream-forked-from": f"/v1/stream/c{n - 1}"},
                content=str(n % 10).encode(),
            )
            assert made.status_code == 201, made.text
        deeper = await http.put(
            "/v1/stream/too-deep", headers={**TEXT, "stream-forked-from": f"/v1/stream/c{depth}"}
        )
        assert is_problem(deeper, 400) and "max_fork_depth" in deeper.json()["detail"]
        want = "".join(str(n % 10) for n in range(depth + 1)).encode()
        read = await http.get(f"/v1/stream/c{depth}", params={"offset": "-1"})
        assert read.status_code == 200 and read.content == want
        if store == "redis":
            # Once the sources are copied, a read of the chain is one script.
            streams = srv.app.state.streams
            before = streams.port.reads
            again = await http.get(f"/v1/stream/c{depth}", params={"offset": "-1"})
            assert again.content == want
            assert streams.port.reads - before <= 2, streams.port.reads - before


def test_a_chain_deeper_than_the_recursion_limit_reads() -> None:
    """A log may hold a chain made before ``max_fork_depth`` (or under a
    larger one): reading it is a loop, not a recursion."""
    import asyncio

    from server.streams.registry import Limits, StreamRegistry

    registry = StreamRegistry(Limits(max_fork_depth=5000))

    async def build() -> bytes:
        await registry.create(
            "/s0", content_type="text/plain", ttl_s=None, expires_at=None, expires_at_ts=None,
            body=b"a", closed=False, forked_from=None, fork_offset=None, fork_sub_offset=0,
        )  # fmt: skip
        for n in range(1, 1500):
            await registry.create(
                f"/s{n}", content_type="text/plain", ttl_s=None, expires_at=None,
                expires_at_ts=None, body=b"b", closed=False, forked_from=f"/s{n - 1}",
                fork_offset=None, fork_sub_offset=0,
            )  # fmt: skip
        stream = await registry.live("/s1499")
        return b"".join(m.data for m in registry.read(stream, None))

    assert asyncio.run(build()) == b"a" + b"b" * 1499


async def test_every_refusal_of_the_face_is_a_problem_document() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        url = "/v1/stream/r"
        assert (await http.put(url, headers=TEXT)).status_code == 201
        gap = await http.post(url, headers={**TEXT, **producer("p", 3)}, content=b"x")
        assert is_problem(gap, 409) and gap.headers["producer-expected-seq"] == "0"
        assert (await http.post(url, headers={**TEXT, **producer("p")}, content=b"x")).is_success
        stale = {**TEXT, **producer("p"), "producer-epoch": "1"}
        assert (await http.post(url, headers=stale, content=b"y")).status_code == 200
        old = await http.post(url, headers={**TEXT, **producer("p", 1)}, content=b"z")
        assert is_problem(old, 403) and old.headers["producer-epoch"] == "1"
        assert is_problem(await http.post(url, headers=TEXT), 400)  # empty body
        assert is_problem(await http.get("/v1/stream/nope"), 404)
        assert is_problem(await http.post("/v1/stream/transcripts/t1", headers=TEXT), 405)
        assert (await http.post(url, headers={**TEXT, "stream-closed": "true"})).is_success
        closed = await http.post(url, headers=TEXT, content=b"late")
        assert is_problem(closed, 409) and closed.headers["stream-closed"] == "true"


@pytest.mark.parametrize("store", STORES)
async def test_the_owner_deletes_a_forked_stream_for_good_and_makes_it_again(
    store: str, tmp_path: Path, redis_once: Callable[[], RedisServer]
) -> None:
    async with served(store, tmp_path, redis_once) as (srv, http):
        src, mid, leaf = "/v1/stream/o/src", "/v1/stream/o/mid", "/v1/stream/o/leaf"
        assert (await http.put(src, headers=TEXT, content=b"ab")).status_code == 201
        assert (await http.post(src, headers=TEXT, content=b"cd")).status_code == 204
        fork = {**TEXT, "stream-forked-from": src}
        assert (await http.put(mid, headers=fork, content=b"M")).status_code == 201
        assert (await http.post(src, headers=TEXT, content=b"late")).status_code == 204
        assert (
            await http.put(leaf, headers={**TEXT, "stream-forked-from": mid}, content=b"L")
        ).status_code == 201
        # The protocol's delete: soft, the path held while forks read through it.
        assert (await http.delete(src)).status_code == 204
        assert (await http.put(src, headers=TEXT)).status_code == 409
        # The owner's: the forks keep what they shared, the path is free at once.
        assert (await http.delete(src, headers={"stream-detach-forks": "true"})).status_code == 204
        again = await http.put(src, headers=TEXT, content=b"new")
        assert again.status_code == 201
        assert (await http.get(mid, params={"offset": "-1"})).content == b"abcdM"
        assert (await http.get(leaf, params={"offset": "-1"})).content == b"abcdML"
        assert (await http.get(src, params={"offset": "-1"})).content == b"new"
        # Offsets are kept: a reader of the fork resumes where it was.
        first = await http.get(mid, params={"offset": "-1"})
        tail = first.headers["stream-next-offset"]
        assert (await http.post(mid, headers=TEXT, content=b"N")).status_code == 204
        assert (await http.get(mid, params={"offset": tail})).content == b"N"
        # A live stream with forks goes at once too; deleting its forks later is plain.
        assert (await http.delete(mid, headers={"stream-detach-forks": "true"})).status_code == 204
        assert (await http.get(mid)).status_code == 404
        assert (await http.get(leaf, params={"offset": "-1"})).content == b"abcdML"
        assert (await http.delete(leaf)).status_code == 204
        assert (await http.delete(src)).status_code == 204
        if store == "memory":
            assert srv.app.state.streams.size == 0


async def test_a_detached_fork_is_what_the_sqlite_file_holds(tmp_path: Path) -> None:
    src, fork = "/v1/stream/src", "/v1/stream/fork"
    async with (
        running_server(store=SQLiteStore(tmp_path)) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        assert (await http.put(src, headers=TEXT, content=b"ab")).status_code == 201
        made = await http.put(fork, headers={**TEXT, "stream-forked-from": src}, content=b"F")
        assert made.status_code == 201
        assert (await http.delete(src, headers={"stream-detach-forks": "true"})).status_code == 204
        assert (await http.put(src, headers=TEXT, content=b"new")).status_code == 201
    async with (
        running_server(store=SQLiteStore(tmp_path)) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        assert (await http.get(fork, params={"offset": "-1"})).content == b"abF"
        assert (await http.get(src, params={"offset": "-1"})).content == b"new"
        assert (await http.delete(src)).status_code == 204  # no fork holds it now
        assert (await http.get(src)).status_code == 404


@pytest.mark.redis
async def test_a_detachment_on_one_replica_is_what_another_reads(
    redis_once: Callable[[], RedisServer],
) -> None:
    url = f"{redis_once().url}?prefix=d{uuid.uuid4().hex[:8]}:"
    src, fork = "/v1/stream/src", "/v1/stream/fork"
    async with (
        running_server(store=RedisStore(url)) as a,
        running_server(store=RedisStore(url)) as b,
        httpx.AsyncClient(base_url=a.url) as on_a,
        httpx.AsyncClient(base_url=b.url) as on_b,
    ):
        assert (await on_a.put(src, headers=TEXT, content=b"ab")).status_code == 201
        made = await on_a.put(fork, headers={**TEXT, "stream-forked-from": src}, content=b"F")
        assert made.status_code == 201
        assert (await on_b.post(fork, headers=TEXT, content=b"G")).status_code == 204
        assert (await on_b.get(fork, params={"offset": "-1"})).content == b"abFG"
        detached = await on_a.delete(src, headers={"stream-detach-forks": "true"})
        assert detached.status_code == 204
        assert (await on_b.put(src, headers=TEXT, content=b"new")).status_code == 201
        assert (await on_b.get(fork, params={"offset": "-1"})).content == b"abFG"
        assert (await on_b.post(fork, headers=TEXT, content=b"H")).status_code == 204
        assert (await on_a.get(fork, params={"offset": "-1"})).content == b"abFGH"
        assert (await on_a.get(src, params={"offset": "-1"})).content == b"new"
