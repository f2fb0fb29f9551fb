"""Hypothesis strategies for LMML narratives and transcripts built from them."""

from __future__ import annotations

from hypothesis import strategies as st

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
        "",
        "   ",
        "prose",
        "héllo wörld ✓",
        "# not a role",
    ]
)
_CONTENT_LINES = st.sampled_from(["", "x", "## user", "```", "@a.txt", "é", "<!-- user -->"])
_NAMES = st.sampled_from(["a.txt", "b.txt", "e.png", "g.bin"])


@st.composite
def _fence(draw: st.DrawFn) -> list[str]:
    body = draw(st.lists(_CONTENT_LINES, max_size=3))
    return [f"@@@{draw(_NAMES)}", *body, "@@@"]


@st.composite
def narratives(draw: st.DrawFn) -> str:
    """Narratives that parse: tricky lines, closed fences, LF or CRLF, maybe no final newline."""
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
}
