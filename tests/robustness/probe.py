"""The unrelated client, as a process of its own: ``python -m
tests.robustness.probe WS_URL IDLE_S INTERVAL_S``.

It pings for ``IDLE_S`` seconds and prints ``idle <worst>``, then pings every
``INTERVAL_S`` and prints ``rtt <sent> <round trip>`` per pong until its
standard input closes; ``fail <reason>`` if its connection dies. A process of
its own, so that neither the attacking test's coroutines nor its threads (the
GIL) delay a measurement.
"""

from __future__ import annotations

import sys
import threading
import time

import msgspec
from websockets.sync.client import ClientConnection, connect


def _ping(ws: ClientConnection, ref: int, timeout: float) -> float:
    started = time.perf_counter()
    ws.send(msgspec.json.encode({"op": "ping", "ref": ref}).decode())
    deadline = started + timeout
    while True:
        message = ws.recv(timeout=max(0.0, deadline - time.perf_counter()))
        for line in str(message).split("\n"):
            frame = msgspec.json.decode(line)
            if frame.get("type") == "pong" and frame.get("ref") == ref:
                return time.perf_counter() - started


def main(ws_url: str, idle_s: float, interval_s: float) -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with connect(ws_url, compression=None, open_timeout=10) as ws:
        worst, ref, until = 0.0, 0, time.monotonic() + idle_s
        while time.monotonic() < until:
            ref -= 1
            worst = max(worst, _ping(ws, ref, 10.0))
            time.sleep(interval_s)
        print(f"idle {worst}", flush=True)
        ref = 0
        while not stop.is_set():
            ref += 1
            sent = time.perf_counter()
            try:
                rtt = _ping(ws, ref, 30.0)
            except Exception as exc:  # the connection died: a finding
                print(f"fail {type(exc).__name__}: {exc}", flush=True)
                return
            print(f"rtt {sent} {rtt}", flush=True)
            stop.wait(interval_s)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
