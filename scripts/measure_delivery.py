#!/usr/bin/env python3
"""Server CPU per delivered event and per append, measured with cheap clients.

Starts ``tsync serve`` from a source tree (this one, or another checkout for a
before/after comparison in the same session) as a subprocess, optionally
pinned to one CPU with ``taskset``, opens raw WebSocket subscribers in this
process (pinned to another CPU) that only count the increments they get, lets
writers append, and reports the server's CPU seconds (``psutil``) from the
first append until every subscriber has every increment:

    fanout    one transcript, N subscribers, one writer at R appends/s (events
              go out singly: the chat case)
    burst     one transcript, N subscribers, C appends sent back to back
    chatroom  T transcripts with S subscribers each, one writer per
              transcript at R appends/s each

The clients do the least they can (a handshake with websockets' sans-I/O
client, then counting ``"type":"increment"`` in the bytes received), so that
a saturated generator does not hide the server's cost. Wall-clock figures on
a shared machine mean little: compare the CPU per delivery of runs taken one
after the other, and repeat (``--reps``).

    python scripts/measure_delivery.py fanout --subscribers 500 --rate 50 --count 500
    python scripts/measure_delivery.py fanout --tree /tmp/tsync-main   # the other code
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec
import psutil
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

INCREMENT = b'"type":"increment"'
ACK = b'"type":"ack"'
ROOT = Path(__file__).resolve().parent.parent


class Counter(asyncio.Protocol):
    """One raw connection: handshake, then count increments and acks."""

    def __init__(self, url: str) -> None:
        self.proto = ClientProtocol(parse_uri(url), subprotocols=["tsync.v1.json"])  # type: ignore[list-item]
        self.open: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.handshaken = False
        self.increments = 0
        self.acks = 0
        self.tail = b""
        self.changed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.proto.send_request(self.proto.connect())
        transport.write(b"".join(self.proto.data_to_send()))

    def data_received(self, data: bytes) -> None:
        if not self.handshaken:
            self.proto.receive_data(data)
            for event in self.proto.events_received():
                if isinstance(event, Response):
                    self.handshaken = True
                    if not self.open.done():
                        self.open.set_result(None)
            return
        chunk = self.tail + data
        found = chunk.count(INCREMENT)
        acks = chunk.count(ACK)
        self.tail = chunk[-len(INCREMENT) + 1 :]
        if found or acks:
            self.increments += found
            self.acks += acks
            self.changed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.open.done():
            self.open.set_exception(ConnectionError("closed before the handshake"))
        self.changed.set()

    def send(self, op: dict[str, object]) -> None:
        assert self.transport is not None
        frame = Frame(Opcode.TEXT, msgspec.json.encode(op))
        self.transport.write(frame.serialize(mask=True, extensions=[]))


async def connect(host: str, port: int, url: str) -> Counter:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: Counter(url), host, port)
    await asyncio.wait_for(conn.open, 30)
    return conn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen[bytes]:
    tree = Path(args.tree).resolve()
    if args.broadcast:
        cmd = [sys.executable, str(tree / "scripts" / "broadcast_baseline.py"), "--port", str(port)]
    else:
        cmd = [sys.executable, "-m", "server.run.cli", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--store", args.store, "--log-level", "warning",
               *[word for s in args.set for word in ("--set", s)]]  # fmt: skip
    if args.server_cpu is not None:
        cmd = ["taskset", "-c", str(args.server_cpu), *cmd]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


def message(size: int, i: int) -> dict[str, object]:
    return {"role": "user", "content": "x" * size, "metadata": {"i": i}}


async def wait_until(cond: object, conns: list[Counter], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for c in conns:
            c.changed.clear()
        waits = [asyncio.ensure_future(c.changed.wait()) for c in conns[:1]]
        await asyncio.wait(waits, timeout=min(left, 0.05))
        for w in waits:
            w.cancel()
    return True


async def one_run(args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    proc = start_server(args, port)
    server = psutil.Process(proc.pid)
    url = f"ws://127.0.0.1:{port}/v1/ws"
    try:
        transcripts = args.transcripts if args.scenario == "chatroom" else 1
        ids = [f"m-{port}-{t}" for t in range(transcripts)]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for tid in ids if not args.broadcast else ():
                (await http.post("/v1/transcripts", json={"id": tid})).raise_for_status()
        subs: list[Counter] = []
        per = args.subscribers if args.scenario != "chatroom" else args.per_transcript
        for tid in ids:
            for _ in range(per):
                conn = await connect("127.0.0.1", port, url)
                conn.send({"op": "subscribe", "transcriptId": tid})
                subs.append(conn)
        writers = [await connect("127.0.0.1", port, url) for _ in ids]
        # Let the baselines go out before the clock starts.
        await asyncio.sleep(1.0)
        for s in subs:
            s.increments = 0
        expected = args.count * per * len(ids)
        spy = None
        if args.profile:
            spy = subprocess.Popen(  # noqa: ASYNC220 - started once, before the clock
                [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(proc.pid),
                 "--rate", "500", "--format", "raw", "-o", args.profile, "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            await asyncio.sleep(1.0)  # py-spy attaches
        before = server.cpu_times()
        started = time.monotonic()
        if args.scenario == "burst":
            w = writers[0]
            for i in range(args.count):
                w.send(
                    {"op": "append", "transcriptId": ids[0], "messages": [message(args.size, i)]}
                )
                if i % 64 == 63:
                    await wait_until(lambda i=i: w.acks >= i - 127, [w], 30)
        else:
            period = 1 / args.rate
            for i in range(args.count):
                due = started + i * period
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                for tid, w in zip(ids, writers, strict=True):
                    w.send(
                        {"op": "append", "transcriptId": tid, "messages": [message(args.size, i)]}
                    )
        done = await wait_until(
            lambda: sum(s.increments for s in subs) >= expected, subs, args.timeout
        )
        elapsed = time.monotonic() - started
        after = server.cpu_times()
        cpu = (after.user + after.system) - (before.user + before.system)
        got = sum(s.increments for s in subs)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
        appends = args.count * len(ids)
        result = {
            "delivered": got,
            "expected": expected,
            "complete": float(done),
            "cpu_s": cpu,
            "us_per_delivery": cpu / max(got, 1) * 1e6,
            "us_per_append": cpu / appends * 1e6,
            "elapsed_s": elapsed,
            "core_share": cpu / elapsed,
        }
        for c in [*subs, *writers]:
            if c.transport is not None:
                c.transport.abort()
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def main(args: argparse.Namespace) -> None:
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    runs = []
    for rep in range(args.reps):
        result = await one_run(args)
        runs.append(result)
        print(
            f"rep {rep + 1}: delivered {result['delivered']:.0f}/{result['expected']:.0f} "
            f"cpu {result['cpu_s']:.3f}s  {result['us_per_delivery']:.2f} us/delivery  "
            f"{result['us_per_append']:.1f} us/append  core {result['core_share']:.2f}",
            flush=True,
        )
    if args.reps > 1:
        med = statistics.median(r["us_per_delivery"] for r in runs)
        med_a = statistics.median(r["us_per_append"] for r in runs)
        print(f"median: {med:.2f} us/delivery, {med_a:.1f} us/append")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", choices=["fanout", "burst", "chatroom"])
    p.add_argument("--subscribers", type=int, default=500)
    p.add_argument("--transcripts", type=int, default=50, help="chatroom: transcripts")
    p.add_argument("--per-transcript", type=int, default=4, help="chatroom: subscribers each")
    p.add_argument("--rate", type=float, default=50.0, help="appends/s per writer")
    p.add_argument("--count", type=int, default=500, help="appends per writer")
    p.add_argument("--size", type=int, default=200, help="message content bytes")
    p.add_argument("--store", default="memory")
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE for tsync serve")
    p.add_argument("--tree", default=str(ROOT), help="source tree to run the server from")
    p.add_argument(
        "--broadcast", action="store_true", help="run scripts/broadcast_baseline.py instead"
    )
    p.add_argument("--server-cpu", type=int, default=1)
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--profile", help="py-spy raw profile of the measured window to this file")
    asyncio.run(main(p.parse_args()))
