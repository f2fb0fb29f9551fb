"""The command loop of a worker process of many readers (``tsync bench
streams`` and ``tsync bench aichat``): open every reader (``CONNECT_CONCURRENCY``
at a time) and wait until each is ready, say ``ready``, then answer each
``targets`` command with ``drain`` (wait until every reader has what it is
owed) and ``result``, until ``stop``; any failure is sent as ``failed``."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final, Protocol

from client_py.bench.channel import Channel

#: Readers opening at once: enough to connect a thousand in a second, few
#: enough that the server's accept queue never overflows.
CONNECT_CONCURRENCY: Final = 64


class Reader(Protocol):
    ready: asyncio.Event

    async def open(self) -> None: ...

    async def close(self) -> None: ...


async def serve_readers(
    channel: Channel,
    readers: Sequence[Reader],
    *,
    owed_key: str,
    timeout_s: float,
    progress: Coroutine[Any, Any, None],
    drain: Callable[[int], Awaitable[None]],
    result: Callable[[int], dict[str, Any]],
) -> None:
    """Run the worker's loop over ``readers`` (``owed_key``: the field of a
    ``targets`` command that says how many items each reader is owed;
    ``timeout_s``: the bound on opening them all and their being ready)."""
    channel.start()
    reporting = asyncio.create_task(progress)
    try:
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def one(reader: Reader) -> None:
            async with gate:
                await reader.open()

        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(one(r) for r in readers))
            await asyncio.gather(*(r.ready.wait() for r in readers))
        channel.send("ready", {"connections": len(readers)})
        while True:
            kind, payload = await channel.recv()
            if kind in ("stop", "eof"):
                break
            if kind != "targets":
                raise ValueError(f"unknown command {kind!r}")
            owed = int(payload[owed_key])
            await drain(owed)
            channel.send("result", result(owed))
    except Exception as exc:
        channel.send("failed", f"{exc!r}\n{traceback.format_exc(limit=4)}")
    finally:
        reporting.cancel()
        await asyncio.gather(*(r.close() for r in readers), return_exceptions=True)
        channel.close()
