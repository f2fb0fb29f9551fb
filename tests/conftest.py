"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

REQUIRE_ALL = os.environ.get("TSYNC_REQUIRE_ALL") == "1"


def require_binary(name: str, path: str | None = None) -> str:
    """The path of a binary a test needs; skip (or fail in CI) without it."""
    found = path if path and os.path.exists(path) else shutil.which(name)
    if found is None:
        message = f"{name} is not installed"
        if REQUIRE_ALL:
            pytest.fail(message + " (TSYNC_REQUIRE_ALL=1: CI must install it)")
        pytest.skip(message)
    return found


# --- Running on several workers (pytest-xdist; ./scripts/test passes -n) ----
#
# pytest-xdist's `loadgroup` keeps the tests of one ``xdist_group`` mark on one
# worker and hands out every other test alone, which would start a module's
# shared fixtures (its Redis, Redis Cluster, Chromium, server) on every worker
# that gets one of its tests. Here the other tests go out a file at a time, as
# `loadfile` does, and the files below share a worker with the others of
# their group, one file after another.
SHARED_WORKER = {
    # npm.install() empties and refills tests/js_package/node_modules/@transcript-sync.
    "tests/js_package/": "js-package",
    "tests/browser/test_react_package.py": "js-package",
    # They attack a server and measure how it keeps up: one attack at a time.
    "tests/robustness/": "robustness",
}


def _file_or_group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    for prefix, group in SHARED_WORKER.items():
        if path.startswith(prefix):
            return group
    return path


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileOrGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = super()._split_scope(nodeid)  # an xdist_group mark's name
            return group if group != nodeid else _file_or_group(nodeid)

    return FileOrGroupScheduling(config, log)
