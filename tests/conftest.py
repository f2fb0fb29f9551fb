"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import shutil

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
