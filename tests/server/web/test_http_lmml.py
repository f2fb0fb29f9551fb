"""LMML over HTTP: import, export and chat rendering against a real server."""

from __future__ import annotations

import base64
import io
import zipfile
from typing import Any

import httpx
import msgspec
import pytest

from protocol import lmml
from protocol.chat import openai_messages
from protocol.digest import messages_digest
from protocol.types import Message
from protocol.validation import parse_messages
from protocol.wire import Baseline
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

NARRATIVE = (
    "A chat about notes.\n"
    "## Turn 1 -- user\n"
    "See @notes.txt and @pic.png.\n"
    "<!-- assistant -->\n"
    "Here is a dot:\n"
    "@@@dot.svg\n"
    "<svg/>\n"
    "@@@\n"
)
PNG = b"\x89PNG\r\n\x1a\n\x00\xff"

#: What NARRATIVE (as chat.lmmlz with notes.txt and pic.png) imports to, by issue 6.
EXPECTED: list[dict[str, Any]] = [
    {"role": "context", "content": [{"type": "text", "text": "A chat about notes.\n"}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "See @notes.txt and @pic.png.\n"},
            {"type": "attachment", "name": "notes.txt", "mime": "text/plain", "content": "hello"},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
            },
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Here is a dot:\n@@@dot.svg\n<svg/>\n@@@\n"},
            {"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zy8+Cg=="}},
        ],
    },
]


def bundle(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


CHAT_LMMLZ = bundle([("chat.lmml", NARRATIVE.encode()), ("notes.txt", b"hello"), ("pic.png", PNG)])


async def messages_of(http: httpx.AsyncClient, tid: str) -> list[dict[str, Any]]:
    r = await http.get(f"/v1/transcripts/{tid}")
    assert r.status_code == 200, r.text
    got: list[dict[str, Any]] = r.json()["messages"]
    return got


async def ids(http: httpx.AsyncClient) -> list[str]:
    r = await http.get("/v1/transcripts")
    assert r.status_code == 200
    return [t["transcriptId"] for t in r.json()["transcripts"]]


def assert_problem(r: httpx.Response, status: int, code: str, detail: str = "") -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["code"] == code
    assert detail in body["detail"], body["detail"]


# --- import -------------------------------------------------------------------------


async def test_import_lmmlz_by_filename_makes_one_message_per_turn() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            params={"filename": "chat.lmmlz", "id": "chat-1"},
            content=CHAT_LMMLZ,
        )
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["transcriptId"] == "chat-1"
        assert body["revision"] == 1 and body["count"] == 3 and body["warnings"] == []
        assert isinstance(body["epoch"], str) and body["epoch"]
        assert await messages_of(http, "chat-1") == EXPECTED
        events = (await http.get("/v1/transcripts/chat-1/events", params={"after": 0})).json()
        assert [e["revision"] for e in events["events"]] == [1]  # one append: revision 1


async def test_import_lmml_text_with_inline_fences_and_a_generated_id() -> None:
    text = "## user\nRead this:\n@@@a.md\n# not a turn\n@@@\n## assistant\nDone.\n"
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            content=text.encode(),
            headers={"content-type": "text/markdown; charset=utf-8"},
        )
        assert r.status_code == 201, r.text
        tid = r.json()["transcriptId"]
        assert len(tid) == 32  # uuid4 hex
        assert await messages_of(http, tid) == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Read this:\n@@@a.md\n# not a turn\n@@@\n"},
                    {
                        "type": "attachment",
                        "name": "a.md",
                        "mime": "text/markdown",
                        "content": "# not a turn\n",
                    },
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Done.\n"}]},
        ]


@pytest.mark.parametrize(
    "how",
    [
        {"headers": {"content-disposition": 'attachment; filename="chat.lmmlz"'}},
        {"headers": {"content-disposition": "attachment; filename*=UTF-8''dir%2Fchat.lmmlz"}},
        {"headers": {"content-type": "application/zip"}},
        {"headers": {}},  # the zip magic alone
    ],
)
async def test_a_bundle_is_recognised_by_header_or_magic(how: dict[str, Any]) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts/import", content=CHAT_LMMLZ, **how)
        assert r.status_code == 201, r.text
        assert r.json()["warnings"] == []
        assert await messages_of(http, r.json()["transcriptId"]) == EXPECTED


async def test_import_reports_warnings_and_can_leave_large_embeds_out() -> None:
    data = bundle(
        [("chat.lmml", b"## user\n@big.txt\n"), ("big.txt", b"x" * 100), ("orphan.txt", b"o")]
    )
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            params={"filename": "chat.lmmlz", "maxEmbedBytes": 99},
            content=data,
        )
        assert r.status_code == 201, r.text
        warnings = r.json()["warnings"]
        assert any("'orphan.txt'" in w and "orphaned" in w for w in warnings)
        assert any("'big.txt'" in w and "left out" in w for w in warnings)
        messages = await messages_of(http, r.json()["transcriptId"])
        assert messages == [{"role": "user", "content": [{"type": "text", "text": "@big.txt\n"}]}]


async def test_import_into_an_existing_id_is_a_conflict() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        assert (await http.post("/v1/transcripts", json={"id": "taken"})).status_code == 201
        r = await http.post("/v1/transcripts/import", params={"id": "taken"}, content=b"## user\n")
        assert_problem(r, 409, "conflict")
        assert await messages_of(http, "taken") == []
        r = await http.post("/v1/transcripts/import", params={"id": "bad/id"}, content=b"x")
        assert_problem(r, 400, "invalid-frame")


def _traversal() -> bytes:
    return bundle([("chat.lmml", b"## user\nhi\n"), ("../../etc/passwd", b"evil")])


def _bomb() -> bytes:
    # 40 MiB of zeros, over the 32 MiB entry limit, in well under 1 MiB of zip.
    data = bundle([("chat.lmml", b"## user\n@bomb.bin\n"), ("bomb.bin", b"\0" * (40 << 20))])
    assert len(data) < 1 << 20
    return data


HOSTILE: dict[str, tuple[Any, str, str]] = {
    "traversal": (_traversal, "chat.lmmlz", "'..' segment"),
    "zip bomb": (_bomb, "chat.lmmlz", "uncompressed"),
    "truncated": (lambda: CHAT_LMMLZ[: len(CHAT_LMMLZ) // 2], "chat.lmmlz", "not a readable zip"),
    "non-zip named .lmmlz": (lambda: b"## user\nhello\n", "chat.lmmlz", "not a readable zip"),
    "missing reference": (
        lambda: bundle([("chat.lmml", b"## user\nsee @gone.txt\n")]),
        "chat.lmmlz",
        "@gone.txt",
    ),
    "missing reference in text": (lambda: b"## user\nsee @gone.txt\n", "chat.lmml", "@gone.txt"),
    "not utf-8": (lambda: b"## user\n\xff\xfe\n", "chat.lmml", "not UTF-8"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_hostile_imports_are_422_and_create_nothing(case: str) -> None:
    make, filename, reason = HOSTILE[case]
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "existing"})
        before = await ids(http)
        r = await http.post(
            "/v1/transcripts/import", params={"filename": filename, "id": "x"}, content=make()
        )
        assert_problem(r, 422, "invalid-lmml", reason)
        assert await ids(http) == before == ["existing"]
        assert (await http.get("/v1/transcripts/x")).status_code == 404


async def test_a_body_sent_as_zip_that_is_no_zip_is_refused() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            content=b"## user\nhi\n",
            headers={"content-type": "application/zip"},
        )
        assert_problem(r, 422, "invalid-lmml", "not a zip archive")
        assert await ids(http) == []


async def test_turns_over_the_server_limits_are_invalid_messages() -> None:
    text = "## user\n" + "x" * 2000 + "\n"
    async with (
        running_server(max_message_bytes=1000) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post("/v1/transcripts/import", content=text.encode())
        assert_problem(r, 422, "invalid-message", "more than the limit of 1000")
        assert r.json()["path"] == "messages[0]"
        assert await ids(http) == []


async def test_an_import_over_the_body_limit_is_413() -> None:
    async with (
        running_server(max_http_body_bytes=1000) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post("/v1/transcripts/import", content=b"## user\n" + b"x" * 1001)
        assert_problem(r, 413, "too-large")
        assert await ids(http) == []


async def test_subscribers_of_an_imported_transcript_get_a_baseline_with_its_messages() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import", params={"filename": "chat.lmmlz"}, content=CHAT_LMMLZ
        )
        tid = r.json()["transcriptId"]
        async with await RawClient.connect(srv.ws_url) as ws:
            await ws.send(op="subscribe", transcriptId=tid)
            base = await ws.expect(Baseline)
            assert base.snapshot.revision == 1
            assert base.snapshot.epoch == r.json()["epoch"]
            assert [m.role for m in base.snapshot.messages] == ["context", "user", "assistant"]
            assert list(base.snapshot.messages) == list(
                lmml.import_messages(CHAT_LMMLZ, filename="chat.lmmlz").messages
            )


# --- export -------------------------------------------------------------------------


async def test_export_then_import_gives_the_same_messages_both_ways() -> None:
    odd: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "## user\nnot a delimiter", "name": "bob"},
        {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "call_1", "metadata": {"k": [1]}},
    ]
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import", params={"filename": "chat.lmmlz"}, content=CHAT_LMMLZ
        )
        imported = r.json()["transcriptId"]
        r = await http.post("/v1/transcripts", json={"id": "odd", "messages": odd})
        assert r.status_code == 201
        for tid in (imported, "odd"):
            original = await messages_of(http, tid)
            for ext, media in (("lmml", "text/markdown"), ("lmmlz", "application/zip")):
                r = await http.get(f"/v1/transcripts/{tid}/export.{ext}")
                assert r.status_code == 200, r.text
                assert r.headers["content-type"].startswith(media)
                disposition = r.headers["content-disposition"]
                assert disposition == f'attachment; filename="{tid}.{ext}"'
                again = await http.post(
                    "/v1/transcripts/import",
                    params={"filename": f"{tid}.{ext}"},
                    content=r.content,
                )
                assert again.status_code == 201, again.text
                assert again.json()["warnings"] == []
                assert await messages_of(http, again.json()["transcriptId"]) == original


async def test_export_lmml_is_utf8_markdown_and_lmmlz_holds_id_lmml() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            params={"filename": "chat.lmmlz", "id": "notes:v1"},
            content=CHAT_LMMLZ,
        )
        assert r.status_code == 201
        text = await http.get("/v1/transcripts/notes:v1/export.lmml")
        assert text.headers["content-type"] == "text/markdown; charset=utf-8"
        # The first line names the transcript it is of (issue 29), then
        # comes the narrative.
        first, _, rest = text.text.partition("\n")
        assert first.startswith('<!-- lmml {"digest":"')
        # A single file has no place for referenced embeds: that turn is JSON.
        assert rest.startswith('A chat about notes.\n<!-- user {"content":')
        assert text.text.endswith("<!-- assistant -->\nHere is a dot:\n@@@dot.svg\n<svg/>\n@@@\n")
        zipped = await http.get("/v1/transcripts/notes:v1/export.lmmlz")
        with zipfile.ZipFile(io.BytesIO(zipped.content)) as archive:
            names = archive.namelist()
            assert names[0] == "notes:v1.lmml"
            assert set(names) == {"notes:v1.lmml", "notes.txt", "pic.png"}
            assert archive.read("pic.png") == PNG


USER = {"role": "user", "content": "Hello there"}
ASSISTANT = {"role": "assistant", "content": "General Kenobi"}


@pytest.mark.parametrize("suffix", ["lmml", "lmmlz"])
async def test_an_export_carries_the_digest_and_its_import_is_checked(suffix: str) -> None:
    """Issue 29: the export names the transcript's digest at its revision
    (header and first line) and the digest of its messages; importing it
    checks the messages against that, and a changed one is refused."""
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": "d1", "messages": [USER, ASSISTANT]})
        assert r.status_code == 201
        assert (await http.post("/v1/transcripts/d1/segments", json={})).status_code == 201
        snapshot = (await http.get("/v1/transcripts/d1")).json()
        assert len(snapshot["digest"]) == 32
        exported = await http.get(f"/v1/transcripts/d1/export.{suffix}")
        assert exported.headers["x-transcript-digest"] == snapshot["digest"]
        assert exported.headers["x-transcript-revision"] == str(snapshot["revision"]) == "2"
        r = await http.post(
            "/v1/transcripts/import",
            params={"filename": f"d1.{suffix}", "id": "d2"},
            content=exported.content,
        )
        assert r.status_code == 201, r.text
        imported = r.json()
        source = imported["source"]
        assert (source["transcriptId"], source["revision"], source["digest"]) == (
            "d1",
            2,
            snapshot["digest"],
        )
        assert source["messagesDigest"] == messages_digest(
            msgspec.convert(snapshot["messages"], list[Message])
        )
        copy = (await http.get("/v1/transcripts/d2")).json()
        assert copy["messages"] == snapshot["messages"]
        assert imported["digest"] == copy["digest"]
        if suffix == "lmml":
            # One character changed in a message: the import refuses the file.
            tampered = exported.text.replace("Hello", "Hullo")
            assert tampered != exported.text
            r = await http.post(
                "/v1/transcripts/import",
                params={"filename": "d1.lmml"},
                content=tampered.encode(),
            )
            assert_problem(r, 422, "invalid-lmml")
            assert "not those exported from 'd1' at revision 2" in r.json()["detail"]


@pytest.mark.parametrize("path", ["chat", "export.lmml", "export.lmmlz"])
async def test_unknown_transcripts_are_404(path: str) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        assert_problem(await http.get(f"/v1/transcripts/nope/{path}"), 404, "not-found")


# --- chat ---------------------------------------------------------------------------


def chat_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What /chat renders for these stored messages (protocol.chat, tested on its own)."""
    return openai_messages(parse_messages(messages), context="system")


async def test_chat_renders_the_active_segment_and_maps_context_on_request() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            params={"filename": "chat.lmmlz", "id": "c"},
            content=CHAT_LMMLZ,
        )
        assert r.status_code == 201
        chat = (await http.get("/v1/transcripts/c/chat")).json()
        assert chat == {"messages": chat_of(EXPECTED[1:])}  # active is the default, no context
        # The text file is inlined, the assistant's SVG left out with a placeholder.
        assert chat["messages"][0]["content"][1] == {
            "type": "text",
            "text": "[file notes.txt (text/plain)]\nhello\n[end of notes.txt]",
        }
        assert chat["messages"][1]["content"][1]["text"] == (
            "[image an embedded image/svg+xml of 7 bytes left out:"
            " assistant messages cannot carry images]"
        )
        chat = (await http.get("/v1/transcripts/c/chat", params={"context": "system"})).json()
        assert chat == {"messages": chat_of([{**EXPECTED[0], "role": "system"}, *EXPECTED[1:]])}

        r = await http.post("/v1/transcripts/c/segments", json={"start": 2})
        assert r.status_code == 201
        r = await http.post(
            "/v1/transcripts/c/messages", json={"messages": [{"role": "user", "content": "more"}]}
        )
        assert r.status_code == 201
        active = await http.get("/v1/transcripts/c/chat", params={"segment": "active"})
        assert active.headers["x-transcript-revision"] == "3"
        more = {"role": "user", "content": "more"}
        assert active.json() == {"messages": chat_of([EXPECTED[2], more])}
        # No segment parameter: the active segment only, as docs/protocol.md says.
        default = await http.get("/v1/transcripts/c/chat")
        assert default.json() == active.json()
        every = await http.get(
            "/v1/transcripts/c/chat", params={"segment": "all", "context": "omit"}
        )
        assert every.json() == {"messages": chat_of([*EXPECTED[1:], more])}


async def test_chat_in_the_anthropic_format_has_a_system_string_and_image_blocks() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            params={"filename": "chat.lmmlz", "id": "c"},
            content=CHAT_LMMLZ,
        )
        assert r.status_code == 201
        params = {"format": "anthropic", "context": "system"}
        body = (await http.get("/v1/transcripts/c/chat", params=params)).json()
        assert body["system"] == "A chat about notes.\n"
        user, assistant = body["messages"]
        assert [b["type"] for b in user["content"]] == ["text", "text", "image"]
        assert user["content"][2]["source"] == {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(PNG).decode(),
        }
        assert assistant["role"] == "assistant"
        body = (await http.get("/v1/transcripts/c/chat", params={"format": "anthropic"})).json()
        assert "system" not in body  # context left out: no system at all


@pytest.mark.parametrize(
    "params", [{"segment": "open"}, {"context": "user"}, {"segment": "ALL"}, {"format": "gemini"}]
)
async def test_chat_refuses_unknown_query_values(params: dict[str, str]) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "c"})
        r = await http.get("/v1/transcripts/c/chat", params=params)
        assert_problem(r, 400, "invalid-query", next(iter(params)))
