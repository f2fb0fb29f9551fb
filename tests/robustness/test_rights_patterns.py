"""Issue 24 item 5: rights patterns are matched in linear time.

Before: a token whose read pattern is ``*a*a*a*a*ab`` froze the whole server
3.7 s per ``subscribe`` to an id of 128 ``a`` (a backtracking regular
expression; 6 stars about 60 s, 8 stars hours), and ``GET
/v1/auth?transcriptId=`` cost the same. Here that token checks 40 times
(with 8 stars too) while an unrelated client pings and a writer appends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import jwt

from protocol import wire
from tests.robustness.acknowledged import writing
from tests.robustness.harness import Target, assert_responsive, probing
from tests.support.wsclient import RawClient

SECRET = "robustness-rights-secret-0123456789abcdef"
STATIC = "robustness-static-admin-token"
ATTACK_ID = "a" * 128


def _token(**claims: object) -> str:
    return jwt.encode(
        {"sub": "mallory", "exp": int(time.time() + 600), **claims}, SECRET, algorithm="HS256"
    )


def test_backtracking_patterns_cost_nothing(target_factory: Callable[..., Target]) -> None:
    target = target_factory(settings={"token": STATIC, "jwt_secret": SECRET})
    token = _token(read=["*a*a*a*a*ab", "*a" * 8 + "b"], write=["*a*a*a*a*a*ab"])
    admin = {"authorization": f"Bearer {STATIC}"}
    rss_before = target.rss()

    async def attack() -> tuple[list[str], list[tuple[int, bool]]]:
        codes = []
        async with await RawClient.connect(f"{target.ws_url}?token={token}") as client:
            for i in range(20):
                await client.send(op="subscribe", transcriptId=ATTACK_ID, ref=i)
                codes.append((await client.expect(wire.ErrorFrame, timeout=30)).code)
        answers = []
        async with httpx.AsyncClient(
            base_url=target.url, headers={"authorization": f"Bearer {token}"}, timeout=60
        ) as http:
            for _ in range(20):
                info = await http.get("/v1/auth", params={"transcriptId": ATTACK_ID})
                answers.append((info.status_code, info.json()["transcript"]["read"]))
        return codes, answers

    with (
        writing(target.url, "bystander", admin) as writer,
        probing(f"{target.ws_url}?token={STATIC}") as probe,
    ):
        began = time.monotonic()
        codes, answers = asyncio.run(attack())
        took = time.monotonic() - began
        probe.wait_pings(5)
    assert codes == ["forbidden"] * 20
    assert answers == [(200, False)] * 20
    assert took < 10, f"40 rights checks took {took:.1f} s"
    assert_responsive(probe)
    assert target.rss() - rss_before < 50 << 20
    writer.assert_nothing_lost()
    # The same token still reads what its pattern does match.
    allowed = httpx.get(
        target.url + "/v1/auth",
        params={"transcriptId": ATTACK_ID[:-1] + "b"},
        headers={"authorization": f"Bearer {token}"},
    )
    assert allowed.json()["transcript"]["read"] is True
