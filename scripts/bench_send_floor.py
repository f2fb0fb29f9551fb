#!/usr/bin/env python3
"""The floor under one fan-out step: a bare ``socket.send()`` of one small
WebSocket frame (a 200-byte text message) to each of N loopback TCP
sockets, from Python, with nothing else: no event loop, no hub, no
queue. Whatever a server does, writing one append to N subscribers on
one core costs at least this. The receiving ends are in a child process
pinned to ``--client-cpu`` that only drains them; the sender is pinned to
``--server-cpu``. Issue 42's targets 2 and 3 quote it (docs/benchmarks.md):

    .venv/bin/python scripts/bench_send_floor.py 1000 10000

``--polls``: a long-poll's floor instead. Each receiving end asks again
(a 150-byte request) as soon as it has its answer, and each step also
reads every request back (one ``recv()`` per socket, found with epoll),
so a step is one answer per reader: a send and a receive, nothing else.

Prints, per N, the median over ``--rounds`` steps of the step's wall time
and CPU time, and the CPU per send (per answer, with ``--polls``).
Between steps it pauses ``--pause`` seconds so that the receiver has
drained (a measurement's pause, not a synchronisation: a step that finds
a full socket buffer raises).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import selectors
import socket
import statistics
import time
from multiprocessing.synchronize import Event

FRAME = b"\x81\x7e\x00\xc8" + b"x" * 200  # one unmasked text frame of 200 bytes
#: What a long-poll reader sends again once answered.
REQUEST = b"GET /v1/stream/transcripts/t1?offset=e_1&live=long-poll HTTP/1.1\r\n" + b"h" * 80


def drain(server: socket.socket, count: int, cpu: int, ready: Event, polls: bool) -> None:
    """Accept ``count`` connections on ``server`` and read them until all
    close (``polls``: answering each read with ``REQUEST``)."""
    os.sched_setaffinity(0, {cpu})
    ready.set()
    selector = selectors.DefaultSelector()
    for _ in range(count):
        conn, _ = server.accept()
        conn.setblocking(False)
        selector.register(conn, selectors.EVENT_READ)
    while selector.get_map():
        for key, _ in selector.select(1.0):
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            try:
                if not conn.recv(65536):
                    selector.unregister(conn)
                    conn.close()
                elif polls:
                    conn.send(REQUEST)
            except BlockingIOError:
                pass


def step_costs(
    count: int, rounds: int, pause: float, server_cpu: int, client_cpu: int, polls: bool
) -> None:
    os.sched_setaffinity(0, {server_cpu})
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    ready = multiprocessing.Event()
    receiver = multiprocessing.Process(
        target=drain, args=(listener, count, client_cpu, ready, polls)
    )
    receiver.start()
    ready.wait(10)
    socks = [socket.create_connection(listener.getsockname()) for _ in range(count)]
    listener.close()
    for sock in socks:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    walls, cpus = [], []
    for _ in range(rounds):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for sock in socks:
            sock.send(FRAME)
        asked = 0
        while polls and asked < count:
            for key, _ in selector.select(5.0):
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                asked += bool(conn.recv(65536))
        cpus.append(time.process_time() - cpu0)
        walls.append(time.perf_counter() - wall0)
        time.sleep(pause)
    selector.close()
    for sock in socks:
        sock.close()
    receiver.join(30)
    cpu = statistics.median(cpus)
    what = "answer" if polls else "send"
    print(
        f"{count:>6} sockets: one step {statistics.median(walls) * 1e3:6.1f} ms wall,"
        f" {cpu * 1e3:6.1f} ms CPU, {cpu / count * 1e6:5.2f} us CPU per {what}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("counts", nargs="+", type=int, help="sockets per step (N)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.2)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--polls", action="store_true", help="a long-poll's floor")
    args = parser.parse_args()
    for count in args.counts:
        step_costs(count, args.rounds, args.pause, args.server_cpu, args.client_cpu, args.polls)


if __name__ == "__main__":
    main()
