"""Item 11: SIGTERM ends the process within ``graceful_shutdown_s`` even with
clients that never read, and a store that cannot be opened is one line and
exit status 2.

Before: SIGTERM with stuck clients took 15.2 s against a budget of 10, and a
corrupt database or a folder that is not one was a multi-line traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.robustness.harness import Target, raw_socket

GRACE_S = 2.0


def test_sigterm_with_stuck_clients_ends_within_the_grace(
    target_factory: Callable[..., Target],
) -> None:
    target = target_factory(settings={"graceful_shutdown_s": GRACE_S, "queue_max_bytes": 64 << 20})
    content = "x" * 1_000_000
    assert (
        httpx.post(
            target.url + "/v1/transcripts",
            json={"id": "big", "messages": [{"role": "user", "content": content}] * 12},
            timeout=30,
        ).status_code
        == 201
    )
    stuck = []
    # WebSockets that subscribe to a 12 MB baseline and never read it (more than
    # the kernel's buffers hold).
    subscribe = b'{"op":"subscribe","transcriptId":"big"}'
    for _ in range(10):
        sock = raw_socket(target.port)
        sock.sendall(
            b"GET /v1/ws HTTP/1.1\r\nhost: localhost\r\n"
            b"upgrade: websocket\r\nconnection: upgrade\r\n"
            b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
        )
        assert sock.recv(1000).startswith(b"HTTP/1.1 101")
        frame = bytes([0x81, 0x80 | len(subscribe)]) + b"\0\0\0\0" + subscribe
        sock.sendall(frame)
        stuck.append(sock)
    # HTTP downloads nobody reads.
    for _ in range(5):
        sock = raw_socket(target.port)
        sock.sendall(b"GET /v1/transcripts/big HTTP/1.1\r\nhost: localhost\r\n\r\n")
        stuck.append(sock)
    try:
        deadline = time.monotonic() + 10
        while httpx.get(target.url + "/healthz").json()["subscriptions"] < 10:
            assert time.monotonic() < deadline, httpx.get(target.url + "/healthz").text
            time.sleep(0.05)
        began = time.monotonic()
        status = target.process.terminate(timeout=GRACE_S + 10)
        took = time.monotonic() - began
    finally:
        for sock in stuck:
            sock.close()
    assert took < GRACE_S + 1.5, f"SIGTERM took {took:.1f} s with a grace of {GRACE_S} s"
    assert status in (0, -15), status


def _serve(store: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.run.cli", "serve", "--port", "0", "--store", store],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_store_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "transcripts.sqlite3").write_bytes(b"not a database, " * 1000)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    for store, says in (
        (f"sqlite:{corrupt}", "file is not a database"),
        (f"sqlite:{not_a_folder}/data", "Not a directory"),
    ):
        done = _serve(store)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        errors = [line for line in done.stderr.splitlines() if says in line]
        assert len(errors) == 1, done.stderr
