"""What the subscribers of one group saw, counted (``GroupStats``): its own
module so that the checkers that count into it (``draftcheck``, ``fastpath``)
and the subscriber that owns them import it without a cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client_py.bench.histogram import LatencyHistogram

__all__ = ["GroupStats"]


@dataclass(slots=True)
class GroupStats:
    """What the subscribers of one group (``on-time`` or ``stopped``) saw."""

    subscribers: int = 0
    frames: int = 0
    ws_messages: int = 0
    received_bytes: int = 0
    delivered: int = 0  #: increments applied (events)
    messages: int = 0  #: messages in those increments that carried a timestamp
    baselines: int = 0
    rebaselines: int = 0
    gaps: int = 0  #: revision gaps and seq gaps
    seq_gaps: int = 0
    repeats: int = 0  #: events at or below the copy's revision, and repeated seqs
    lagged: int = 0
    foreign: int = 0
    invalid: int = 0
    errors: int = 0  #: error frames other than lagged
    stops: int = 0
    disconnects: int = 0  #: connections lost without being asked to close
    incomplete: int = 0  #: subscribers that never reached the final revision
    missing: int = 0  #: events between their last revision and the final one
    expected: int = 0  #: events each subscriber should have applied, summed
    last_apply_ns: int = 0
    # Drafts (stream scenario; ``client_py.bench.draftcheck``):
    draft_frames: int = 0  #: draft frames (or the core's draft updates)
    draft_texts: int = 0  #: of them ``text`` frames
    tokens: int = 0  #: tokens delivered (one per delta, those past the copy per text)
    drafts_final: int = 0  #: drafts closed by their commit
    drafts_dropped: int = 0  #: drafts closed without a message
    draft_mismatches: int = 0  #: finals whose text was not the committed message
    draft_gaps: int = 0  #: deltas past n + 1 (updates missed)
    draft_repairs: int = 0  #: gaps a text repaired
    drafts_unclosed: int = 0  #: drafts still open at the end
    backlog_frames: int = 0  #: after a pause: frames with tokens due before the resume
    backlog_texts: int = 0  #: ... of them text frames
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    token_latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    def counters(self) -> dict[str, int]:
        return {
            name: getattr(self, name)
            for name in self.__slots__
            if name not in ("latency", "token_latency")
        }

    def merge(self, counters: dict[str, int], latency: bytes, token_latency: bytes = b"") -> None:
        for name, value in counters.items():
            if name == "last_apply_ns":
                self.last_apply_ns = max(self.last_apply_ns, value)
            else:
                setattr(self, name, getattr(self, name) + value)
        self.latency.merge_encoded(latency)
        if token_latency:
            self.token_latency.merge_encoded(token_latency)


def merge_answers(answers: list[dict[str, Any]]) -> tuple[dict[str, int], LatencyHistogram]:
    """The counters (summed; ``last_apply_ns``: the latest) and the latency
    histogram of every worker's ``result`` answer, as one."""
    counters: dict[str, int] = {}
    latency = LatencyHistogram()
    for answer in answers:
        for name, count in answer["counters"].items():
            if name == "last_apply_ns":
                counters[name] = max(counters.get(name, 0), count)
            else:
                counters[name] = counters.get(name, 0) + count
        latency.merge_encoded(answer["latency"])
    return counters, latency
