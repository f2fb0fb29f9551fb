"""Hypothesis strategies for LMML narratives and transcripts built from them."""

from __future__ import annotations

from hypothesis import strategies as st

from protocol.lmml.render import embed_part
from protocol.types import Message, TextPart

#: Lines that matter to the parser, plus plain and non-ASCII prose.
_LINES = st.sampled_from(
    [
        "## user",
        "# Assistant",
        "### Turn 2 -- system",
        "## userland",
        "<!-- tool -->",
        "<!--assistant-->",
        '<!-- user {"name": "n"} -->',
        "<!-- context -->",
        "```",
        "~~~~",
        "```python",
        "see @a.txt.",
        "mail x@b.txt now",
        "`@c.txt` and ``@d.txt``",
        "a ` b @e.png",
        "\\@f.txt",
        "see @img/h.png, @b.txt/../x",
        "\\`@a.txt` ``x`@c.txt``",
        "@@@a.txt",
        "@@@",
        "",
        "   ",
        "prose",
        "héllo wörld ✓",
        "# not a role",
    ]
)
_CONTENT_LINES = st.sampled_from(["", "x", "## user", "```", "@a.txt", "é", "<!-- user -->"])
_NAMES = st.sampled_from(["a.txt", "b.txt", "e.png", "g.bin", "img/h.png"])


@st.composite
def _fence(draw: st.DrawFn) -> list[str]:
    body = draw(st.lists(_CONTENT_LINES, max_size=3))
    return [f"@@@{draw(_NAMES)}", *body, "@@@"]


@st.composite
def narratives(draw: st.DrawFn) -> str:
    """Narratives: tricky lines, fences (some never closed), LF or CRLF, maybe no final newline."""
    blocks = draw(st.lists(st.one_of(_LINES.map(lambda line: [line]), _fence()), max_size=12))
    lines = [line for block in blocks for line in block]
    endings = draw(
        st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines))
    )
    text = "".join(line + ending for line, ending in zip(lines, endings, strict=True))
    if text and draw(st.booleans()):
        text = text[: -len(endings[-1])]
    return text


#: Bytes for any name an external reference in ``narratives()`` may use.
ASSETS = {
    "a.txt": b"alpha\n",
    "b.txt": b"\xff\xfebinary",
    "c.txt": b"c",
    "d.txt": b"d",
    "e.png": b"\x89PNG\r\n\x1a\n",
    "f.txt": b"f",
    "g.bin": b"",
    "img/h.png": b"\x89PNG\r\n\x1a\nh",
}


#: Texts whose meaning depends on the messages around them.
_SHORT_TEXTS = st.sampled_from(
    [
        "",
        "x",
        "\ufeffbom",
        "cr\r",
        "@@@a.txt",
        "@@@a.txt\nx\n",
        "@@@\n",
        "@a.txt\n",
        "@@@a.txt\nalpha\n@@@\n",
        "@@@a.txt\nx\n@@@\n",
        "```\n",
    ]
)


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    """Messages whose texts are narrative-like and whose parts often, not always,
    are what those texts' embeds render to: exports mix narrative and ``content``."""
    candidates = [embed_part(name, data) for name, data in ASSETS.items()]
    candidates += [
        embed_part("a.txt", b"x"),  # no final newline: no fence can hold it
        embed_part("a.txt", b"x\n"),
        embed_part("b.txt", b""),
    ]
    result: list[Message] = []
    for _ in range(draw(st.integers(0, 5))):
        text = draw(st.one_of(_SHORT_TEXTS, _SHORT_TEXTS, narratives()))
        role = draw(st.sampled_from(["user", "assistant", "context", "tool"]))
        if draw(st.booleans()):
            result.append(Message(role=role, content=text))  # type: ignore[arg-type]
            continue
        parts = draw(st.lists(st.sampled_from(candidates), max_size=3))
        content = (TextPart(text=text), *parts)
        result.append(Message(role=role, content=content))  # type: ignore[arg-type]
    return result
