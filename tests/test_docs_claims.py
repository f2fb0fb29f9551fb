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
from server.store.open import open_backend
from server.store.sqlite.streams import STREAMS_FILE, SQLiteStreamLog
from server.streams.log import NoLog
from server.streams.open import stream_port
from server.streams.port import LogPort
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
    the process's registry and no log on memory: each store opened with its
    streams part (constructors do no I/O: no Redis is needed, and the
    SQLite log is opened when the registry binds its port)."""
    sqlite = stream_port(open_backend(f"sqlite:{tmp_path}"))
    assert isinstance(sqlite, LogPort)
    assert not (tmp_path / STREAMS_FILE).exists()
    registry = StreamRegistry(Limits(), port=sqlite)
    try:
        assert isinstance(sqlite.log, SQLiteStreamLog)
        assert (tmp_path / STREAMS_FILE).is_file()
    finally:
        registry.detach()
    assert isinstance(stream_port(open_backend("redis://127.0.0.1:1/0")), SharedPort)
    memory = stream_port(open_backend("memory"))
    assert isinstance(memory, LogPort)
    StreamRegistry(Limits(), port=memory)
    assert isinstance(memory.log, NoLog)


def test_the_readme_bench_synopsis_names_every_scenario() -> None:
    line = next(
        line for line in (ROOT / "README.md").read_text().splitlines() if "tsync bench " in line
    )
    listed = re.search(r"tsync bench (\S+)", line)
    assert listed is not None, line
    assert tuple(listed[1].split("|")) == SCENARIOS, line
