"""``plan_run``: which queued appends go into one commit (pure, no awaits)."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given
from hypothesis import strategies as st

from server.live.appends import plan_run


class Queued(NamedTuple):
    messages: tuple[str, ...] = ("m",)
    expected_revision: int | None = None
    key: str | None = None


def nothing_known(key: str) -> bool:
    return False


def test_plain_appends_go_together() -> None:
    assert plan_run([Queued()] * 5, revision=3, known=nothing_known) == 5


def test_an_empty_batch_goes_alone() -> None:
    queued = [Queued(), Queued(messages=()), Queued()]
    assert plan_run(queued, revision=0, known=nothing_known) == 1
    assert plan_run(queued[1:], revision=1, known=nothing_known) == 0


def test_a_key_seen_before_or_twice_in_the_run_stops_it() -> None:
    assert plan_run([Queued(key="a"), Queued(key="k")], revision=0, known=lambda k: k == "k") == 1
    assert plan_run([Queued(key="a"), Queued(key="b"), Queued(key="a")], revision=0,
                    known=nothing_known) == 2  # fmt: skip


def test_expected_revisions_must_be_what_the_run_makes_current() -> None:
    # At revision 4: the first lands at 5, so the second must expect 5.
    queued = [Queued(expected_revision=4), Queued(expected_revision=5), Queued(expected_revision=5)]
    assert plan_run(queued, revision=4, known=nothing_known) == 2
    assert plan_run(queued, revision=3, known=nothing_known) == 0


@given(
    st.lists(
        st.builds(
            Queued,
            messages=st.sampled_from([(), ("m",)]),
            expected_revision=st.none() | st.integers(0, 8),
            key=st.none() | st.sampled_from(["a", "b", "c", "d"]),
        ),
        max_size=8,
    ),
    st.integers(0, 5),
    st.sets(st.sampled_from(["a", "b", "c", "d"])),
)
def test_a_run_is_a_prefix_that_commits_without_looking_anything_up(
    queued: list[Queued], revision: int, known: set[str]
) -> None:
    count = plan_run(queued, revision=revision, known=known.__contains__)
    assert 0 <= count <= len(queued)
    keys: set[str] = set()
    for i, q in enumerate(queued[:count]):
        assert q.messages
        assert q.expected_revision in (None, revision + i)
        if q.key is not None:
            assert q.key not in known and q.key not in keys
            keys.add(q.key)
    if count < len(queued):
        # The next one could not have joined: it breaks one of the rules.
        nxt = queued[count]
        assert (
            not nxt.messages
            or nxt.expected_revision not in (None, revision + count)
            or (nxt.key is not None and (nxt.key in known or nxt.key in keys))
        )
