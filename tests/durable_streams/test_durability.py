"""Durable Streams on the SQLite store survive SIGKILL: every acknowledged
create, append, close, fork and delete is there after a restart, with the
same offsets, producer state, closure and expiry (docs/protocol.md, "Where
streams live").

- A real ``tsync serve`` killed with SIGKILL and started again on the same
  data folder, read through the HTTP face before and after.
- The same with appends in flight: what was acknowledged is there, what was
  not is there whole and in order, or not at all.
- The registry on a ``SQLiteStreamLog`` (no server): whatever operations it
  accepted, a registry loaded from the file holds the same streams; a write
  the log refuses changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.store.sqlite.streams import STREAMS_FILE, SQLiteStreamLog
from server.streams.model import Stream, StreamError
from server.streams.registry import Limits, StreamRegistry
from tests.support.servers import ServerProcess

_T = TypeVar("_T")


def sync(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """One registry operation (a coroutine that never waits on these stores), run."""
    return asyncio.run(coroutine)


S = "/v1/stream/"
BYTES = {"content-type": "application/octet-stream"}
JSON = {"content-type": "application/json"}
TEXT = {"content-type": "text/plain"}


def producer(pid: str, epoch: int, seq: int) -> dict[str, str]:
    return {"producer-id": pid, "producer-epoch": str(epoch), "producer-seq": str(seq)}


def seen(http: httpx.Client, path: str, offsets: list[str]) -> dict[str, Any]:
    """What a client can learn about a stream: HEAD, and reads from the
    start and from each of ``offsets``."""
    head = http.head(S + path)
    if head.status_code != 200:
        return {"status": head.status_code}
    meta = {
        k: head.headers.get(k)
        for k in (
            "content-type", "stream-next-offset", "stream-closed", "stream-ttl",
            "stream-expires-at", "etag",
        )
    }  # fmt: skip
    reads = {}
    for offset in ["-1", *offsets]:
        page = http.get(S + path, params={"offset": offset})
        reads[offset] = (
            page.status_code,
            page.content,
            page.headers.get("stream-next-offset"),
            page.headers.get("stream-closed"),
        )
    return {"status": 200, "meta": meta, "reads": reads}


def test_every_acknowledged_change_survives_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "log")
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            given: list[str] = []  # every offset the server gave

            def ok(response: httpx.Response, status: int = 204) -> httpx.Response:
                assert response.status_code == status, (response.status_code, response.text)
                if "stream-next-offset" in response.headers:
                    given.append(response.headers["stream-next-offset"])
                return response

            # Bytes, not all of them UTF-8, each append one message.
            ok(http.put(S + "bytes", headers=BYTES), 201)
            offsets = []
            for chunk in (b"\x00\xff\xfe", b"second", bytes(range(256)), b"\n\r\n"):
                offsets.append(
                    ok(http.post(S + "bytes", content=chunk, headers=BYTES)).headers[
                        "stream-next-offset"
                    ]
                )
            # JSON: arrays flattened one level, values as written.
            ok(http.put(S + "json", headers=JSON, content=b'[{"a": 1}, "\\u00e9t\\u00e9"]'), 201)
            ok(http.post(S + "json", headers=JSON, content=b'[[1, 2], null, 1.5e300, "a,b"]'))
            ok(http.post(S + "json", headers=JSON, content=b'{"nested": {"x": [true]}}'))
            # A fork of each at an earlier offset, a JSON fork with a sub-offset,
            # each with appends of its own.
            fork = {"stream-forked-from": S + "bytes", "stream-fork-offset": offsets[1]}
            ok(http.put(S + "fork", headers=fork), 201)
            ok(http.post(S + "fork", content=b"own", headers=BYTES))
            json_fork = {
                "stream-forked-from": S + "json",
                "stream-fork-offset": "0000000000000000_0000000000000000",
                "stream-fork-sub-offset": "1",
            }
            ok(http.put(S + "jfork", headers=json_fork), 201)
            ok(http.post(S + "jfork", headers=JSON, content=b'"mine"'))
            ok(http.post(S + "bytes", content=b"after the forks", headers=BYTES))
            # Closed with a last append, and closed when created.
            ok(http.put(S + "closed", headers=TEXT, content=b"hello "), 201)
            ok(http.post(S + "closed", headers={**TEXT, "stream-closed": "true"}, content=b"bye"))
            ok(http.put(S + "born-closed", headers={**TEXT, "stream-closed": "true"}), 201)
            # An idempotent producer: epoch 0, then a new epoch; another closes.
            ok(http.put(S + "produced", headers=TEXT), 201)
            for seq in range(3):
                ok(
                    http.post(
                        S + "produced", headers={**TEXT, **producer("p", 0, seq)}, content=f"{seq}"
                    ),
                    200,
                )
            for who, epoch, body in (("p", 1, "e1"), ("q", 7, "q")):
                ok(
                    http.post(
                        S + "produced", headers={**TEXT, **producer(who, epoch, 0)}, content=body
                    ),
                    200,
                )
            ok(http.put(S + "producer-closed", headers=TEXT), 201)
            closing = {**TEXT, **producer("c", 2, 0), "stream-closed": "true"}
            ok(http.post(S + "producer-closed", headers=closing, content=b"last"), 200)
            # Stream-Seq.
            ok(http.put(S + "seq", headers=TEXT), 201)
            ok(http.post(S + "seq", headers={**TEXT, "stream-seq": "b5"}, content="x"))
            # TTLs: one alive, two expired (one swept by a read, one never looked
            # at again), one Expires-At passed.
            ok(http.put(S + "alive", headers={**TEXT, "stream-ttl": "3600"}, content="a"), 201)
            ok(http.put(S + "expired-read", headers={**TEXT, "stream-ttl": "1"}), 201)
            ok(http.put(S + "expired-unread", headers={**TEXT, "stream-ttl": "1"}), 201)
            soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
            ok(http.put(S + "expires-at", headers={**TEXT, "stream-expires-at": soon}), 201)
            # Deleted for good; deleted while a fork reads through it.
            ok(http.put(S + "deleted", headers=TEXT, content="gone"), 201)
            ok(http.delete(S + "deleted"))
            ok(http.put(S + "source", headers=TEXT, content="inherited "), 201)
            ok(http.put(S + "child", headers={"stream-forked-from": S + "source"}), 201)
            ok(http.post(S + "child", headers=TEXT, content="own"))
            ok(http.delete(S + "source"))
            time.sleep(1.2)
            assert http.get(S + "expired-read", params={"offset": "-1"}).status_code == 404

            names = [
                "bytes", "json", "fork", "jfork", "closed", "born-closed", "produced",
                "producer-closed", "seq", "alive", "expired-read", "expired-unread",
                "expires-at", "deleted", "source", "child",
            ]  # fmt: skip
            before = {name: seen(http, name, sorted(set(given))) for name in names}
        assert before["expired-unread"] == {"status": 404}
        assert before["source"] == {"status": 410}
        assert before["child"]["reads"]["-1"][1] == b"inherited own"
        assert len(given) > 20

        server.kill()
        assert server.proc is not None and server.proc.returncode == -9
        server.start()

        with httpx.Client(base_url=server.url, timeout=10) as http:
            after = {name: seen(http, name, sorted(set(given))) for name in names}
            assert after == before
            # A producer's retries are duplicates; its epoch and sequence go on.
            again = http.post(S + "produced", headers={**TEXT, **producer("p", 1, 0)}, content="e1")
            assert again.status_code == 204 and again.headers["producer-seq"] == "0"
            stale = http.post(S + "produced", headers={**TEXT, **producer("p", 0, 3)}, content="x")
            assert stale.status_code == 403 and stale.headers["producer-epoch"] == "1"
            gap = http.post(S + "produced", headers={**TEXT, **producer("p", 1, 2)}, content="x")
            assert gap.status_code == 409 and gap.headers["producer-expected-seq"] == "1"
            assert (
                http.post(S + "produced", headers={**TEXT, **producer("q", 7, 0)}, content="q")
            ).status_code == 204
            next_ = http.post(S + "produced", headers={**TEXT, **producer("p", 1, 1)}, content="n")
            assert next_.status_code == 200
            assert (
                next_.headers["stream-next-offset"]
                > before["produced"]["meta"]["stream-next-offset"]
            )
            assert http.get(S + "produced", params={"offset": "-1"}).content == b"012e1qn"
            # The closing producer's retry is a duplicate of the close; others are refused.
            retry = http.post(S + "producer-closed", headers=closing, content=b"last")
            assert retry.status_code == 204 and retry.headers["stream-closed"] == "true"
            refused = http.post(S + "closed", headers=TEXT, content=b"more")
            assert refused.status_code == 409 and refused.headers["stream-closed"] == "true"
            # Stream-Seq goes on from where it was.
            assert (
                http.post(S + "seq", headers={**TEXT, "stream-seq": "b3"}, content="y")
            ).status_code == 409
            # A soft-deleted path is still taken; a deleted one is free again.
            assert http.put(S + "source", headers=TEXT).status_code == 409
            assert http.put(S + "deleted", headers=TEXT).status_code == 201
            # The restarted server goes on appending and waking its readers.
            offset = after["fork"]["meta"]["stream-next-offset"]

            async def poll_and_append() -> httpx.Response:
                async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                    waiting = asyncio.create_task(
                        client.get(S + "fork", params={"offset": offset, "live": "long-poll"})
                    )
                    await asyncio.sleep(0.3)
                    await client.post(S + "fork", content=b"later", headers=BYTES)
                    return await waiting

            woken = asyncio.run(poll_and_append())
            assert woken.status_code == 200 and woken.content == b"later"
            # Deleting the fork takes its soft-deleted source with it, on disk too.
            assert http.delete(S + "child").status_code == 204
        server.kill()
        server.start()
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.head(S + "child").status_code == 404
            assert http.head(S + "source").status_code == 404
            assert http.get(S + "fork", params={"offset": offset}).content == b"later"
    finally:
        server.kill()
    assert "Traceback" not in (tmp_path / "log").read_text()


def test_appends_in_flight_at_sigkill_are_there_whole_or_not_at_all(tmp_path: Path) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "log")
    server.start()
    writers = 8
    acked: dict[int, list[tuple[int, str]]] = {w: [] for w in range(writers)}
    enough = 400

    async def write(
        client: httpx.AsyncClient, w: int, killed: asyncio.Event, ready: asyncio.Event
    ) -> None:
        seq = 0
        while not killed.is_set():
            body = f"{w}:{seq};".encode()
            try:
                response = await client.post(
                    f"{S}w{w}", content=body, headers={**TEXT, **producer(f"w{w}", 0, seq)}
                )
            except httpx.HTTPError:
                return
            assert response.status_code == 200, response.text
            acked[w].append((seq, response.headers["stream-next-offset"]))
            seq += 1
            if sum(len(a) for a in acked.values()) >= enough:
                ready.set()

    async def run() -> None:
        killed, ready = asyncio.Event(), asyncio.Event()
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            for w in range(writers):
                assert (await client.put(f"{S}w{w}", headers=TEXT)).status_code == 201
            tasks = [asyncio.create_task(write(client, w, killed, ready)) for w in range(writers)]
            async with asyncio.timeout(60):
                await ready.wait()
            server.kill()  # SIGKILL with appends in flight
            killed.set()
            await asyncio.gather(*tasks)

    try:
        asyncio.run(run())
        server.start()
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for w in range(writers):
                read = http.get(f"{S}w{w}", params={"offset": "-1"})
                parts = read.text.split(";")[:-1]
                # In order, once each, and every acknowledged one.
                assert parts == [f"{w}:{seq}" for seq in range(len(parts))]
                assert len(parts) >= len(acked[w])
                for seq, offset in acked[w]:
                    at = http.get(f"{S}w{w}", params={"offset": offset})
                    assert at.text == "".join(f"{w}:{s};" for s in range(seq + 1, len(parts)))
                # The producer goes on from the last append the file holds.
                more = http.post(
                    f"{S}w{w}", content=b"x", headers={**TEXT, **producer(f"w{w}", 0, len(parts))}
                )
                assert more.status_code == 200
                if parts:
                    retry = http.post(
                        f"{S}w{w}",
                        content=f"{w}:{len(parts) - 1};",
                        headers={**TEXT, **producer(f"w{w}", 0, len(parts) - 1)},
                    )
                    assert retry.status_code == 204
    finally:
        server.kill()


# --- the registry on its log, without a server -----------------------------------------------


def state(registry: StreamRegistry, paths: Any = ()) -> dict[str, Any]:
    """Everything a registry holds that a log must give back (``paths``: the
    streams to read first, on a registry that reads them on demand)."""
    for path in paths:
        registry.hold(path)

    def one(s: Stream) -> tuple[Any, ...]:
        return (
            s.content_type, s.created_at, s.ttl_s, s.expires_at, s.expires_at_ts, s.tail,
            s.size, s.closed, s.closed_by, s.refs, s.soft_deleted, s.forked_from, s.fork_offset,
            s.fork_sub_offset, s.stream_seq,
            {k: (p.epoch, p.last_seq, p.updated) for k, p in s.producers.items()},
            [(m.offset, m.data, m.values) for m in s.messages], s.offsets,
        )  # fmt: skip

    streams = registry._streams
    return {"bytes": registry.size, "streams": {p: one(s) for p, s in streams.items()}}


PATHS = ["/a", "/b", "/c"]
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
operation = st.one_of(
    st.tuples(
        st.just("create"),
        st.sampled_from(PATHS),
        st.sampled_from(["application/json", "application/octet-stream"]),
        st.sampled_from([None, *PATHS]),
        st.booleans(),
        st.integers(0, 2),
    ),
    st.tuples(
        st.just("append"),
        st.sampled_from(PATHS),
        st.binary(min_size=1, max_size=8) | json_value.map(lambda v: json.dumps(v).encode()),
        st.sampled_from([None, ("p", 0), ("p", 1), ("q", 0)]),
        st.sampled_from(["next", "next", 0, 2]),
        st.booleans(),
    ),
    st.tuples(st.just("delete"), st.sampled_from(PATHS)),
)
operations = st.lists(operation, max_size=25)


async def concrete(registry: StreamRegistry, operation: tuple[Any, ...]) -> tuple[Any, ...]:
    """The request ``operation`` stands for, given what ``registry`` holds:
    a fork's offset, the content type and a producer's next sequence."""
    match operation:
        case ("create", path, content_type, source, closed, sub):
            fork_offset = None
            stream = await registry.get(source) if source else None
            if stream is not None and stream.offsets:
                fork_offset = stream.offsets[len(stream.offsets) // 2]
            sub = sub if fork_offset else 0
            return ("create", path, None if source else content_type, source, closed,
                    fork_offset, sub)  # fmt: skip
        case ("append", path, body, who, seq, close):
            stream = await registry.get(path)
            if seq == "next":  # mostly the request a producer sends next
                known = stream.producers.get(who[0]) if stream and who else None
                seq = 0 if known is None or known.epoch != who[1] else known.last_seq + 1
            content_type = stream.content_type if stream else "text/plain"
            producer = None if who is None else (who[0], who[1], seq)
            return ("append", path, body, content_type, producer, close)
    return operation


async def perform(registry: StreamRegistry, request: tuple[Any, ...]) -> object:
    """Make a ``concrete`` request; what was answered (``("refused", status)``
    for a ``StreamError``)."""
    try:
        match request:
            case ("create", path, content_type, source, closed, fork_offset, sub):
                stream, created = await registry.create(
                    path,
                    content_type=content_type,
                    ttl_s=None,
                    expires_at=None,
                    expires_at_ts=None,
                    body=b"",
                    closed=closed,
                    forked_from=source,
                    fork_offset=fork_offset,
                    fork_sub_offset=sub,
                )
                return (stream.tail, created, stream.closed)
            case ("append", path, body, content_type, producer, close):
                result = await registry.append(
                    path,
                    body,
                    content_type=content_type,
                    stream_seq=None,
                    producer=producer,
                    close=close,
                )
                return (
                    result.message.offset if result.message else None,
                    result.producer,
                    result.refused_closed,
                    result.closed_now,
                )
            case ("delete", path):
                await registry.delete(path)
    except StreamError as error:
        return ("refused", error.status)
    return None


def apply(registry: StreamRegistry, operation: tuple[Any, ...]) -> None:
    async def both() -> None:
        await perform(registry, await concrete(registry, operation))

    sync(both())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_a_registry_loaded_from_its_log_holds_what_it_accepted(ops: list[Any]) -> None:
    now = [1_000_000.0]
    with tempfile.TemporaryDirectory() as folder:
        registry = StreamRegistry(Limits(), clock=lambda: now[0], log=SQLiteStreamLog(folder))
        for operation in ops:
            now[0] += 1
            with contextlib.suppress(StreamError):
                apply(registry, operation)
        held = state(registry)
        registry.detach()
        loaded = StreamRegistry(Limits(), clock=lambda: now[0], log=SQLiteStreamLog(folder))
        assert len(loaded) == len(held["streams"])
        assert state(loaded, held["streams"]) == held
        loaded.detach()


class Refusing(SQLiteStreamLog):
    """A log whose writes fail once ``broken`` is set (a full disk)."""

    broken = False

    def _write(self, what: str, steps: Any) -> None:
        if self.broken:

            def fail(conn: sqlite3.Connection) -> None:
                steps(conn)
                raise sqlite3.OperationalError("database or disk is full")

            return super()._write(what, fail)
        return super()._write(what, steps)


def test_a_change_the_log_cannot_write_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    log = Refusing(tmp_path)
    registry = StreamRegistry(Limits(), log=log)
    create: dict[str, Any] = {
        "ttl_s": None, "expires_at": None, "expires_at_ts": None, "body": b"", "closed": False,
        "forked_from": None, "fork_offset": None, "fork_sub_offset": 0,
    }  # fmt: skip
    sync(registry.create("/s", content_type="text/plain", **create))
    sync(
        registry.append(
            "/s",
            b"kept",
            content_type="text/plain",
            stream_seq="1",
            producer=("p", 0, 0),
            close=False,
        )
    )
    held = state(registry)
    log.broken = True
    attempts: list[Callable[[], object]] = [
        lambda: sync(registry.append(
            "/s", b"lost", content_type="text/plain", stream_seq="2", producer=("p", 0, 1),
            close=True,
        )),
        lambda: sync(registry.close("/s", None)),
        lambda: sync(registry.delete("/s")),
        lambda: sync(registry.create("/t", content_type="text/plain", **create)),
    ]  # fmt: skip
    for attempt in attempts:
        with pytest.raises(StreamError) as refused:
            attempt()
        assert refused.value.status == 503
        assert state(registry) == held
    log.broken = False
    result = sync(
        registry.append(
            "/s",
            b"then",
            content_type="text/plain",
            stream_seq="2",
            producer=("p", 0, 1),
            close=False,
        )
    )
    assert result.producer is not None and result.producer.status == "accepted"
    registry.detach()
    again = StreamRegistry(Limits(), log=SQLiteStreamLog(tmp_path))
    assert [m.data for m in again.read(sync(again.live("/s")), None)] == [b"kept", b"then"]
    assert "/t" not in again._streams
    again.detach()


def test_the_log_is_a_file_of_its_own_in_the_data_folder(tmp_path: Path) -> None:
    log = SQLiteStreamLog(tmp_path / "data")
    log.close()
    assert (tmp_path / "data" / STREAMS_FILE).exists()
    conn = sqlite3.connect(tmp_path / "data" / STREAMS_FILE)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(Exception, match="newer"):
        SQLiteStreamLog(tmp_path / "data")


async def test_a_stream_log_that_cannot_be_opened_stops_the_start_with_one_line(
    tmp_path: Path,
) -> None:
    from server.config import load_config
    from server.web.application import StartupFailed, create_app

    folder = tmp_path / "data"
    SQLiteStreamLog(folder).close()
    conn = sqlite3.connect(folder / STREAMS_FILE)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    config = load_config({}, {"store": f"sqlite:{folder}"})
    app = create_app(config, configure_logging=False)
    with pytest.raises(StartupFailed, match=r"streams\.sqlite3: schema version 99 is newer"):
        async with app._lifespan_context(app.starlette):
            pass
