"""Who may do what: the rights a credential grants, and the right each
WebSocket op and HTTP route needs.

This is the one table both transports consult (``server.auth`` looks ops
and routes up here; neither decides on its own), and the one that
docs/protocol.md shows (``render_markdown``; a test compares).

A credential is a ``Grant``::

    admin   create, import, delete, list everything; read and write every transcript
    read    patterns of the transcript ids it may read: subscribe, snapshot,
            events, chat, export
    write   patterns of the ids it may write: append, start a segment, set
            or leave a View, write drafts. Writing does not include reading: a token that
            does both lists both.

A pattern is a transcript id in which ``*`` stands for any run of characters
(none included) and ``?`` for exactly one: ``chat-*``, ``team:?:notes``,
``*``. Nothing else is special (ids are ``[A-Za-z0-9._:-]``).

What an op or a route needs (``Need``): ``public`` (no credentials at all),
``credentials`` (any valid ones, no particular right), ``read``, ``write`` or
``admin`` on the transcript it names (``admin`` alone for the routes that name
none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final, Literal

import msgspec

Need = Literal["public", "credentials", "read", "write", "admin"]
#: The rights a credential can hold for one transcript.
Right = Literal["read", "write", "admin"]

PUBLIC: Final = "public"
CREDENTIALS: Final = "credentials"
READ: Final = "read"
WRITE: Final = "write"
ADMIN: Final = "admin"


def pattern_regex(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One compiled regular expression matching any of ``patterns`` whole
    (``*``: any run, ``?``: one character), or ``None`` when there are none.

    For patterns an operator configured (``server.web.origins``): Python's
    regular expressions backtrack, so ``*a*a*a*ab`` against a long run of
    ``a`` takes exponential time. Patterns a client brings (a token's
    rights) go through ``GlobSet``, which does not."""
    parts = [
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
        for pattern in patterns
    ]
    if not parts:
        return None
    return re.compile("|".join(f"(?:{p})" for p in sorted(set(parts))), re.DOTALL)


class GlobSet:
    """Whether a text matches any of several patterns whole (``*``: any run,
    none included; ``?``: exactly one character; everything else itself), in
    time linear in the text's length, whatever the patterns.

    The patterns are one nondeterministic automaton whose states are the bits
    of an integer (bit ``i``: the first ``i - offset`` characters of some
    pattern matched), stepped once per character of the text: a
    backtracking matcher explores every way of splitting the text among the
    stars (exponential for ``*a*a*a*ab`` against ``aaa...a``); this one keeps
    the set of places it could be, all at once. A step is a few operations
    on an integer of ``sum(len(pattern) + 1)`` bits.
    """

    __slots__ = ("_accept", "_any", "_chars", "_stars", "_start")

    def __init__(self, patterns: Iterable[str]) -> None:
        chars: dict[str, int] = {}
        any_char = stars = start = accept = 0
        offset = 0
        for pattern in sorted(set(patterns)):
            # A run of stars is one star; then a star's state closes over
            # the next one in a single shift (see ``_close``).
            pattern = re.sub(r"\*+", "*", pattern)
            start |= 1 << offset
            for i, c in enumerate(pattern, offset):
                if c == "*":
                    stars |= 1 << i
                elif c == "?":
                    any_char |= 1 << i
                else:
                    chars[c] = chars.get(c, 0) | 1 << i
            offset += len(pattern)
            accept |= 1 << offset
            offset += 1  # a bit of its own: the end of one pattern never steps into the next
        self._chars = {c: bits | any_char for c, bits in chars.items()}
        self._any = any_char
        self._stars = stars
        self._start = self._close(start)
        self._accept = accept

    def _close(self, state: int) -> int:
        # A star may match nothing: being before it is also being after it.
        return state | (state & self._stars) << 1

    def __bool__(self) -> bool:
        return self._accept != 0

    def fullmatch(self, text: str) -> bool:
        """Whether ``text`` is matched whole by one of the patterns."""
        state = self._start
        chars, any_char, stars = self._chars, self._any, self._stars
        for c in text:
            if not state:
                return False
            state = (state & chars.get(c, any_char)) << 1 | (state & stars)
            state |= (state & stars) << 1
        return state & self._accept != 0


class Grant:
    """What one credential allows, fixed when it was verified.

    ``sub`` names who holds it (``None`` for the static token and for a
    server without credentials); ``expires_at`` is the ``exp`` claim in
    seconds since the Unix epoch (``None``: never).
    """

    __slots__ = ("_read", "_write", "admin", "expires_at", "read", "sub", "write")

    def __init__(
        self,
        *,
        sub: str | None = None,
        expires_at: float | None = None,
        admin: bool = False,
        read: Iterable[str] = (),
        write: Iterable[str] = (),
    ) -> None:
        self.sub = sub
        self.expires_at = expires_at
        self.admin = admin
        self.read: tuple[str, ...] = tuple(read)
        self.write: tuple[str, ...] = tuple(write)
        self._read = GlobSet(self.read)
        self._write = GlobSet(self.write)

    def allows(self, right: Right, transcript_id: str | None = None) -> bool:
        """Whether this credential holds ``right`` on ``transcript_id``
        (``admin`` needs no id; ``read``/``write`` without one are refused)."""
        if self.admin:
            return True
        if right == ADMIN or transcript_id is None:
            return False
        return (self._read if right == READ else self._write).fullmatch(transcript_id)

    def satisfies(self, need: Need, transcript_id: str | None = None) -> bool:
        """Whether this (valid) credential is enough for ``need``."""
        if need in (PUBLIC, CREDENTIALS):
            return True
        return self.allows(need, transcript_id)  # type: ignore[arg-type]

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def __repr__(self) -> str:
        return (
            f"Grant(sub={self.sub!r}, expires_at={self.expires_at!r}, admin={self.admin}, "
            f"read={self.read!r}, write={self.write!r})"
        )


#: The grant of a server that asks for no credentials, and of its static token.
EVERYTHING: Final = Grant(admin=True)


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the table: what an op or a route needs, and a word on it."""

    need: Need
    note: str = ""


#: Every WebSocket op (by its ``op`` tag) and what it needs.
OPS: Final[Mapping[str, Rule]] = {
    "subscribe": Rule(need=READ),
    "unsubscribe": Rule(need=CREDENTIALS),
    "append": Rule(need=WRITE),
    "startSegment": Rule(need=WRITE),
    "setView": Rule(need=WRITE),
    "leaveView": Rule(need=WRITE),
    "draft": Rule(need=WRITE, note="its frames go to every subscriber, who needs read"),
    "presence": Rule(
        need=READ,
        note="on a transcript the connection subscribes to; kind `writer` or `agent` needs write",
    ),
    "ping": Rule(need=CREDENTIALS),
    "auth": Rule(
        need=PUBLIC,
        note="carries credentials: the first op of a connection made without any (any other "
        "op then gets `unauthorized` and a 4001 close), or new ones before `exp`",
    ),
}

#: The client frames of ``/v1/ai/chat`` (the AI SDK's ``WebSocketChatTransport``)
#: and what each needs on the chat (a transcript id).
AI_CHAT_FRAMES: Final[Mapping[str, Rule]] = {
    "send": Rule(
        need=WRITE,
        note="and read (the reply comes back); a missing chat is created only for admin",
    ),
    "resume": Rule(need=READ),
    "abort": Rule(need=WRITE, note="with the rights of the request it aborts: stops the reply"),
}

#: Every HTTP route (method and path template) and what it needs; HEAD is GET.
ROUTES: Final[Mapping[tuple[str, str], Rule]] = {
    ("POST", "/v1/transcripts"): Rule(need=ADMIN),
    ("GET", "/v1/transcripts"): Rule(
        need=CREDENTIALS, note="lists only the transcripts the caller may read"
    ),
    ("POST", "/v1/transcripts/import"): Rule(need=ADMIN),
    ("GET", "/v1/transcripts/{transcript_id}"): Rule(need=READ),
    ("DELETE", "/v1/transcripts/{transcript_id}"): Rule(need=ADMIN),
    ("GET", "/v1/transcripts/{transcript_id}/events"): Rule(need=READ),
    ("GET", "/v1/transcripts/{transcript_id}/messages"): Rule(need=READ),
    ("POST", "/v1/transcripts/{transcript_id}/messages"): Rule(need=WRITE),
    ("POST", "/v1/transcripts/{transcript_id}/segments"): Rule(need=WRITE),
    ("GET", "/v1/transcripts/{transcript_id}/chat"): Rule(need=READ),
    ("GET", "/v1/transcripts/{transcript_id}/ui-messages"): Rule(need=READ),
    ("POST", "/v1/transcripts/{transcript_id}/replies"): Rule(need=WRITE),
    ("GET", "/v1/transcripts/{transcript_id}/export.lmml"): Rule(need=READ),
    ("GET", "/v1/transcripts/{transcript_id}/export.lmmlz"): Rule(need=READ),
    ("GET", "/v1/transcripts/{transcript_id}/views"): Rule(need=READ),
    ("PUT", "/v1/transcripts/{transcript_id}/views/{name}"): Rule(need=WRITE),
    ("DELETE", "/v1/transcripts/{transcript_id}/views/{name}"): Rule(need=WRITE),
    ("GET", "/v1/transcripts/{transcript_id}/usage"): Rule(need=READ),
    ("GET", "/v1/transcripts/{transcript_id}/presence"): Rule(need=READ),
    ("POST", "/v1/ai/chat"): Rule(
        need=CREDENTIALS,
        note="the AI SDK's DefaultChatTransport: the body's `id` needs what a `send` frame's does",
    ),
    ("GET", "/v1/ai/chat/{transcript_id}/stream"): Rule(need=READ),
    ("GET", "/v1/auth"): Rule(
        need=CREDENTIALS, note="who the caller is and what it may do (`?transcriptId=`)"
    ),
    ("PUT", "/v1/stream/{stream_path}"): Rule(
        need=WRITE, note="Durable Streams: rights are over the stream's path after `/v1/stream/`"
    ),
    ("POST", "/v1/stream/{stream_path}"): Rule(need=WRITE),
    ("GET", "/v1/stream/{stream_path}"): Rule(need=READ),
    ("DELETE", "/v1/stream/{stream_path}"): Rule(need=WRITE),
    ("OPTIONS", "/v1/stream/{stream_path}"): Rule(
        need=PUBLIC, note="a CORS preflight carries no credentials"
    ),
    ("GET", "/v1/stream/transcripts/{transcript_id}"): Rule(
        need=READ, note="a transcript's events as a read-only Durable Stream"
    ),
    ("PUT", "/v1/stream/transcripts/{transcript_id}"): Rule(need=WRITE, note="always 405"),
    ("POST", "/v1/stream/transcripts/{transcript_id}"): Rule(need=WRITE, note="always 405"),
    ("DELETE", "/v1/stream/transcripts/{transcript_id}"): Rule(need=WRITE, note="always 405"),
    ("OPTIONS", "/v1/stream/transcripts/{transcript_id}"): Rule(need=PUBLIC),
    ("GET", "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"): Rule(
        need=READ, note="a draft's text as it grows, a read-only Durable Stream"
    ),
    ("PUT", "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"): Rule(
        need=WRITE, note="always 405"
    ),
    ("POST", "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"): Rule(
        need=WRITE, note="always 405"
    ),
    ("DELETE", "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"): Rule(
        need=WRITE, note="always 405"
    ),
    ("OPTIONS", "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"): Rule(need=PUBLIC),
    ("GET", "/v1/openapi.json"): Rule(need=PUBLIC),
    ("GET", "/v1/schema.json"): Rule(need=PUBLIC),
    ("GET", "/v1/{module}.js"): Rule(
        need=PUBLIC, note="the JavaScript client's modules: `/v1/client.js` and beside it"
    ),
    ("GET", "/healthz"): Rule(need=PUBLIC),
    ("GET", "/readyz"): Rule(need=PUBLIC),
    ("GET", "/metrics"): Rule(need=PUBLIC),
    ("GET", "/"): Rule(need=PUBLIC, note="the page; its script brings the token"),
    ("GET", "/t/{transcript_id}"): Rule(need=PUBLIC, note="the page; its script brings the token"),
    ("GET", "/static/{path}"): Rule(need=PUBLIC),
}

#: What a request no route matches needs (it then gets 404 or 405).
UNMATCHED: Final = Rule(need=CREDENTIALS)


def route_rule(method: str, template: str) -> Rule:
    """The rule of a route; ``UNMATCHED`` for one not in the table."""
    return ROUTES.get(("GET" if method == "HEAD" else method, template), UNMATCHED)


def render_markdown() -> str:
    """The table as the Markdown docs/protocol.md holds between its
    ``rights`` markers (a test compares them)."""
    lines = ["| WebSocket op or HTTP route | needs | note |", "|---|---|---|"]
    lines += [f"| `{op}` op | {rule.need} | {rule.note} |" for op, rule in OPS.items()]
    lines += [
        f"| `{frame}` frame on `/v1/ai/chat` | {rule.need} | {rule.note} |"
        for frame, rule in AI_CHAT_FRAMES.items()
    ]
    lines += [f"| `{m} {path}` | {rule.need} | {rule.note} |" for (m, path), rule in ROUTES.items()]
    return "\n".join(lines) + "\n"
