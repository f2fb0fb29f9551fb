"""Fixtures shared by the whole suite."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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
# `loadfile` does; the files of a group below share a worker, one after
# another; and the files of PER_TEST, whose tests share nothing costly, go out
# a test at a time.
SHARED_WORKER = {
    # npm.install() empties and refills tests/js_package/node_modules/@transcript-sync.
    "tests/js_package/": "js-package",
    "tests/browser/test_react_package.py": "js-package",
    "tests/browser/test_ai_chat_tabs.py": "js-package",
    # They attack a server and measure how it keeps up: one attack at a time.
    "tests/robustness/": "robustness",
    # It counts the drafts its on-time subscribers saw close: beside three busy
    # workers they were not on time (3 of 6 closed within the run, once in CI).
    "tests/bench/test_stream.py": "robustness",
}
#: Four runs of the official suite, each against servers and stores of its own
#: (about a minute each on 2 cores: a whole file would end the run alone).
PER_TEST = ("tests/durable_streams/test_conformance.py",)
#: The longest units first (seconds of one serial run on 2 loaded cores: 240,
#: 125, 115, 70, 55, 50), so that none of them starts last and ends the run
#: alone; then the rest, the files with the most tests first; the QUIET
#: robustness group last, when the others have little left to wait for.
SLOW_FIRST = (
    "tests/durable_streams/test_conformance.py",
    "tests/test_new_user.py",
    "tests/lmml/test_linear_time.py",
    "tests/bench/test_smoke.py",
    "tests/bench/test_ceiling.py",
    "tests/server/web/test_values_property.py",
)


def _scope(nodeid: str) -> str:
    """The unit of work ``nodeid`` goes out with: its group, file or itself."""
    path = nodeid.split("::", 1)[0]
    for prefix, group in SHARED_WORKER.items():
        if path.startswith(prefix):
            return group
    return nodeid if path in PER_TEST else path


def _rank(scope: str) -> int:
    ranks = [i for i, first in enumerate(SLOW_FIRST) if scope.startswith(first)]
    return ranks[0] if ranks else len(SLOW_FIRST)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileOrGroupScheduling(LoadGroupScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            group = super()._split_scope(nodeid)  # an xdist_group mark's name
            return group if group != nodeid else _scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete by the first assignment
                self.ordered = True
                for scope in sorted(self.workqueue, key=_rank, reverse=True):
                    if _rank(scope) < len(SLOW_FIRST):
                        self.workqueue.move_to_end(scope, last=False)
                if "robustness" in self.workqueue:
                    self.workqueue.move_to_end("robustness")
            super()._assign_work_unit(node)

    return FileOrGroupScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One node id per test. schemathesis's tests (one per API operation)
    all get their function's node id under pytest 9, and pytest-xdist keeps a
    single test of a node id: the other 37 would silently not run."""
    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1:
            nodeid = item.nodeid.rsplit("::", 1)[0] + "::" + item.name
            if hasattr(item, "_id"):  # pytest 9: a structured id
                from _pytest.nodeid import coerce_node_id

                item._id = coerce_node_id(nodeid)
            else:
                item._nodeid = nodeid
    twice = [nodeid for nodeid, n in Counter(i.nodeid for i in items).items() if n > 1]
    if twice:
        raise pytest.UsageError(f"tests with the same node id would not all run: {twice[:3]}")


#: Tests that measure how fast a server answers while they attack it: while
#: one runs, the other workers finish the test they are running and wait.
QUIET = ("tests/robustness/", "tests/bench/test_stream.py")


#: The quiet lock files of this worker while it runs QUIET tests one after another.
_held: list[IO[str]] = []


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """On pytest-xdist workers, QUIET tests run alone: they take a file lock
    that every other test shares, and keep it from the first QUIET test in a
    row to the last (one wait for the others to finish, not one per test). A
    second lock, a turnstile, lets no new test start while a QUIET one waits
    (no worker starves it). Outside the test's timeout: a wait is not the
    test's time."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        yield
        return
    quiet = item.nodeid.startswith(QUIET)
    if not _held:
        base = Path(tempfile.gettempdir()) / f"tsync-tests-{workerinput['testrunuid']}"
        _held.extend([open(f"{base}.turnstile", "a"), open(f"{base}.quiet", "a")])  # noqa: SIM115
        turnstile, lock = _held
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        if not quiet:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        if not (quiet and nextitem is not None and nextitem.nodeid.startswith(QUIET)):
            for held in _held:  # closing a file releases its lock
                held.close()
            _held.clear()
