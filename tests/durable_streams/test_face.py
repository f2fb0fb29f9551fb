"""What the conformance suite does not ask and a production server must do:
the stream face behind the server's credentials and rights, its limits, and
the rules of the model held by properties (hypothesis)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import jwt
from hypothesis import given, settings
from hypothesis import strategies as st

from server.streams.model import StreamError
from server.streams.registry import Limits, StreamRegistry
from tests.support.servers import running_server

_T = TypeVar("_T")


def sync(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """One registry operation (a coroutine that never waits on these stores), run."""
    return asyncio.run(coroutine)


SECRET = "streams-suite-secret-0123456789abcdef"
TEXT = {"content-type": "text/plain"}


def token(**claims: object) -> str:
    return jwt.encode({"sub": "s", "exp": int(time.time()) + 600, **claims}, SECRET, "HS256")


async def test_streams_take_the_transcripts_credentials_and_rights_over_their_path() -> None:
    async with (
        running_server(jwt_secret=SECRET) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        url = "/v1/stream/chat-1/answer"
        assert (await http.put(url)).status_code == 401
        writer = {"authorization": f"Bearer {token(write=['chat-1/*'])}"}
        reader = {"authorization": f"Bearer {token(read=['chat-*'])}"}
        other = {"authorization": f"Bearer {token(read=['other-*'], write=['other-*'])}"}
        created = await http.put(url, headers={**writer, "content-type": "text/plain"})
        assert created.status_code == 201
        assert (
            await http.post(url, content=b"x", headers={**reader, "content-type": "text/plain"})
        ).status_code == 403
        assert (await http.get(url, headers=other)).status_code == 403
        read = await http.get(url, headers=reader, params={"offset": "-1"})
        assert read.status_code == 200
        # A preflight carries no credentials: it is answered all the same.
        assert (await http.options(url)).status_code == 204


async def test_the_face_refuses_past_its_limits_and_names_the_setting() -> None:
    async with (
        running_server(max_streams=2, max_stream_bytes=1000, max_http_body_bytes=600) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        text = {"content-type": "text/plain"}
        assert (await http.put("/v1/stream/a", headers=text)).status_code == 201
        assert (await http.put("/v1/stream/b", headers=text)).status_code == 201
        full = await http.put("/v1/stream/c", headers=text)
        assert full.status_code == 429 and "max_streams" in full.text
        big = await http.post("/v1/stream/a", content=b"x" * 700, headers=text)
        assert big.status_code == 413 and "max_http_body_bytes" in big.text
        assert (
            await http.post("/v1/stream/a", content=b"x" * 600, headers=text)
        ).status_code == 204
        over = await http.post("/v1/stream/b", content=b"y" * 500, headers=text)
        assert over.status_code == 507 and "max_stream_bytes" in over.text
        # What was accepted stays.
        read = await http.get("/v1/stream/a", params={"offset": "-1"})
        assert read.content == b"x" * 600
        # Deleting gives the room back.
        assert (await http.delete("/v1/stream/a")).status_code == 204
        assert (
            await http.post("/v1/stream/b", content=b"y" * 500, headers=text)
        ).status_code == 204


def _create(registry: StreamRegistry, path: str, **options: object) -> None:
    defaults: dict[str, object] = {
        "content_type": "application/octet-stream",
        "ttl_s": None,
        "expires_at": None,
        "expires_at_ts": None,
        "body": b"",
        "closed": False,
        "forked_from": None,
        "fork_offset": None,
        "fork_sub_offset": 0,
    }
    sync(registry.create(path, **{**defaults, **options}))  # type: ignore[arg-type]


def _append(registry: StreamRegistry, path: str, data: bytes) -> str:
    result = sync(registry.append(
        path, data, content_type="application/octet-stream", stream_seq=None, producer=None,
        close=False,
    ))  # fmt: skip
    assert result.message is not None
    return result.message.offset


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=12),
    st.data(),
)
def test_a_fork_reads_its_source_up_to_the_fork_then_its_own_appends(
    chunks: list[bytes], data: st.DataObject
) -> None:
    registry = StreamRegistry(Limits())
    _create(registry, "/s")
    offsets = [_append(registry, "/s", chunk) for chunk in chunks]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    cut = data.draw(st.integers(0, len(chunks)))
    fork_offset = offsets[cut - 1] if cut else "0000000000000000_0000000000000000"
    _create(registry, "/f", forked_from="/s", fork_offset=fork_offset)
    own = data.draw(st.lists(st.binary(min_size=1, max_size=20), max_size=5))
    for chunk in own:
        _append(registry, "/f", chunk)
    _append(registry, "/s", b"after the fork")  # never seen by the fork
    fork = sync(registry.live("/f"))
    read = registry.read(fork, None)
    assert [m.data for m in read] == chunks[:cut] + own
    read_offsets = [m.offset for m in read]
    assert read_offsets == sorted(read_offsets)
    # Resuming from any offset gives exactly the rest.
    for index, message in enumerate(read):
        assert [m.data for m in registry.read(fork, message.offset)] == [
            m.data for m in read[index + 1 :]
        ]


@given(st.lists(st.text(max_size=5), max_size=5))
def test_json_mode_flattens_one_level_and_refuses_empty_appends(values: list[str]) -> None:
    import json

    registry = StreamRegistry(Limits())
    _create(registry, "/j", content_type="application/json")
    body = json.dumps(values).encode()
    if not values:
        try:
            sync(registry.append(
                "/j", body, content_type="application/json", stream_seq=None, producer=None,
                close=False,
            ))  # fmt: skip
        except StreamError as error:
            assert error.status == 400
        else:
            raise AssertionError("an empty array was appended")
        return
    sync(
        registry.append(
            "/j", body, content_type="application/json", stream_seq=None, producer=None, close=False
        )
    )
    stream = sync(registry.live("/j"))
    from server.streams.model import json_body

    assert json.loads(json_body(registry.read(stream, None))) == values


def test_json_with_a_lone_surrogate_is_refused_not_a_500() -> None:
    registry = StreamRegistry(Limits())
    _create(registry, "/j", content_type="application/json")
    for body in (b'["\\ud800"]', b'{"a": "x\\udfff"}'):
        try:
            sync(registry.append(
                "/j", body, content_type="application/json", stream_seq=None, producer=None,
                close=False,
            ))  # fmt: skip
        except StreamError as error:
            assert error.status == 400 and "surrogate" in error.reason
        else:
            raise AssertionError(f"{body!r} was appended")
    assert sync(registry.live("/j")).size == 0


def test_an_sse_line_keeps_its_leading_space_and_others_stay_as_the_suite_expects() -> None:
    from server.streams.sse import sse_data

    framed = sse_data(" upon\nline2\r\n  two")
    assert framed == b"data:  upon\ndata:line2\ndata:   two\n\n"
    # A reader removes one space after the colon (the SSE rules): the text comes back.
    lines = [line[5:] for line in framed.decode().split("\n") if line.startswith("data:")]
    assert [line[1:] if line.startswith(" ") else line for line in lines] == [
        " upon",
        "line2",
        "  two",
    ]
