"""The README's agent, run as written, on another replica than the user's.

The program is the README's block under "An agent on another replica", saved
to a file and started as a user would (``./scripts/python agent.py ID``; here
with this suite's interpreter). Two replicas share one Redis: the user writes
on the first, agents run on the second (and, in the race, on both), and every
user message gets exactly one answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import client_py
from tests.redis.replicas import replicas
from tests.support.redis_server import RedisServer
from tests.support.servers import ctrl_c_works

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading: str) -> str:
    """The first ```python block after ``heading`` in README.md."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(heading) :]
    match = re.search(r"```python[^\n]*\n(.*?)```", after, re.S)
    assert match is not None, f"no python block under {heading!r}"
    return match.group(1)


@contextlib.asynccontextmanager
async def agent(tmp_path: Path, url: str, transcript_id: str) -> AsyncIterator[None]:
    """The README's agent as a process; stopped with Ctrl-C as a user would."""
    program = tmp_path / "agent.py"
    program.write_text(readme_block("### An agent on another replica"))
    env = {**os.environ, "TSYNC_URL": url, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_API_KEY", None)  # the echo model: no network
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(program),
        transcript_id,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        preexec_fn=ctrl_c_works,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(20):
            first = await proc.stdout.readline()
        assert first.startswith(b"answering "), first + await proc.stdout.read()
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(10):
                await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def answers(mirror: client_py.Mirror, count: int) -> list[str]:
    """The assistant messages once there are ``count`` of them."""
    async with asyncio.timeout(30):
        updates = mirror.events()
        while sum(m.role == "assistant" for m in mirror.messages) < count:
            await anext(updates)
    return [m.text() for m in mirror.messages if m.role == "assistant"]


async def test_the_readme_agent_answers_each_user_message_from_another_replica(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with (
        replicas(2, redis_server.url, tmp_path) as (front, back),
        client_py.connect(front.url) as user,
    ):
        await user.create("chat-1", [{"role": "user", "content": "hi"}])
        mirror = await user.subscribe("chat-1")
        async with agent(tmp_path, back.url, "chat-1"):
            assert await answers(mirror, 1) == ["You said: hi "]
            await user.append("chat-1", [{"role": "user", "content": "and now?"}])
            assert await answers(mirror, 2) == ["You said: hi ", "You said: and now? "]
        roles = [m.role for m in mirror.messages]
        assert roles == ["user", "assistant", "user", "assistant"]


async def test_two_agents_on_two_replicas_answer_each_message_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with (
        replicas(2, redis_server.url, tmp_path) as (front, back),
        client_py.connect(front.url) as user,
    ):
        await user.create("race", [])
        mirror = await user.subscribe("race")
        async with agent(tmp_path, front.url, "race"), agent(tmp_path, back.url, "race"):
            for n in range(1, 4):
                await user.append("race", [{"role": "user", "content": f"q{n}"}])
                assert (await answers(mirror, n))[-1] == f"You said: q{n} "
        roles = [m.role for m in mirror.messages]
        assert roles == ["user", "assistant"] * 3
