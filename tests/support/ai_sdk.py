"""The AI SDK itself beside the tests: ``ai`` from npm (tests/ai_sdk, its
version pinned in the lock file), and a script of that folder run with a
JSON value on stdin and its JSON answer read back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import require_binary
from tests.support.node import npm_ci

__all__ = ["AI_SDK", "run_ai_sdk"]

AI_SDK = Path(__file__).resolve().parents[1] / "ai_sdk"


def run_ai_sdk(script: str, payload: Any, *, timeout: float = 300) -> Any:
    """``node script`` in tests/ai_sdk with ``payload`` as JSON on stdin;
    its output, one JSON value (the test fails with what it printed when it
    exits non-zero)."""
    node = require_binary("node")
    npm_ci(AI_SDK)
    result = subprocess.run(
        [node, script],
        cwd=AI_SDK,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
