"""The ways a person starts the server: ``tsync serve``, ``uvicorn
server.app:app`` and ``uvicorn --factory server.app:create_app``; all read
``TSYNC_*`` alike, refuse a bad setting in one line, and shut down cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from tests.support.servers import ctrl_c_works, free_port, wait_healthy

pytestmark = pytest.mark.slow


class Process:
    """A server command in a subprocess on 127.0.0.1:<free port>."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = [a.replace("{port}", str(self.port)) for a in args]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("TSYNC_")}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=out,
                env=clean | env,
                start_new_session=True,
                preexec_fn=ctrl_c_works,
            )

    def wait_healthy(self, timeout: float = 15.0) -> None:
        assert wait_healthy(self.proc, self.url, timeout), self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[object]:
    started: list[Process] = []

    def start(args: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(args, env or {}, tmp_path / f"server{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


UVICORN = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "{port}"]
TSYNC = [sys.executable, "-m", "server.run.cli", "serve", "--host", "127.0.0.1", "--port", "{port}"]


def test_uvicorn_app_reads_the_token_and_store_from_the_environment(spawn: object) -> None:
    server = spawn([*UVICORN, "server.app:app"], {"TSYNC_TOKEN": "abc", "TSYNC_STORE": "memory"})  # type: ignore[operator]
    server.wait_healthy()
    assert httpx.get(server.url + "/v1/transcripts").status_code == 401
    authorized = httpx.get(server.url + "/v1/transcripts", headers={"authorization": "Bearer abc"})
    assert authorized.status_code == 200
    assert httpx.get(server.url + "/healthz").json()["store"] == "memory"


def test_the_factory_reads_the_environment_too(spawn: object) -> None:
    server = spawn(  # type: ignore[operator]
        [*UVICORN, "--factory", "server.app:create_app"],
        {"TSYNC_TOKEN": "abc", "TSYNC_STORE": "memory"},
    )
    server.wait_healthy()
    assert httpx.get(server.url + "/healthz").json()["store"] == "memory"
    assert httpx.get(server.url + "/v1/transcripts").status_code == 401


@pytest.mark.parametrize(
    ("command", "env", "says"),
    [
        ([*UVICORN, "server.app:app"], {"TSYNC_MAX_CONNECTIONS": "many"}, "TSYNC_MAX_CONNECTIONS"),
        ([*UVICORN, "--factory", "server.app:create_app"], {"TSYNC_STORE": "ftp://x"}, "ftp"),
        ([*TSYNC, "--store", "ftp://x"], {}, "--store='ftp://x'"),
        ([*TSYNC, "--set", "queue_max_frame=1"], {}, "did you mean 'queue_max_frames'"),
        ([*TSYNC], {"TSYNC_LOG_LEVEL": "loud"}, "TSYNC_LOG_LEVEL='loud'"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2_before_anything_opens(
    spawn: object, tmp_path: Path, command: list[str], env: dict[str, str], says: str
) -> None:
    data = tmp_path / "data"
    server = spawn(command, env | {"TSYNC_STORE": env.get("TSYNC_STORE", f"sqlite:{data}")})  # type: ignore[operator]
    assert server.proc.wait(30) == 2
    lines = server.output().strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("tsync"), lines
    assert not data.exists()  # nothing was opened


async def _subscribed(url: str) -> websockets.ClientConnection:
    ws = await websockets.connect(url, compression=None)
    await ws.send('{"op":"subscribe","transcriptId":"kept"}')
    await asyncio.wait_for(ws.recv(), 5)
    return ws


async def _close_code(ws: websockets.ClientConnection) -> int | None:
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with asyncio.timeout(10):
            while True:
                await ws.recv()
    return closed.value.rcvd.code if closed.value.rcvd else None


async def test_plain_uvicorn_closes_websockets_and_flushes_the_store_on_sigterm(
    spawn: object, tmp_path: Path
) -> None:
    """Under plain uvicorn the WebSocket is closed by uvicorn (1012, service
    restart: clients reconnect) and the lifespan shutdown closes the store."""
    env = {"TSYNC_STORE": f"sqlite:{tmp_path / 'data'}"}
    server = spawn([*UVICORN, "server.app:app"], env)  # type: ignore[operator]
    await asyncio.to_thread(server.wait_healthy)
    async with httpx.AsyncClient(base_url=server.url) as http:
        await http.post("/v1/transcripts", json={"id": "kept"})
        for i in range(5):
            await http.post(
                "/v1/transcripts/kept/messages",
                json={"messages": [{"role": "user", "content": str(i)}]},
            )
    ws = await _subscribed(server.url.replace("http", "ws") + "/v1/ws")
    server.proc.send_signal(signal.SIGTERM)
    assert await _close_code(ws) == 1012
    assert await asyncio.to_thread(server.proc.wait, 15) in (0, -signal.SIGTERM)
    log = server.output()
    assert "stopped: store closed" in log and "Traceback" not in log
    assert "connection closed" in log and "code=1012" in log

    again = spawn([*TSYNC], env)  # type: ignore[operator]
    await asyncio.to_thread(again.wait_healthy)
    async with httpx.AsyncClient(base_url=again.url) as http:
        assert (await http.get("/v1/transcripts/kept")).json()["revision"] == 5


async def test_tsync_serve_drains_with_1001_and_ctrl_c_exits_without_a_traceback(
    spawn: object, tmp_path: Path
) -> None:
    server = spawn([*TSYNC], {"TSYNC_STORE": f"sqlite:{tmp_path / 'data'}"})  # type: ignore[operator]
    await asyncio.to_thread(server.wait_healthy)
    async with httpx.AsyncClient(base_url=server.url) as http:
        await http.post("/v1/transcripts", json={"id": "kept"})
    ws = await _subscribed(server.url.replace("http", "ws") + "/v1/ws")
    server.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    assert await _close_code(ws) == 1001
    assert await asyncio.to_thread(server.proc.wait, 15) == 130
    log = server.output()
    assert "stopped: store closed" in log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log


def test_sigterm_is_bounded_by_graceful_shutdown_s(spawn: object) -> None:
    """A request that never finishes cannot hold the shutdown up for longer
    than ``graceful_shutdown_s``."""
    server = spawn(  # type: ignore[operator]
        [*TSYNC, "--store", "memory", "--set", "graceful_shutdown_s=2"], {}
    )
    server.wait_healthy()
    with socket.create_connection(("127.0.0.1", server.port)) as stuck:
        stuck.sendall(
            b"POST /v1/transcripts HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{"
        )
        time.sleep(0.2)  # let the server read the headers (nothing to wait on)
        began = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(15)
        took = time.monotonic() - began
    assert took < 2 + 2.5, f"shutdown took {took:.1f} s"
    log = server.output()
    assert "Cancel 1 running task(s)" in log and "Traceback" not in log
    assert "POST /v1/transcripts 503" in log  # the access line of the cut request


def test_version_and_help_show_what_a_user_needs(capsys: pytest.CaptureFixture[str]) -> None:
    from server.run.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("tsync ")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    assert "(default 8765; env" in text and "TSYNC_PORT)" in text and "queue_max_frames" in text
    with pytest.raises(SystemExit) as bad:
        main(["serve", "--bogus"])
    err = capsys.readouterr().err
    assert bad.value.code == 2 and err.rstrip().endswith("(see 'tsync serve --help')")
    assert err.count("\n") == 1


@pytest.mark.parametrize("workers", [[], ["--workers", "2", "--store", "redis://127.0.0.1:1/0"]])
def test_a_port_in_use_is_one_line_and_exit_2(
    spawn: object, tmp_path: Path, workers: list[str]
) -> None:
    """``./scripts/serve`` twice: the second says so in one line, before
    the app starts (no "Application startup complete", no store opened)."""
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [a if a != "{port}" else str(port) for a in TSYNC]
        server = spawn([*argv, *workers], {"TSYNC_STORE": f"sqlite:{data}"})  # type: ignore[operator]
        assert server.proc.wait(30) == 2
    lines = server.output().strip().splitlines()
    assert lines == [
        f"tsync: port {port} on 127.0.0.1 is in use (another tsync?); pick another with --port"
    ]
    assert not data.exists()


def test_an_address_of_another_machine_is_one_line_and_exit_2(spawn: object) -> None:
    server = spawn([*TSYNC, "--store", "memory", "--host", "192.0.2.1"])  # type: ignore[operator]
    assert server.proc.wait(30) == 2
    lines = server.output().strip().splitlines()
    assert lines == ["tsync: 192.0.2.1 is no address of this machine; pick another with --host"]


def _open_files(soft: int, hard: int) -> Callable[[], None]:
    def limit() -> None:
        import resource

        ctrl_c_works()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def _fd_limit_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads /proc/PID/limits")
def test_the_open_file_limit_is_raised_silently_or_the_caps_fit_it(tmp_path: Path) -> None:
    """Room under the hard limit: raised, nothing said. None: the caps are
    lowered to fit and one warning names the settings to change."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TSYNC_")}
    for (soft, hard), caps, warned in (
        ((256, 4096), ["--set", "max_connections=2000"], False),
        ((1000, 1000), [], True),
    ):
        port = free_port()
        log = tmp_path / f"fd-{soft}.log"
        argv = [a if a != "{port}" else str(port) for a in TSYNC]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*argv, "--store", "memory", *caps],
                stdout=out,
                stderr=out,
                env=clean,
                preexec_fn=_open_files(soft, hard),
            )
        try:
            assert wait_healthy(proc, f"http://127.0.0.1:{port}", 20), log.read_text()
            said = [line for line in log.read_text().splitlines() if "open-file" in line]
            if warned:
                assert _fd_limit_of(proc.pid) == 1000
                assert len(said) == 1, said
                assert "max_connections" in said[0] and "max_http_connections" in said[0]
                # 1000 - 128 in the proportion of 20,000 to 1,000.
                assert "at most 831 WebSockets and 41 HTTP connections" in said[0], said
            else:
                assert _fd_limit_of(proc.pid) == 4096
                assert said == []
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
