"""Parsing, import and export take time linear in their input (issue 14).

The first parser looked ahead from every backtick and every ``@@@name`` line
and checked every reference against every code span: a 32 KB narrative of
escaped backticks took 7.4 s, and export parsed its own output again. Here
the worst inputs found, by reading the code and by fuzzing sizes, are timed
at N and 2N: a linear algorithm takes about twice as long, a quadratic one
four times. And the new parser must agree exactly with the old one (kept in
``tests/lmml/oracle.py``) on every narrative.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.lmml import BundleLimits, export_lmml, export_lmmlz, import_messages, parse, segment
from protocol.types import AttachmentPart, Message, TextPart
from tests.lmml import oracle
from tests.lmml.strategies import narratives

SIZE = 64 << 10
#: For inputs that make many objects (turns, messages): enough to show the shape.
SMALL = 32 << 10


def _fill(unit: str, tail: str = "") -> Callable[[int], str]:
    """``unit`` repeated to ``size`` characters, then ``tail``."""
    return lambda size: (unit * (size // len(unit) + 1))[:size] + tail


def _turns(size: int) -> str:
    return "".join(f"## user\n@a{i}.txt\n" for i in range(size // 10))[:size]


def _comment(size: int) -> str:
    return "<!-- user" + " " * size + "x -->\n"


#: Narratives that were quadratic, or could be, and the loop each one drives.
NARRATIVES: dict[str, Callable[[int], str]] = {
    # An "@" makes the paragraph's code spans worth finding.
    "escaped backticks (7.4 s at 32 KB before)": _fill("\\``a", " @a"),
    "code spans and references": _fill("`x` @a "),
    "backtick strings of two lengths": _fill("``a`b", " @a"),
    "backtick strings of growing lengths": lambda n: (
        "".join("`" * (i % 300 + 1) + "a" for i in range(n // 150)) + " @a"
    ),
    "blanks inside a comment delimiter": _comment,
    "turns each with its own reference": _turns,
    "opening lines never closed": _fill("@@@a.txt\n"),
    "opening lines, a closing line at the end": lambda n: _fill("@@@a.txt\nx\n")(n) + "\n@@@\n",
    "code fences": _fill("```\n~~~\nx\n"),
    "headings": _fill("## user `a\n# x @b\n"),
    "one long line of names": _fill("@a/b.c/"),
    "backslashes before at signs": _fill("\\\\\\@a"),
    "non-ASCII prose with references": _fill("é @a ü\n\n"),
}


def _best(run: Callable[[], object], repeat: int) -> float:
    """The least CPU time of ``repeat`` runs: CPU time, not wall-clock time,
    so that other processes on a busy machine barely count."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            run()
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
    return best


def _doubling_ratio(
    run: Callable[[int], Callable[[], object]], size: int = SIZE, attempts: int = 8
) -> float:
    """CPU time at 2N over CPU time at N, each the best of several runs.

    Sizes alternate and the bests are kept across attempts (up to
    ``attempts`` of three runs each, until the ratio is under 3), so a busy
    machine does not fail a linear algorithm; a quadratic one gives about 4
    however often it is timed.
    """
    small, large = run(size), run(2 * size)
    best_small = best_large = float("inf")
    for _ in range(attempts):
        best_small = min(best_small, _best(small, 3))
        best_large = min(best_large, _best(large, 3))
        if best_large < 3 * best_small:
            break
    return best_large / max(best_small, 1e-6)


@pytest.mark.parametrize("name", NARRATIVES)
def test_parsing_takes_linear_time(name: str) -> None:
    make = NARRATIVES[name]

    def run(size: int) -> Callable[[], object]:
        text = make(size)
        return lambda: segment(parse(text))

    assert _doubling_ratio(run, SMALL if make is _turns else SIZE) < 3


@pytest.mark.parametrize(
    "name", ["escaped backticks (7.4 s at 32 KB before)", "code spans and references"]
)
def test_exporting_one_big_message_takes_linear_time(name: str) -> None:
    # 31.8 s for one 48 KB message before: the exporter parsed its output again.
    make = NARRATIVES[name]

    def run(size: int) -> Callable[[], object]:
        transcript = [Message(role="user", content=make(size))]
        return lambda: (export_lmml(transcript), export_lmmlz(transcript))

    assert _doubling_ratio(run) < 3


def test_exporting_many_messages_with_embeds_takes_linear_time() -> None:
    def run(size: int) -> Callable[[], object]:
        transcript = [
            Message(
                role="user" if i % 2 else "assistant",
                content=(
                    TextPart(text=f"see @@@f{i}.txt\n@@@f{i}.txt\nx\n@@@\n`y` @g{i}.txt\n"),
                    AttachmentPart(name=f"f{i}.txt", mime="text/plain", content="x\n"),
                    AttachmentPart(name=f"g{i}.txt", mime="text/plain", content="g"),
                ),
            )
            for i in range(size // 64)
        ]
        return lambda: export_lmmlz(transcript)

    assert _doubling_ratio(run, SMALL) < 3


def test_importing_takes_linear_time() -> None:
    def run(size: int) -> Callable[[], object]:
        body = "".join(f"## user\n@@@a{i}.txt\nx `y` @@@\n@@@\n" for i in range(size // 32))
        data = body.encode()
        limits = BundleLimits(max_delimiters=1 << 20)
        return lambda: import_messages(data, limits=limits)

    assert _doubling_ratio(run, SMALL) < 3


# The oracle on texts made of the pieces the parser cares about.
_PIECES = st.sampled_from(
    [
        "`",
        "``",
        "```",
        "~~~",
        "\\",
        "@",
        "@a.txt",
        "@img/h.png",
        "@a/../b",
        "@a/.x/",
        "@b.",
        "x",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\r",
        "\n\n",
        "## user",
        "# Assistant x",
        "#",
        "<!--",
        "-->",
        " tool ",
        "context",
        "{",
        "}",
        '{"name": "n"}',
        "@@@",
        "@@@a.txt",
        "@@@img/h.png",
        "é",
        ".",
        "/",
        "\u2028",
        "\x0c",
    ]
)
_SOUP = st.lists(_PIECES, max_size=80).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_SOUP, narratives(), st.text(max_size=60)))
def test_the_parser_gives_exactly_what_the_old_one_gives(text: str) -> None:
    narrative = parse(text)
    assert narrative == oracle.parse(text)
    assert segment(narrative) == oracle.segment(narrative)
