"""Node.js beside the tests: ``npm ci`` of a test project once per lock file
(one at a time across pytest-xdist workers), and a node script run against a
real server (started, read until it says it is ready, then awaited for its
JSON answer)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.conftest import require_binary

__all__ = ["NodeRun", "node_script", "npm_ci"]

#: How long a script may take to say it is ready, and then to finish.
NODE_TIMEOUT_S = 30.0


def npm_ci(project: Path) -> Path:
    """``project`` with its node_modules as its package-lock.json says
    (``npm ci`` only when the lock file changed since the last one).

    The suite's workers (pytest-xdist) share the folder: ``npm ci`` deletes
    node_modules first, so one worker's install would pull the tools out from
    under another's. The workers take turns on an exclusive lock of
    package-lock.json itself; the one that waited finds the stamp and goes on.
    """
    npm = require_binary("npm")
    stamp = project / "node_modules" / ".tsync-lock"
    with open(project / "package-lock.json") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
        lock = lock_file.read()
        if not stamp.exists() or stamp.read_text() != lock:
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=project,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, f"npm ci failed:\n{result.stdout}\n{result.stderr}"
            stamp.write_text(lock)
    return project


class NodeRun:
    """A node script that said ``{"ready": true}`` on its first line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def finish(self) -> Any:
        """Wait for the script to end; its output (one JSON value) once it
        exited 0, else the test fails with what it printed."""
        async with asyncio.timeout(NODE_TIMEOUT_S):
            out, err = await self.proc.communicate()
        assert self.proc.returncode == 0, out + err
        return json.loads(out)


@contextlib.asynccontextmanager
async def node_script(script: str, *args: str, cwd: Path) -> AsyncIterator[NodeRun]:
    """Run ``node script args...`` in ``cwd`` until it is ready; killed on
    the way out if it is still running."""
    node = require_binary("node")
    proc = await asyncio.create_subprocess_exec(
        node, script, *args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(NODE_TIMEOUT_S):
            ready = await proc.stdout.readline()
        if json.loads(ready or b"null") != {"ready": True}:
            _, err = await proc.communicate()
            raise AssertionError(f"{script} was not ready: {ready!r} {err!r}")
        yield NodeRun(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
