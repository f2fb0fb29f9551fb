"""Presence with credentials: a member is its token's ``sub`` (a different
``name`` is refused), ``writer`` and ``agent`` need ``write``, stating it
needs ``read``; the static token names no ``sub`` and may give a name."""

from __future__ import annotations

import httpx

from protocol import wire
from protocol.presence import PresenceCopy
from protocol.wire import Baseline, ErrorFrame, Pong, PresenceFrame
from server.config import ServerConfig
from tests.auth.conftest import AUDIENCE, SECRET, STATIC, mint
from tests.server.live.test_presence import follow_until, who_of
from tests.support.servers import running_server
from tests.support.wsclient import RawClient


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_members_are_named_by_their_token_and_kinds_need_their_rights() -> None:
    config = ServerConfig(
        store="memory",
        token=STATIC,
        jwt_secret=SECRET,
        jwt_audience=AUDIENCE,
        presence_interval_s=0.1,
    )
    async with running_server(config) as srv:
        async with httpx.AsyncClient(base_url=srv.url, headers=_bearer(STATIC)) as http:
            r = await http.post("/v1/transcripts", json={"id": "t"})
            assert r.status_code == 201, r.text
        reader = mint("rita", read=["t"])
        async with (
            await RawClient.connect(srv.ws_url, additional_headers=_bearer(reader)) as rita,
            await RawClient.connect(srv.ws_url, additional_headers=_bearer(STATIC)) as admin,
        ):
            await admin.send(op="subscribe", transcriptId="t", presence=True)
            await admin.expect(Baseline)
            seen = PresenceCopy()
            seen.take(await admin.expect(PresenceFrame))
            await admin.send(op="presence", transcriptId="t", name="ops", kind="agent", ref=1)
            assert (await admin.expect(Pong)).ref == 1

            await rita.send(op="presence", transcriptId="t", ref="early")  # not subscribed
            assert (await rita.expect(ErrorFrame)).code == wire.INVALID_FRAME
            await rita.send(op="subscribe", transcriptId="t")
            await rita.expect(Baseline)
            await rita.send(op="presence", transcriptId="t", name="mallory", ref="a")
            error = await rita.expect(ErrorFrame)
            assert (error.code, error.ref) == (wire.FORBIDDEN, "a")
            assert "'rita'" in error.message
            await rita.send(op="presence", transcriptId="t", kind="writer", ref="b")
            assert (await rita.expect(ErrorFrame)).code == wire.FORBIDDEN
            await rita.send(op="presence", transcriptId="t", name="rita", ref="c")
            assert (await rita.expect(Pong)).ref == "c"
            await follow_until(admin, seen, lambda: who_of(seen) == ["ops", "rita"])
            kinds = {m.who: m.kind for m in seen.listed()}
            assert kinds == {"ops": "agent", "rita": "viewer"}

        other = mint("olga", read=["other"])
        async with httpx.AsyncClient(base_url=srv.url, headers=_bearer(other)) as http:
            r = await http.get("/v1/transcripts/t/presence")
            assert r.status_code == 403, r.text
