"""``tsync`` client commands: exit codes in-process, ``tail`` as a real
subprocess that survives a server restart."""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_py import HttpApi
from server.run.cli import main
from tests.support.servers import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cli")
    with ServerProcess(store=f"sqlite:{tmp / 'data'}", log_path=tmp / "server.log") as srv:
        yield srv


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_append_get(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    url = ("--url", server.url)
    assert run(capsys, "create", "cli-1", *url) == (0, "cli-1\n", "")
    code, out, err = run(capsys, "append", "cli-1", "hello\nthere", *url)
    assert (code, out, err) == (0, "appended at index 0, revision 1\n", "")
    code, out, _ = run(capsys, "append", "cli-1", "--role", "assistant", "hi", "--json", *url)
    assert code == 0 and '"revision":2' in out and '"start":1' in out
    code, out, _ = run(capsys, "get", "cli-1", *url)
    # Several lines go on under the role, indented; --json keeps "\n" for machines.
    assert (code, out) == (0, "[0] user: hello\n    there\n[1] assistant: hi\n")
    code, out, _ = run(capsys, "get", "cli-1", "--json", *url)
    assert code == 0 and '"messages":[{"role":"user","content":"hello\\nthere"}' in out
    code, out, _ = run(capsys, "create", *url)
    assert code == 0 and len(out.strip()) >= 8


def test_append_reads_stdin(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    assert run(capsys, "create", "cli-stdin", "--url", server.url)[0] == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin\n"))
    assert run(capsys, "append", "cli-stdin", "-", "--url", server.url)[0] == 0
    code, out, _ = run(capsys, "get", "cli-stdin", "--url", server.url)
    assert (code, out) == (0, "[0] user: from stdin\n")


def test_the_server_saying_no_exits_1(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--url", server.url)
    code, out, err = run(capsys, "get", "no-such", *url)
    assert (code, out) == (1, "")
    assert err.startswith("tsync: ") and "not found" in err and err.count("\n") == 1
    assert run(capsys, "append", "no-such", "x", *url)[0] == 1
    assert run(capsys, "create", "cli-dup", *url)[0] == 0
    code, _, err = run(capsys, "create", "cli-dup", *url)
    assert code == 1 and "already exists" in err
    code, _, err = run(capsys, "append", "cli-dup", "x", "--expected-revision", "5", *url)
    assert code == 1 and "revision-conflict" in err


def test_an_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "get", "x", "--url", "http://127.0.0.1:9", "--timeout", "2")
    assert code == 1 and err.startswith("tsync: cannot reach the server")


def test_bad_usage_exits_2(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as missing:
        main(["append"])
    assert missing.value.code == 2
    with pytest.raises(SystemExit) as bad_role:
        main(["append", "x", "hi", "--role", "robot"])
    assert bad_role.value.code == 2
    capsys.readouterr()
    code, _, err = run(capsys, "get", "bad id", "--url", server.url)
    assert code == 2 and err.startswith("tsync: ")
    assert err.rstrip().endswith("(see 'tsync get --help')") and err.count("\n") == 1
    code, _, err = run(capsys, "get", "x", "--url", "ftp://nowhere")
    assert code == 2 and "URL" in err
    code, _, err = run(capsys, "import", "/no/such/file.lmml", "--url", server.url)
    assert code == 2 and "no such file" in err


def test_export_writes_the_file(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = ("--url", server.url)
    assert run(capsys, "create", "cli-export", *url)[0] == 0
    assert run(capsys, "append", "cli-export", "to export", *url)[0] == 0
    target = tmp_path / "out.lmml"
    code, _, err = run(capsys, "export", "cli-export", "-o", str(target), *url)
    if code == 1 and "not-implemented" in err:
        pytest.skip("the server does not export LMML yet")
    assert code == 0, err
    assert "to export" in target.read_text()


async def test_tail_prints_live_and_survives_a_restart(server: ServerProcess) -> None:
    async with HttpApi(server.url) as api:
        await api.create("cli-tail", [{"role": "user", "content": "one"}])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.run.cli", "tail", "cli-tail", "--url", server.url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        try:

            async def line() -> str:
                assert proc.stdout is not None
                raw = await asyncio.wait_for(proc.stdout.readline(), 15)
                assert raw, "tail exited early"
                return raw.decode().rstrip("\n")

            assert await line() == "[0] user: one"
            await api.append("cli-tail", [{"role": "assistant", "content": "two"}])
            assert await line() == "[1] assistant: two"
            await asyncio.to_thread(server.restart)
            await api.append("cli-tail", [{"role": "user", "content": "three"}])
            await api.append(
                "cli-tail",
                [{"role": "assistant", "content": "four"}, {"role": "user", "content": "end"}],
            )
            # In order, nothing lost, nothing printed twice.
            assert [await line() for _ in range(3)] == [
                "[2] user: three",
                "[3] assistant: four",
                "[4] user: end",
            ]
            assert proc.returncode is None
            assert proc.stderr is not None
            note = await asyncio.wait_for(proc.stderr.readline(), 15)
            assert note.decode().startswith("tsync: reconnected")
        finally:
            if proc.returncode is None:
                proc.kill()
            rest, _ = await proc.communicate()
        assert rest == b""


def test_import_then_export_round_trip(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = ("--url", server.url)
    assert run(capsys, "create", "cli-src", *url)[0] == 0
    assert run(capsys, "append", "cli-src", "question?", *url)[0] == 0
    assert run(capsys, "append", "cli-src", "--role", "assistant", "answer.", *url)[0] == 0
    for name in ("t.lmml", "t.lmmlz"):
        exported = tmp_path / name
        code, _, err = run(capsys, "export", "cli-src", "-o", str(exported), *url)
        if code == 1 and "not-implemented" in err:
            pytest.skip("the server does not export LMML yet")
        assert code == 0, err
        new_id = f"cli-imported-{name.replace('.', '-')}"
        code, out, err = run(capsys, "import", str(exported), "--id", new_id, *url)
        if code == 1 and "not-implemented" in err:
            pytest.skip("the server does not import LMML yet")
        assert (code, out) == (0, f"{new_id}\n"), err
        code, out, _ = run(capsys, "get", new_id, *url)
        assert (code, out) == (0, "[0] user: question?\n[1] assistant: answer.\n")
    code, _, err = run(capsys, "import", str(tmp_path / "t.lmml"), "--id", "cli-src", *url)
    assert code == 1 and "exists" in err


def test_list_segment_and_delete(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    url = ("--url", server.url)
    for tid in ("ls-b", "ls-a", "ls-c"):
        assert run(capsys, "create", tid, *url)[0] == 0
    assert run(capsys, "append", "ls-a", "one", *url)[0] == 0
    assert run(capsys, "append", "ls-a", "two", *url)[0] == 0

    code, out, _ = run(capsys, "list", *url)
    lines = out.splitlines()
    # Newest first (ls-a was written last), in columns under a header.
    assert code == 0 and lines[0].split() == ["ID", "REVISION", "MESSAGES", "UPDATED"]
    assert [line.split()[0] for line in lines[1:4]] == ["ls-a", "ls-c", "ls-b"]
    assert lines[1].split()[1:3] == ["2", "2"] and lines[2].split()[1:3] == ["0", "0"]
    columns = {line.index(line.split()[3]) for line in lines[1:]}  # where UPDATED starts
    assert len(columns) == 1 and len({len(line) for line in lines[1:]}) == 1, out
    code, out, _ = run(capsys, "list", "--after", "ls-a", "--limit", "1", *url)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["ID", "ls-c"]
    code, out, _ = run(capsys, "list", "--after", "ls-c", "--limit", "1", "--json", *url)
    assert code == 0 and '"transcriptId":"ls-b"' in out and '"length":0' in out
    assert run(capsys, "list", "--limit", "0", *url)[0] == 2

    code, out, _ = run(capsys, "segment", "ls-a", "--start", "1", *url)
    assert (code, out) == (0, "segment started at index 1, revision 3\n")
    code, _, err = run(capsys, "segment", "ls-a", "--start", "1", *url)
    assert code == 1 and "invalid-segment" in err
    code, out, _ = run(capsys, "segment", "ls-a", "--json", *url)
    assert code == 0 and '"start":2' in out and '"revision":4' in out
    code, _, err = run(capsys, "segment", "ls-a", "--start", "-1", *url)
    assert code == 2 and "(see 'tsync segment --help')" in err

    assert run(capsys, "delete", "ls-c", *url)[:2] == (0, "deleted ls-c\n")
    code, _, err = run(capsys, "delete", "ls-c", *url)
    assert code == 1 and "not found" in err
    assert run(capsys, "get", "ls-c", *url)[0] == 1


async def test_get_shows_images_and_attachments(server: ServerProcess) -> None:
    png = base64.b64encode(b"\x89PNG\r\n").decode()
    content = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "attachment", "name": "notes.txt", "mime": "text/plain", "content": "héllo"},
        {"type": "attachment", "name": "a.bin", "mime": "application/pdf", "content": png},
        {"type": "text", "text": "and"},
        {"type": "text", "text": " more"},
    ]
    async with HttpApi(server.url) as api:
        await api.create("cli-parts", [{"role": "user", "content": content}])
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server.run.cli", "get", "cli-parts", "--url", server.url,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(done.communicate(), 30)
    assert out.decode() == (
        "[0] user: look [image: image/png, 6 bytes] [image: https://example.com/cat.jpg] "
        "[attachment: notes.txt, text/plain, 6 bytes] "
        "[attachment: a.bin, application/pdf, 6 bytes] and more\n"
    )


def test_views_says_when_there_are_none(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--url", server.url)
    assert run(capsys, "create", "cli-views", *url)[0] == 0
    assert run(capsys, "views", "cli-views", *url) == (0, "no views\n", "")
    assert run(capsys, "views", "cli-views", "--json", *url) == (0, "", "")
    assert run(capsys, "append", "cli-views", "one", *url)[0] == 0
    assert run(capsys, "view", "cli-views", "draft", "--start", "0", *url)[0] == 0
    assert (
        run(capsys, "view", "cli-views", "longer-name", "--start", "0", "--end", "1", *url)[0] == 0
    )
    code, out, _ = run(capsys, "views", "cli-views", *url)
    assert (code, out.splitlines()) == (
        0,
        ["NAME         START  END", "draft            0  open", "longer-name      0  1"],
    )


def test_a_page_link_in_url_means_its_server(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a person copies from the browser: the chat page's address."""
    assert run(capsys, "create", "cli-link", "--url", server.url)[0] == 0
    for pasted in (f"{server.url}/t/cli-link", f"{server.url}/", f"{server.url}/v1/transcripts"):
        code, out, err = run(capsys, "get", "cli-link", "--url", pasted)
        assert (code, out, err) == (0, "", ""), pasted
    code, _, err = run(capsys, "get", "cli-link", "--url", "ftp://h:8765/t/x")
    assert code == 2 and "expected http(s)://host:port" in err


def test_control_characters_cannot_drive_the_terminal(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--url", server.url)
    assert run(capsys, "create", "cli-ctl", *url)[0] == 0
    assert run(capsys, "append", "cli-ctl", "red\x1b[31m\r\nnext\ttab", *url)[0] == 0
    code, out, _ = run(capsys, "get", "cli-ctl", *url)
    assert (code, out) == (0, "[0] user: red\\x1b[31m\n    next\ttab\n")


def test_an_exported_bundle_is_named_after_its_file(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``-o out.lmmlz`` holds ``out.lmml``: importing it again says nothing."""
    import zipfile

    url = ("--url", server.url)
    assert run(capsys, "create", "cli-bundle", *url)[0] == 0
    assert run(capsys, "append", "cli-bundle", "hello", *url)[0] == 0
    target = tmp_path / "out.lmmlz"
    assert run(capsys, "export", "cli-bundle", "-o", str(target), *url)[:2] == (0, "")
    assert zipfile.ZipFile(target).namelist() == ["out.lmml"]
    assert run(capsys, "import", str(target), "--id", "cli-bundle-2", *url) == (
        0,
        "cli-bundle-2\n",
        "",
    )
    assert run(capsys, "get", "cli-bundle-2", *url)[:2] == (0, "[0] user: hello\n")
    code, _, err = run(capsys, "export", "cli-bundle", "-o", str(tmp_path / ".lmmlz"), *url)
    assert code == 2 and "not a plain file name" in err


async def test_tail_notes_who_joins_and_leaves(server: ServerProcess) -> None:
    import client_py

    async with HttpApi(server.url) as api:
        await api.create("cli-presence", [{"role": "user", "content": "one"}])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server.run.cli", "tail", "cli-presence", "--url", server.url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:

        async def note() -> str:
            assert proc.stderr is not None
            raw = await asyncio.wait_for(proc.stderr.readline(), 15)
            assert raw, "tail exited early"
            return raw.decode().rstrip("\n")

        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 15) == b"[0] user: one\n"
        async with client_py.connect(server.ws_url) as ana:
            await ana.subscribe("cli-presence")
            await ana.state_presence("cli-presence", name="Ana", kind="writer")
            assert await note() == "tsync: Ana joined (writer)"
        assert await note() == "tsync: Ana left"
    finally:
        proc.terminate()
        await proc.wait()


# --- tsync verify (issue 29) ----------------------------------------------------------


def test_verify_says_whether_the_copy_is_the_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 when the copy rebuilt from the events has the server's digest; 1
    when a stored event was changed behind the server's back (its digest no
    longer follows from it); 2 when it cannot tell."""
    import sqlite3

    import msgspec

    from protocol.types import TranscriptEvent

    folder = tmp_path / "data"
    server = ServerProcess(store=f"sqlite:{folder}", log_path=tmp_path / "server.log")
    server.start()
    try:
        url = ("--url", server.url)
        assert run(capsys, "create", "v-1", *url)[0] == 0
        for text in ("one", "two", "three"):
            assert run(capsys, "append", "v-1", text, *url)[0] == 0
        assert run(capsys, "segment", "v-1", *url)[0] == 0
        code, out, err = run(capsys, "verify", "v-1", *url)
        assert (code, err) == (0, ""), err
        digest = _server_digest(server.url, "v-1")
        assert out == f"v-1: revision 4: digest {digest} matches the server's\n"
        code, out, _ = run(capsys, "verify", "v-1", "--json", *url)
        assert code == 0 and '"match":true' in out

        # Change a stored message, leave its digest as it was.
        server.kill()
        with sqlite3.connect(folder / "transcripts.sqlite3") as conn:
            (data,) = conn.execute(
                "SELECT data FROM events WHERE transcript_id = 'v-1' AND revision = 2"
            ).fetchone()
            event = msgspec.msgpack.decode(data, type=TranscriptEvent)
            plain = msgspec.to_builtins(event)
            plain["change"]["messages"][0]["content"] = "TWO"
            conn.execute(
                "UPDATE events SET data = ? WHERE transcript_id = 'v-1' AND revision = 2",
                (msgspec.msgpack.encode(plain),),
            )
        server.start()
        code, out, _ = run(capsys, "verify", "v-1", *url)
        assert code == 1
        assert out.startswith("v-1: revision 4: MISMATCH: the event of revision 2 carries digest")

        assert run(capsys, "verify", "nope", *url)[0] == 2
        assert run(capsys, "verify", "bad id!", *url)[0] == 2
    finally:
        server.kill()
    assert run(capsys, "verify", "v-1", "--url", server.url, "--timeout", "0.5")[0] == 2


def _server_digest(url: str, transcript_id: str) -> str | None:
    async def get() -> str | None:
        async with HttpApi(url) as api:
            return (await api.get(transcript_id)).digest

    return asyncio.run(get())
