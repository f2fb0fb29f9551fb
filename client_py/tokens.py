"""Where the client's bearer token comes from, and when to ask for a new one.

A client is given a fixed token (a string), an async token provider (a
function that returns a fresh one, e.g. from your login service), or
nothing. ``TokenSource`` keeps the current token and knows its expiry when
it is a JWT (its ``exp``, read without verifying: the server verifies), so
that the client can hand the server a new one before the old one runs out
(the WebSocket ``auth`` op) and can tell "expired" from "refused".
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable
from typing import TypeAlias

#: An async function that returns a (fresh) bearer token.
TokenProvider: TypeAlias = Callable[[], Awaitable[str]]

__all__ = ["TokenProvider", "TokenSource", "expiry_of"]


def expiry_of(token: str) -> float | None:
    """The ``exp`` of a JWT in seconds since the epoch (unverified), or
    ``None`` for a token that is not a JWT or has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class TokenSource:
    """The current token, fetched from the provider when there is none yet
    or it is about to expire."""

    def __init__(self, token: str | TokenProvider | None) -> None:
        self.provider: TokenProvider | None = None if isinstance(token, str | None) else token
        self.token: str | None = token if isinstance(token, str) else None
        self.expires_at: float | None = expiry_of(self.token) if self.token else None
        self._obtained = time.time()

    @property
    def renewable(self) -> bool:
        return self.provider is not None

    async def get(self) -> str | None:
        """The token to use now (a new one from the provider if the current
        one is missing or within its renewal margin)."""
        if self.provider is not None and (self.token is None or self.renew_in() <= 0):
            await self.renew()
        return self.token

    async def renew(self) -> str | None:
        """Ask the provider for a new token (the current one without one)."""
        if self.provider is not None:
            token = await self.provider()
            if not isinstance(token, str) or not token:
                raise TypeError("the token provider must return a non-empty string")
            self.token = token
            self.expires_at = expiry_of(token)
            self._obtained = time.time()
        return self.token

    def renew_in(self) -> float:
        """Seconds until the token should be renewed: a fifth of its life
        (at least half a second, at most 30 s) before it expires; ``inf`` for
        one that never expires or cannot be renewed."""
        if self.expires_at is None or self.provider is None:
            return float("inf")
        life = max(0.0, self.expires_at - self._obtained)
        margin = min(30.0, max(0.5, life / 5))
        return self.expires_at - margin - time.time()
