"""Real servers for tests: in-process uvicorn on an ephemeral port, or a
``tsync serve`` subprocess that can be killed and restarted.

Both listen on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from server.config import ServerConfig, load_config
from server.live.hub import Hub
from server.run.serve import TsyncServer, uvicorn_config
from server.store.base import Store
from server.web.application import create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class RunningServer:
    url: str
    ws_url: str
    app: Any
    server: TsyncServer

    @property
    def hub(self) -> Hub:
        hub: Hub = self.app.state.hub
        return hub


@contextlib.asynccontextmanager
async def running_server(
    config: ServerConfig | None = None,
    *,
    store: Store | None = None,
    uvicorn_options: dict[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[RunningServer]:
    """Run the app with uvicorn in this event loop on 127.0.0.1:<free port>
    (``uvicorn_options`` override ``tsync serve``'s uvicorn settings)."""
    base = config or ServerConfig(store="memory", graceful_shutdown_s=2.0)
    config = load_config({}, {**_fields(base), **settings, "host": "127.0.0.1"})
    app = create_app(config, store=store)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = TsyncServer(uvicorn_config(config, app, **(uvicorn_options or {})))
    server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("server stopped during startup")
                await asyncio.sleep(0.01)
        yield RunningServer(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/ws", app, server)
    finally:
        server.should_exit = True
        async with asyncio.timeout(15):
            await task
        sock.close()


def _fields(config: ServerConfig) -> dict[str, Any]:
    import msgspec

    return {f.name: getattr(config, f.name) for f in msgspec.structs.fields(config)}


def ctrl_c_works() -> None:
    """``preexec_fn`` of a child a test sends SIGINT to: a suite started in
    the background (``pytest &``, as a CI script may) hands its children
    SIGINT ignored, and Python then never raises ``KeyboardInterrupt``."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout: float) -> bool:
    """True once ``url/healthz`` answers 200; False if ``proc`` exits first or
    ``timeout`` passes (a process starting up offers nothing else to wait on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


@dataclass
class ServerProcess:
    """``tsync serve`` in a subprocess, for kill/restart tests."""

    store: str
    port: int = field(default_factory=free_port)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    def start(self, timeout: float = 15.0) -> None:
        cmd = [
            sys.executable, "-m", "server.run.cli", "serve",
            "--host", "127.0.0.1", "--port", str(self.port), "--store", self.store,
            "--log-level", "warning", *self.args,
        ]  # fmt: skip
        env = {**os.environ, **self.env}
        if self.log_path:
            with open(self.log_path, "ab") as out:  # the child keeps its own copy
                self.proc = subprocess.Popen(
                    cmd, stdout=out, stderr=out, env=env, start_new_session=True
                )
        else:
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        if wait_healthy(self.proc, self.url, timeout):
            return
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
        self.kill()
        raise TimeoutError(f"server did not become healthy: {self.log_tail()}")

    def log_tail(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-2000:]
        return ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout)
        return self.proc.returncode if self.proc else 0

    def restart(self) -> None:
        self.kill()
        self.start()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
