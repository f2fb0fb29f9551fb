"""``tsync stream`` and ``tsync tail``'s drafts, as real subprocesses against
a real server: stdin shared chunk by chunk and committed at EOF, Ctrl-C
cancels, tail shows a draft growing (one line per update, or one line
rewritten in place) and then its message."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
from collections.abc import Iterator

import pytest

import client_py
from client_py import DraftClosed, DraftEvent, DraftUpdated, MirrorUpdate
from tests.support.servers import ServerProcess, ctrl_c_works

TIMEOUT = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cli-drafts")
    with ServerProcess(store=f"sqlite:{tmp / 'data'}", log_path=tmp / "server.log") as srv:
        yield srv


async def tsync(*argv: str, stdin: bool = False) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server.run.cli", *argv,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=ctrl_c_works,
    )  # fmt: skip


async def draft_update(
    stream: client_py.EventStream[MirrorUpdate | DraftEvent],
) -> DraftUpdated | DraftClosed:
    """The next draft update of the stream that says something (events, and
    the empty text a draft opens with, are skipped)."""
    while True:
        update = await asyncio.wait_for(anext(stream), TIMEOUT)
        if isinstance(update, DraftUpdated) and update.text == "":
            continue
        if isinstance(update, DraftUpdated | DraftClosed):
            return update


async def test_stream_shares_stdin_live_and_commits_it_at_eof(server: ServerProcess) -> None:
    async with client_py.connect(server.ws_url) as reader:
        await reader.create("cli-stream", [{"role": "user", "content": "hi"}])
        mirror = await reader.subscribe("cli-stream")
        stream = mirror.events(drafts=True)
        proc = await tsync("stream", "cli-stream", "--url", server.url, "--name", "bot", stdin=True)
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"Hello, ")
            await proc.stdin.drain()
            first = await draft_update(stream)
            assert isinstance(first, DraftUpdated) and first.role == "assistant"
            draft_id = first.draft_id
            assert mirror.drafts[draft_id].text == "Hello, "
            # A multi-byte character cut between two reads is still one character.
            snowman = "☃".encode()
            proc.stdin.write(snowman[:1])
            await proc.stdin.drain()
            proc.stdin.write(snowman[1:] + b" world\n")
            proc.stdin.close()
            out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
        assert (proc.returncode, out, err) == (0, b"appended at index 1, revision 2\n", b"")
        while not isinstance(closed := await draft_update(stream), DraftClosed):
            assert closed.draft_id == draft_id
        assert (closed.state, closed.revision) == ("final", 2)
        assert closed.text == "Hello, ☃ world\n"
        assert mirror.messages[-1].content == "Hello, ☃ world"
        assert (mirror.messages[-1].role, mirror.messages[-1].name) == ("assistant", "bot")


async def test_ctrl_c_cancels_the_draft(server: ServerProcess) -> None:
    async with client_py.connect(server.ws_url) as reader:
        await reader.create("cli-stream-int")
        mirror = await reader.subscribe("cli-stream-int")
        stream = mirror.events(drafts=True)
        proc = await tsync("stream", "cli-stream-int", "--url", server.url, stdin=True)
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"never finished")
            await proc.stdin.drain()
            assert isinstance(await draft_update(stream), DraftUpdated)
            proc.send_signal(signal.SIGINT)
            out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        finally:
            if proc.returncode is None:
                proc.kill()
        assert proc.returncode == 130 and out == b""
        assert b"the draft was cancelled" in err
        while not isinstance(closed := await draft_update(stream), DraftClosed):
            pass
        assert closed.state == "cancelled"
        assert closed.text == "never finished"
        assert mirror.revision == 0


async def test_stream_to_a_missing_transcript_fails_clearly(server: ServerProcess) -> None:
    proc = await tsync("stream", "cli-no-such", "--url", server.url, stdin=True)
    out, err = await asyncio.wait_for(proc.communicate(b"text"), TIMEOUT)
    assert proc.returncode == 1 and out == b""
    assert err.startswith(b"tsync: ") and b"not-found" in err and err.count(b"\n") == 1
    proc = await tsync("stream", "cli-stream", "--draft-id", "no spaces", "--url", server.url)
    _, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 2 and b"see 'tsync stream --help'" in err


async def test_tail_prints_a_line_per_draft_update_then_the_message(
    server: ServerProcess,
) -> None:
    async with client_py.connect(server.ws_url) as writer:
        await writer.create("cli-tail-d", [{"role": "user", "content": "q"}])
        proc = await tsync("tail", "cli-tail-d", "--url", server.url, "--drafts", "lines")
        assert proc.stdout is not None

        async def line() -> str:
            assert proc.stdout is not None
            raw = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
            assert raw, "tail exited early"
            return raw.decode().rstrip("\n")

        try:
            assert await line() == "[0] user: q"
            async with writer.draft("cli-tail-d", draft_id="a1") as d:
                await d.write("one")
                assert await line() == "~ assistant a1: one"
                await d.write("\ntwo")
                assert await line() == "~ assistant a1: one\\ntwo"
                await d.commit()
            # The message itself: its lines under the role (a draft's update stays one line).
            assert [await line(), await line()] == ["[1] assistant: one", "    two"]
            async with writer.draft("cli-tail-d", draft_id="a2", role="tool") as d:
                await d.replace("dropped")
                assert await line() == "~ tool a2: dropped"
            assert await line() == "~ tool a2 cancelled"
        finally:
            proc.kill()
            await proc.communicate()


async def test_tail_on_a_terminal_rewrites_one_line_in_place(server: ServerProcess) -> None:
    async with client_py.connect(server.ws_url) as writer:
        await writer.create("cli-tail-live", [{"role": "user", "content": "q"}])
        # A real terminal (a pty): --drafts defaults to live there.
        main_fd, terminal = pty.openpty()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.run.cli", "tail", "cli-tail-live", "--url", server.url,
            stdin=asyncio.subprocess.DEVNULL, stdout=terminal, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        os.close(terminal)
        seen = b""

        async def until(marker: bytes) -> None:
            nonlocal seen
            while marker not in seen:
                chunk = await asyncio.wait_for(asyncio.to_thread(os.read, main_fd, 4096), TIMEOUT)
                assert chunk, "tail exited early"
                seen += chunk

        try:
            await until(b"[0] user: q\r\n")  # (the terminal turns \n into \r\n)
            async with writer.draft("cli-tail-live") as d:
                await d.write("grow")
                await until(b"\r\x1b[K\xe2\x80\xa6 assistant: grow")
                await d.write("ing")
                await until(b"\r\x1b[K\xe2\x80\xa6 assistant: growing")
                await d.commit()
            # The live line is wiped, then the message takes its place, and the
            # draft is not drawn again below it.
            await until(b"\r\x1b[K[1] assistant: growing\r\n")
            assert not seen.endswith(b"growing")
        finally:
            proc.kill()
            await proc.wait()
            os.close(main_fd)
