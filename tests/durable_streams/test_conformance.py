"""The Durable Streams face held to the protocol's own conformance suite.

``@durable-streams/server-conformance-tests`` (pinned in package.json, run by
vitest as its README says) against ``tsync serve`` on 127.0.0.1: every test
the suite does not skip itself must pass (332 of 332 in 0.3.6; it skips the 6
subscription tests unless asked). The server's long-poll is set short
(``stream_long_poll_s``) and the suite told so: a few of its tests wait for a
long-poll's 204 within vitest's 5-second default. It runs on the memory store,
on SQLite, where every stream is written through to its file, and on Redis
and a Redis Cluster, where the streams live in Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.support.node import npm_ci
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
#: What 0.3.6 runs when subscriptions are not asked for; a new version of the
#: suite is a deliberate change of this number.
EXPECTED_PASSED = 332
LONG_POLL_S = 2


def run_suite(url: str, report: Path) -> dict[str, Any]:
    vitest = HERE / "node_modules" / ".bin" / "vitest"
    env = {**os.environ, "DS_URL": url, "DS_LONG_POLL_MS": str(LONG_POLL_S * 1000)}
    result = subprocess.run(
        [
            str(vitest),
            "run",
            "conformance.test.mjs",
            "--reporter=json",
            f"--outputFile={report}",
        ],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert report.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    summary: dict[str, Any] = json.loads(report.read_text())
    return summary


def failures(summary: dict[str, Any]) -> list[str]:
    return [
        f"{' > '.join(test['ancestorTitles'])} :: {test['title']}: "
        + (test.get("failureMessages") or [""])[0].split("\n")[0][:300]
        for file in summary["testResults"]
        for test in file["assertionResults"]
        if test["status"] == "failed"
    ]


def redis_url(store: str, folder: Path, stack: contextlib.ExitStack) -> str:
    """A private Redis (or a three-master Redis Cluster) for ``store``."""
    binary = require_binary("redis-server")
    if store == "redis":
        server = stack.enter_context(RedisServer(binary, folder / "redis"))
        return server.url
    cluster = RedisCluster(folder / "cluster", binary, require_binary("redis-cli"))
    return stack.enter_context(cluster).url


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis", "redis-cluster"])
def test_the_official_conformance_suite_passes(store: str, tmp_path: Path) -> None:
    require_binary("node")
    npm_ci(HERE)
    with contextlib.ExitStack() as stack:
        url = store
        if store == "sqlite":  # every stream is written through to streams.sqlite3
            url = f"sqlite:{tmp_path / 'data'}"
        elif store.startswith("redis"):  # the streams live in Redis
            url = redis_url(store, tmp_path, stack)
        server = ServerProcess(
            store=url,
            args=["--set", f"stream_long_poll_s={LONG_POLL_S}"],
            log_path=tmp_path / "server.log",
        )
        with server:
            summary = run_suite(server.url, tmp_path / "report.json")
        if store.startswith("redis"):  # the suite's streams went through Redis
            assert redis_stream_keys(url) > 100
    failed = failures(summary)
    assert not failed, "\n".join(failed)
    assert summary["numPassedTests"] == EXPECTED_PASSED, summary["numPassedTests"]
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    if store == "sqlite":  # the suite's streams went through the file
        db = sqlite3.connect(tmp_path / "data" / "streams.sqlite3")
        (written,) = db.execute("SELECT count(*) FROM messages").fetchone()
        db.close()
        assert written > 100, written


def redis_stream_keys(url: str) -> int:
    """How many keys of streams the Redis (every master of a cluster) holds."""
    import redis

    found = 0
    for node in url.split("//", 1)[1].split(","):
        host, port = node.split("/")[0].rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port))
        try:
            found += sum(1 for _ in client.scan_iter("*ds{*", count=1000))
        finally:
            client.close()
    return found
