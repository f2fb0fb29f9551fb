"""What the README and docs/*.md say about the server agrees with the code,
where a test can tell (issue "Third contact", items 7 and 10):

- where Durable Streams live: with the store (SQLite file, Redis, or the
  process alone on ``--store memory``), as ``server/streams/open.py`` picks
  them; no page may still say they are in memory "for now" or "not in Redis
  yet" (``tests/durable_streams/test_durability.py`` restarts a SQLite server
  and ``tests/redis`` shares them between replicas);
- the README's ``tsync bench`` synopsis names every scenario ``tsync bench``
  takes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from client_py.bench.workload import SCENARIOS
from server.store.open import open_store
from server.store.sqlite.streams import STREAMS_FILE, SQLiteStreamLog
from server.streams.log import NoLog
from server.streams.open import log_for_store, registry_for_store
from server.streams.registry import Limits, StreamRegistry
from server.streams.shared import SharedPort

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: What the pages said while Durable Streams were in memory only (issue 27's
#: "Third contact", item 7): each phrase is wrong since they live with the store.
STALE = (
    "this process's memory, for now",
    "not in Redis yet",
    "streams in memory, not shared",
)


def _prose(path: Path) -> str:
    """The page with its line breaks as spaces, so a phrase split over two
    lines is found."""
    return re.sub(r"\s+", " ", path.read_text())


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_page_says_durable_streams_are_in_memory_only(path: Path) -> None:
    text = _prose(path)
    found = [phrase for phrase in STALE if phrase.lower() in text.lower()]
    assert found == [], f"{path.name} still says {found}"


def test_the_readme_says_where_durable_streams_live() -> None:
    readme = _prose(ROOT / "README.md")
    section = readme.split("### Durable Streams", 1)[1].split("## Tokens", 1)[0]
    for claim in (STREAMS_FILE, "surviving a restart", "on Redis in Redis", "--store memory"):
        assert claim in section, claim


def test_streams_live_where_the_readme_says_for_each_store(tmp_path: Path) -> None:
    """A file beside the SQLite store's data, Redis's own registry on Redis,
    the process's registry and no log on memory (constructors do no I/O: no
    Redis is needed)."""
    sqlite = open_store(f"sqlite:{tmp_path}")
    log = log_for_store(sqlite)
    try:
        assert isinstance(log, SQLiteStreamLog)
        assert (tmp_path / STREAMS_FILE).is_file()
    finally:
        log.close()
    assert type(registry_for_store(sqlite, Limits())) is StreamRegistry
    redis = open_store("redis://127.0.0.1:1/0")
    assert isinstance(log_for_store(redis), NoLog)
    assert isinstance(registry_for_store(redis, Limits()).port, SharedPort)
    memory = open_store("memory")
    assert isinstance(log_for_store(memory), NoLog)
    assert type(registry_for_store(memory, Limits())) is StreamRegistry


def test_the_readme_bench_synopsis_names_every_scenario() -> None:
    line = next(
        line for line in (ROOT / "README.md").read_text().splitlines() if "tsync bench " in line
    )
    listed = re.search(r"tsync bench (\S+)", line)
    assert listed is not None, line
    assert tuple(listed[1].split("|")) == SCENARIOS, line
