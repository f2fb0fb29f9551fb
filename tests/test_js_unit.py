"""The JavaScript client's unit tests (``tests/js/``, Node's built-in runner),
run from pytest so that the one test command covers them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[1]
JS_TESTS = ROOT / "tests" / "js"


def test_node_unit_tests_pass() -> None:
    node = require_binary("node")
    files = sorted(JS_TESTS.glob("*.test.mjs"))
    assert files, "no JavaScript tests found"
    # Files named explicitly: how ``node --test`` reads a directory argument
    # differs between Node versions.
    result = subprocess.run(
        [node, "--test", "--test-reporter=tap", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    summary = result.stdout[-4000:] + result.stderr[-2000:]
    assert result.returncode == 0, summary
    assert "# fail 0" in result.stdout, summary
    assert "# pass 0\n" not in result.stdout, summary


def test_no_module_of_the_client_is_over_1000_lines() -> None:
    """Issue 41: client_js/ is modules of one job each, none over 1,000 lines."""
    sizes = {p.name: len(p.read_text("utf-8").splitlines()) for p in ROOT.glob("client_js/*.js")}
    assert len(sizes) > 3 and "client.js" in sizes
    assert {name: n for name, n in sizes.items() if n > 1000} == {}
