"""The hostile-load suite: each test attacks a real ``tsync serve`` process
the way issue 14 did, with small sizes that still show the shape, and asserts
the bound that holds now (see ``harness``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.robustness.harness import Target, serving


@pytest.fixture
def target_factory(tmp_path: Path) -> Iterator[Callable[..., Target]]:
    """Start servers on demand (``target_factory(settings={...})``); all
    are killed at the end of the test."""
    with ExitStack() as stack:
        count = 0

        def start(**kwargs: Any) -> Target:
            nonlocal count
            count += 1
            folder = tmp_path / f"target{count}"
            folder.mkdir()
            return stack.enter_context(serving(folder, **kwargs))

        yield start


@pytest.fixture
def target(target_factory: Callable[..., Target]) -> Target:
    """One server with the default settings and a SQLite store."""
    return target_factory()
