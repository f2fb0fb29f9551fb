"""Properties of parsing and segmentation over generated narratives."""

from __future__ import annotations

from hypothesis import given, settings

from protocol.lmml import parse, segment
from tests.lmml.strategies import narratives


@settings(max_examples=100, deadline=None)
@given(narratives())
def test_segmentation_never_loses_a_byte(text: str) -> None:
    narrative = parse(text)
    turns = segment(narrative)
    assert "".join(t.delimiter + t.text for t in turns) == text
    data = text.encode()
    position = 0
    for turn in turns:
        delimiter = turn.delimiter.encode()
        assert data[turn.start - len(delimiter) : turn.start] == delimiter
        assert data[turn.start : turn.end] == turn.text.encode()
        assert turn.start - len(delimiter) == position
        position = turn.end
        assert turn.role in ("user", "assistant", "system", "tool", "context")
        assert all(turn.start <= e.offset < turn.end for e in turn.embeds)
        assert "\r" not in turn.role and all("\r" not in e.name for e in turn.embeds)
    assert position == len(data)
    # Only the preamble may lack a delimiter; it is empty only when it is the
    # only turn (a narrative without delimiters).
    assert turns and all(t.delimiter for t in turns[1:])
    if not turns[0].delimiter:
        assert turns[0].role == "context"
        assert turns[0].text or len(turns) == 1


@settings(max_examples=50, deadline=None)
@given(narratives())
def test_every_embed_belongs_to_exactly_one_turn(text: str) -> None:
    narrative = parse(text)
    owned = [e.name for t in segment(narrative) for e in t.embeds]
    assert sorted(owned) == sorted(e.name for e in narrative.embeds)
    assert [e.name for e in narrative.embeds] == sorted(
        (e.name for e in narrative.embeds), key=lambda n: owned.index(n)
    )


@settings(max_examples=50, deadline=None)
@given(narratives())
def test_crlf_works_like_lf(text: str) -> None:
    lf = text.replace("\r\n", "\n")
    crlf = lf.replace("\n", "\r\n")
    lf_turns, crlf_turns = segment(parse(lf)), segment(parse(crlf))
    assert [t.role for t in lf_turns] == [t.role for t in crlf_turns]
    assert [t.text.replace("\r\n", "\n") for t in crlf_turns] == [t.text for t in lf_turns]
    assert [[e.name for e in t.embeds] for t in crlf_turns] == [
        [e.name for e in t.embeds] for t in lf_turns
    ]
