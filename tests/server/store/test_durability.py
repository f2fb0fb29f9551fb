"""Nothing acknowledged is lost when the server is killed with SIGKILL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import msgspec
import websockets

from protocol.wire import Ack, accept_transcript_update, split_frames
from tests.support.servers import ServerProcess
from tests.support.waiting import Changes


async def test_sigkill_during_acknowledged_appends_loses_nothing(tmp_path: Path) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "log")
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.post("/v1/transcripts", json={"id": "durable"})).status_code == 201
        acked: list[int] = []
        sent = 0
        killed = asyncio.Event()
        progress = Changes()  # an ack read, or the connection gone

        async with websockets.connect(server.ws_url, compression=None) as ws:

            async def writer() -> None:
                nonlocal sent

                def room() -> bool:
                    return killed.is_set() or sent - len(acked) < 8

                # Pipelined appends, 8 in flight, until the server dies.
                while not killed.is_set() and sent < 5000:
                    await progress.until(room, "an ack to make room for an append", timeout=30)
                    if killed.is_set():
                        break
                    await ws.send(
                        msgspec.json.encode(
                            {
                                "op": "append",
                                "transcriptId": "durable",
                                "ref": sent,
                                "messages": [{"role": "user", "content": f"m{sent}"}],
                            }
                        ).decode()
                    )
                    sent += 1

            async def reader() -> None:
                try:
                    async for message in ws:
                        for raw in split_frames(message):
                            frame = accept_transcript_update(raw)
                            assert isinstance(frame, Ack), frame
                            acked.append(int(frame.ref))  # type: ignore[arg-type]
                            if len(acked) == 300:
                                server.kill()  # SIGKILL with appends in flight
                                killed.set()
                            progress.notify()
                except websockets.ConnectionClosed:
                    pass
                finally:  # however the reading ended, the writer stops
                    killed.set()
                    progress.notify()

            async with asyncio.timeout(30):
                await asyncio.gather(writer(), reader())
        assert len(acked) >= 300
        assert acked == sorted(acked)

        server.start()  # same folder
        async with httpx.AsyncClient(base_url=server.url) as http:
            snapshot = (await http.get("/v1/transcripts/durable")).json()
        texts = [m["content"] for m in snapshot["messages"]]
        # Every acknowledged append is there, in order, once; unacknowledged
        # ones may have landed too, but only in send order and only once.
        assert texts == [f"m{i}" for i in range(len(texts))]
        assert len(texts) >= len(acked)
        assert snapshot["revision"] == len(texts)
    finally:
        server.kill()
