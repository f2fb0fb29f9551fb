"""The store options document themselves: docs/configuration.md holds exactly
what ``render_markdown()`` writes from their descriptions."""

from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec

from server.store.options import MemoryOptions, RedisOptions, SQLiteOptions, render_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
SECTION = re.compile(
    r"(<!-- store-options:begin[^\n]*-->\n)(.*?)(<!-- store-options:end -->)", re.S
)


def test_configuration_md_shows_exactly_the_store_options() -> None:
    """Regenerate with ``TSYNC_UPDATE_DOCS=1 ./scripts/test
    tests/server/store/test_store_options.py``."""
    text = DOC.read_text(encoding="utf-8")
    match = SECTION.search(text)
    assert match is not None, "docs/configuration.md lost its store-options markers"
    if os.environ.get("TSYNC_UPDATE_DOCS") == "1":
        text = text[: match.start(2)] + render_markdown() + text[match.end(2) :]
        DOC.write_text(text, encoding="utf-8")
        match = SECTION.search(text)
        assert match is not None
    assert match.group(2) == render_markdown(), (
        "docs/configuration.md is out of date: regenerate it with "
        "TSYNC_UPDATE_DOCS=1 ./scripts/test tests/server/store/test_store_options.py"
    )


def test_every_option_is_described_and_has_a_default() -> None:
    for cls in (MemoryOptions, SQLiteOptions, RedisOptions):
        for field in msgspec.structs.fields(cls):
            assert field.default is not msgspec.NODEFAULT, field.name
            assert f"| `{field.name}` |" in render_markdown()
            row = next(line for line in render_markdown().splitlines() if f"`{field.name}`" in line)
            assert row.rstrip(" |").split("|")[-1].strip(), f"{field.name} has no description"
