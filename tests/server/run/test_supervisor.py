"""``tsync serve --workers``: what needs no Redis (the refusal of an embedded
store, the sockets of one port)."""

from __future__ import annotations

import socket
import subprocess
import sys

from server.run.supervisor import listening_socket


def test_more_than_one_worker_needs_a_shared_store() -> None:
    for store in ("memory", "sqlite:./nowhere"):
        done = subprocess.run(
            [sys.executable, "-m", "server.run.cli", "serve", "--workers", "2", "--store", store],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "--workers=2" in lines[0] and "redis://" in lines[0]


def test_sockets_of_one_port_share_it() -> None:
    first = listening_socket("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = listening_socket("127.0.0.1", port)
    try:
        assert second.getsockname()[1] == port
        # Both accept connections made to the one port.
        accepted = 0
        for _ in range(64):
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
        for sock in (first, second):
            sock.setblocking(False)
            while True:
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    break
                conn.close()
                accepted += 1
        assert accepted == 64
    finally:
        first.close()
        second.close()
