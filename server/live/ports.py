"""What the hub's parts need from the hub, as small ports.

The hub (``server.live.hub``) is the registry of live transcripts and the
coordinator; its parts (``reads``, ``subscriptions``, ``draft_fanout``, and the
committer in ``appends`` through its own ``CommitPort``) are given the hub as
one of these ports when the hub builds them, and never import it
(``tests/server/test_imports.py``).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from server.config import ServerConfig
from server.live.live_transcript import LiveTranscript
from server.metrics import Metrics
from server.store.base import Store

__all__ = ["CaughtUp", "Registry"]


class CaughtUp(NamedTuple):
    """What a catch-up with the store did (``Registry.catch_up``): how many
    changes it applied, and why it reloaded the copy instead (``None``: it
    did not)."""

    applied: int
    reloaded: str | None = None


class Registry(Protocol):
    """The registry of live transcripts, as its parts see it."""

    @property
    def store(self) -> Store: ...

    @property
    def config(self) -> ServerConfig: ...

    @property
    def metrics(self) -> Metrics: ...

    async def load(self, transcript_id: str) -> LiveTranscript:
        """The transcript in memory, loaded unless it is there already."""
        ...

    def copy_of(self, transcript_id: str) -> LiveTranscript | None:
        """The copy in memory now, if any (never loads)."""
        ...

    def copies(self) -> list[LiveTranscript]:
        """The copies in memory now."""
        ...

    def is_current(self, live: LiveTranscript) -> bool:
        """Whether ``live`` is still the copy in use."""
        ...

    async def reload(self, live: LiveTranscript) -> None:
        """Replace ``live`` with the store's copy and re-baseline its subscribers."""
        ...

    async def catch_up(self, live: LiveTranscript) -> CaughtUp:
        """Bring ``live`` up to the store (``live.lock`` held)."""
        ...
