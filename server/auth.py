"""Credentials: who a request or a connection is, and whether it may do what
it asks (``protocol.rights`` holds the table of what each op and route needs).

Three kinds of credentials, any of them configured (``server.config``):

- the static ``token``: an admin credential that never expires;
- JWTs signed with HS256 and ``jwt_secret``;
- JWTs signed with an asymmetric key (RS256/ES256 and siblings) whose public
  half is ``jwt_key``: a PEM file or a JWKS file (keys chosen by ``kid``).

A JWT must carry ``sub`` and ``exp``; ``aud`` must name ``jwt_audience`` when
one is configured (and a JWT with an ``aud`` is refused when none is);
``read``/``write`` are lists of transcript id patterns and ``admin`` a
boolean (see ``protocol.rights``). PyJWT checks the signature, the algorithm
(fixed per key, never taken from the token), ``exp``, ``nbf`` and ``aud``.
With nothing configured every request may do everything.

::

    Authenticator      verifies a token: a Grant, or Refused(unauthorized)
    ConnectionAccess   one WebSocket's credentials: ops checked, refresh, expiry
    HttpAccess         the ASGI middleware that checks every HTTP request

Tokens are secrets: they are compared in constant time, never logged, never
put into an error message, and an ``Auth`` op's repr hides its token.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, get_args
from urllib.parse import parse_qs

import jwt
import msgspec
from msgspec import Meta
from starlette.requests import Request
from starlette.routing import BaseRoute, Match, Mount

from protocol import codes, rights, wire
from protocol.limits import MAX_TOKEN_LENGTH
from protocol.rights import EVERYTHING, Grant, Need
from server.errors import Refused
from server.problems import problem_response
from server.store.base import TranscriptInfo

if TYPE_CHECKING:
    from server.config import ServerConfig

__all__ = [
    "Authenticator",
    "ConnectionAccess",
    "HttpAccess",
    "check_settings",
    "grant_of",
    "list_readable",
]

#: RFC 7518 3.2: an HS256 key is at least as long as the hash (256 bits).
MIN_SECRET_BYTES: Final = 32
HS_ALGORITHMS: Final = ("HS256",)
#: A PEM key or a JWKS is a few KiB; anything much larger is not one.
MAX_KEY_FILE_BYTES: Final = 1 << 20
#: What each kind of public key may verify (fixed by the key, never by the token).
_KEY_ALGORITHMS: Final = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512"),
    "OKP": ("EdDSA",),
}
#: A WebSocket's ``?token=`` (browsers cannot set headers there).
QUERY_TOKEN: Final = "token"
UNAUTHORIZED_HINT: Final = (
    "send `Authorization: Bearer <token>` (on the WebSocket also the `token` query "
    "parameter or an `auth` op)"
)
#: The scope key under which ``HttpAccess`` leaves the request's grant.
GRANT_KEY: Final = "tsync.grant"

Pattern = Annotated[str, Meta(min_length=1, max_length=256)]


class Claims(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The claims this server reads (others are ignored)."""

    sub: Annotated[str, Meta(min_length=1)]
    exp: int | float
    read: list[Pattern] | Pattern = []
    write: list[Pattern] | Pattern = []
    admin: bool = False

    def grant(self) -> Grant:
        return Grant(
            sub=self.sub,
            expires_at=float(self.exp),
            admin=self.admin,
            read=[self.read] if isinstance(self.read, str) else self.read,
            write=[self.write] if isinstance(self.write, str) else self.write,
        )


class SettingError(ValueError):
    """A credentials setting that cannot work; ``setting`` names it
    (``load_config`` turns it into a ``ConfigError``)."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


def _unauthorized(why: str) -> Refused:
    return Refused(codes.UNAUTHORIZED, why)


class _KeyVerifier:
    """The public keys of ``jwt_key``: one PEM key, or a JWKS (by ``kid``)."""

    def __init__(self, path: str) -> None:
        if not jwt.algorithms.has_crypto:
            raise SettingError(
                "RS256/ES256 keys need the cryptography package: "
                "pip install 'transcript-sync[keys]'",
                "jwt_key",
            )
        file = Path(path)
        try:
            if not file.is_file() or file.stat().st_size > MAX_KEY_FILE_BYTES:
                raise SettingError(f"{path!r} is not a key file", "jwt_key")
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingError(f"cannot read {path!r}: {exc}", "jwt_key") from None
        self.by_kid: dict[str | None, jwt.PyJWK] = {}
        try:
            if text.lstrip().startswith("{"):
                data = json.loads(text)
                keys = data["keys"] if isinstance(data, dict) and "keys" in data else [data]
                for entry in keys:
                    key = jwt.PyJWK(entry)
                    self.by_kid[entry.get("kid")] = key
            else:
                self.by_kid[None] = _pem_key(text)
        except (ValueError, KeyError, TypeError, jwt.PyJWKError) as exc:
            raise SettingError(
                f"{path!r} is neither a PEM public key nor a JWKS: {exc}", "jwt_key"
            ) from None
        if not self.by_kid:
            raise SettingError(f"{path!r} holds no key", "jwt_key")

    def key_for(self, kid: Any) -> jwt.PyJWK:
        if kid is None and len(self.by_kid) == 1:
            return next(iter(self.by_kid.values()))
        key = self.by_kid.get(kid) if isinstance(kid, str) or kid is None else None
        if key is None:
            raise _unauthorized("the token's key (kid) is not one this server knows")
        return key


def _pem_key(text: str) -> jwt.PyJWK:
    """A PEM public key as a ``PyJWK`` whose algorithms its type decides."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    public = serialization.load_pem_public_key(text.encode())
    if isinstance(public, rsa.RSAPublicKey):
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(public))
        return jwt.PyJWK(jwk, "RS256")
    if isinstance(public, ec.EllipticCurvePublicKey):
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(public))
        alg = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}.get(jwk.get("crv"), "ES256")
        return jwt.PyJWK(jwk, alg)
    if isinstance(public, ed25519.Ed25519PublicKey):
        jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(public))
        return jwt.PyJWK(jwk, "EdDSA")
    raise ValueError(f"unsupported key type {type(public).__name__}")


def _algorithms(key: jwt.PyJWK) -> list[str]:
    family = _KEY_ALGORITHMS.get(key.key_type or "", ())
    # A JWKS entry that names its "alg" allows that one only.
    named = key._jwk_data.get("alg")
    return [named] if isinstance(named, str) and named in family else list(family)


class Authenticator:
    """Verifies credentials against the server's settings. Build one per app
    (``for_config``); a bad setting raises ``ConfigError``."""

    def __init__(self, config: ServerConfig) -> None:
        for name in ("token", "jwt_secret", "jwt_key", "jwt_audience"):
            value = getattr(config, name)
            if value is not None and not value.strip():
                # load_config refuses these already; a config built in code must not
                # turn an empty string into "everyone may".
                raise SettingError("is empty (unset it to leave it off)", name)
        self.static = config.token.encode() if config.token else None
        self.secret = config.jwt_secret
        if self.secret is not None and len(self.secret.encode()) < MIN_SECRET_BYTES:
            raise SettingError(
                f"must be at least {MIN_SECRET_BYTES} bytes for HS256 (e.g. the output of "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)",
                "jwt_secret",
            )
        self.keys = _KeyVerifier(config.jwt_key) if config.jwt_key else None
        self.audience = config.jwt_audience
        self.auth_timeout_s = config.auth_timeout_s
        #: Whether anything needs credentials at all.
        self.required = bool(self.static or self.secret or self.keys)

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def for_config(config: ServerConfig) -> Authenticator:
        """The authenticator of ``config`` (made once, shared by both transports)."""
        return Authenticator(config)

    def verify(self, token: str | None) -> Grant:
        """The grant of ``token``; raises ``Refused(unauthorized)`` saying why
        (never repeating the token)."""
        if not self.required:
            return EVERYTHING
        if not token:
            raise _unauthorized(f"no credentials: {UNAUTHORIZED_HINT}")
        if len(token) > MAX_TOKEN_LENGTH:
            raise _unauthorized(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
        if self.static is not None and secrets.compare_digest(token.encode(), self.static):
            return EVERYTHING
        if token.count(".") != 2 or not (self.secret or self.keys):
            raise _unauthorized("the token is not one this server accepts")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise _unauthorized("the token is malformed (not a JWT)") from None
        alg = header.get("alg")
        if isinstance(alg, str) and alg.startswith("HS"):
            if self.secret is None:
                raise _unauthorized("this server accepts no HS256 tokens")
            key: Any = self.secret
            algorithms: list[str] = list(HS_ALGORITHMS)
        else:
            if self.keys is None:
                raise _unauthorized(f"this server accepts no {alg} tokens")
            key = self.keys.key_for(header.get("kid"))
            algorithms = _algorithms(key)
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                audience=self.audience,
                options={"require": ["exp", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise _unauthorized("the token has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            raise _unauthorized(f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidAudienceError:
            raise _unauthorized(
                "the token is for another audience (aud)"
                if self.audience
                else "the token names an audience (aud) but this server has none"
            ) from None
        except jwt.InvalidSignatureError:
            raise _unauthorized("the token's signature does not verify") from None
        except jwt.InvalidAlgorithmError:
            raise _unauthorized(f"the token's algorithm {alg!r} is not allowed") from None
        except jwt.InvalidTokenError as exc:
            raise _unauthorized(f"the token is refused: {type(exc).__name__}") from None
        try:
            return msgspec.convert(payload, Claims).grant()
        except msgspec.ValidationError as exc:
            raise _unauthorized(f"the token's claims do not fit: {exc}") from None

    def mint(
        self,
        *,
        sub: str,
        ttl_s: float,
        read: Iterable[str] = (),
        write: Iterable[str] = (),
        admin: bool = False,
        now: float | None = None,
    ) -> str:
        """An HS256 token signed with ``jwt_secret`` (``tsync token``)."""
        if self.secret is None:
            raise SettingError("no secret to sign with: set --jwt-secret or TSYNC_JWT_SECRET")
        issued = int(time.time() if now is None else now)
        claims: dict[str, Any] = {"sub": sub, "iat": issued, "exp": issued + int(ttl_s)}
        if self.audience:
            claims["aud"] = self.audience
        if read := list(read):
            claims["read"] = read
        if write := list(write):
            claims["write"] = write
        if admin:
            claims["admin"] = True
        return jwt.encode(claims, self.secret, algorithm="HS256")


def check_settings(config: ServerConfig) -> None:
    """Raise ``SettingError`` (one line, naming the setting) for credentials
    settings that cannot work; called by ``load_config``."""
    Authenticator(config)


def bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if there is one."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def handshake_token(scope: dict[str, Any]) -> str | None:
    """A WebSocket's credentials: the bearer header, else ``?token=``."""
    token = bearer(scope.get("headers", ()))
    if token is not None:
        return token

    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get(QUERY_TOKEN)
    return values[0] if values else None


#: What each op needs, by its struct (``protocol.rights.OPS`` names them by tag).
_OP_NEEDS: Final[dict[type, Need]] = {
    cls: rights.OPS[cls.__struct_config__.tag].need for cls in get_args(wire.ClientOp)
}

_VERBS: Final = {"read": "read", "write": "write to", "admin": "administer"}


def forbidden(grant: Grant | None, need: Need, transcript_id: str | None) -> Refused:
    """``forbidden``, naming who may not do what to which transcript."""
    who = f"the token of {grant.sub!r}" if grant is not None and grant.sub else "this token"
    what = f"transcript {transcript_id!r}" if transcript_id else "transcripts"
    fields = {"transcriptId": transcript_id} if transcript_id else {}
    return Refused(codes.FORBIDDEN, f"{who} may not {_VERBS[need]} {what}", **fields)


class Turnaway(Exception):
    """A WebSocket the server will not serve: accept it, then close it with
    ``close_code`` (so that browsers learn why too)."""

    def __init__(self, close_code: int, why: str) -> None:
        super().__init__(why)
        self.close_code = close_code
        self.why = why


def admit(scope: dict[str, Any], config: ServerConfig) -> ConnectionAccess:
    """The credentials of a new WebSocket; raises ``Turnaway`` with 1008 for
    a Host or Origin the server does not allow, 4001 for credentials that
    are there but not valid. One that brings none may still send ``auth``."""
    from server.origins import OriginPolicy

    why = OriginPolicy.for_config(config).refusal(scope, changes=True)
    if why is not None:
        raise Turnaway(codes.CLOSE_POLICY, why)
    try:
        return ConnectionAccess.admit(Authenticator.for_config(config), scope)
    except Refused as refused:
        raise Turnaway(codes.CLOSE_UNAUTHORIZED, refused.message) from None


class ConnectionAccess:
    """One WebSocket connection's credentials.

    ``grant`` is ``None`` while a connection that came without credentials
    waits for its first ``auth`` op. ``arm`` schedules the close (4001) at
    the credentials' expiry, or at ``auth_timeout_s`` while there are none;
    a refresh moves it.
    """

    __slots__ = ("_close", "_closing", "_timer", "authenticator", "grant")

    def __init__(self, authenticator: Authenticator | None, grant: Grant | None) -> None:
        #: ``None`` on a server that asks for no credentials.
        self.authenticator = authenticator
        self.grant = grant
        self._timer: asyncio.TimerHandle | None = None
        self._close: Callable[[], Awaitable[None]] | None = None
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    def admit(cls, authenticator: Authenticator, scope: dict[str, Any]) -> ConnectionAccess:
        """The access of a new connection; raises ``Refused(unauthorized)`` for
        credentials that are there but not valid."""
        if not authenticator.required:
            return OPEN
        token = handshake_token(scope)
        return cls(authenticator, authenticator.verify(token) if token else None)

    @property
    def sub(self) -> str | None:
        return self.grant.sub if self.grant is not None else None

    def check(self, op: wire.ClientOp) -> None:
        """Raise ``Refused`` unless these credentials allow ``op``."""
        grant = self.grant
        if grant is EVERYTHING:
            return
        need = _OP_NEEDS[type(op)]
        if need == rights.PUBLIC:
            return
        if grant is None:
            # Came without credentials and did not send them first: nothing this
            # connection does can work. Say so, then close it (4001).
            self._schedule(0.0)
            raise _unauthorized(
                "no credentials: the first op must be `auth` (or connect with a token)"
            )
        if grant.expires_at is not None and grant.expired(time.time()):
            raise _unauthorized("the token has expired: send an `auth` op with a new one")
        transcript_id = getattr(op, "transcript_id", None)
        if not grant.satisfies(need, transcript_id):
            raise forbidden(grant, need, transcript_id)

    def refresh(self, token: str) -> None:
        """Take new credentials (an ``auth`` op). Refused ones change nothing,
        except that a connection without any valid ones is closed."""
        if self.authenticator is None:
            return  # a server that asks for no credentials: nothing to check
        try:
            grant = self.authenticator.verify(token)
            if self.grant is not None and grant.sub != self.grant.sub:
                raise _unauthorized(
                    f"new credentials must name the same sub as the connection's ({self.sub!r})"
                )
        except Refused:
            if self.grant is None or (
                self.grant.expires_at is not None and self.grant.expired(time.time())
            ):
                self._schedule(0.0)
            raise
        self.grant = grant
        self._schedule(None)

    def unreadable(self, transcript_ids: Iterable[str]) -> list[str]:
        """Those of ``transcript_ids`` the current credentials may not read."""
        grant = self.grant
        return [t for t in transcript_ids if grant is None or not grant.allows(rights.READ, t)]

    def arm(self, close: Callable[[], Awaitable[None]]) -> None:
        """Call ``close`` (it closes the connection with 4001) when the
        credentials expire, or when none came in time."""
        if self.authenticator is None:
            return  # OPEN is shared, and never expires
        self._close = close
        self._schedule(None)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._closing is not None and not self._closing.done():
            self._closing.cancel()

    def _schedule(self, delay: float | None) -> None:
        if self._close is None or (self.grant is EVERYTHING and delay is None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if delay is None:
            if self.grant is None:
                assert self.authenticator is not None  # an open server grants everything
                delay = self.authenticator.auth_timeout_s
            elif self.grant.expires_at is not None:
                delay = max(0.0, self.grant.expires_at - time.time())
            else:
                return
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._close is not None and self._closing is None:
            self._closing = asyncio.ensure_future(self._close())


#: The access of every connection to a server that asks for no credentials.
OPEN: Final = ConnectionAccess(None, EVERYTHING)


# --- HTTP ------------------------------------------------------------------------------


def grant_of(request: Request) -> Grant:
    """The grant ``HttpAccess`` found for this request (a request it did not
    see has none: that is a bug, and fails closed)."""
    grant: Grant = request.scope[GRANT_KEY]
    return grant


def _route_of(
    scope: dict[str, Any], routes: Iterable[BaseRoute]
) -> tuple[str, dict[str, Any]] | None:
    """The template and path parameters of the route that fully matches ``scope``."""
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            path: str = getattr(route, "path", "")
            template = f"{path}/{{path}}" if isinstance(route, Mount) else path
            return template, child.get("path_params", {})
        if match is Match.PARTIAL:
            return None
    return None


class HttpAccess:
    """ASGI middleware: every HTTP request gets the rule of its route
    (``protocol.rights.ROUTES``), its bearer token verified and its right on
    the transcript the path names checked, before any endpoint runs. A
    refusal is a problem+json answer (401 with ``WWW-Authenticate``, or 403
    naming the transcript)."""

    def __init__(self, app: Any, routes: Iterable[BaseRoute], authenticator: Authenticator) -> None:
        self.app = app
        self.routes = list(routes)
        self.authenticator = authenticator

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = _route_of(scope, self.routes)
        rule = rights.route_rule(scope["method"], found[0]) if found else rights.UNMATCHED
        if rule.need != rights.PUBLIC:
            try:
                grant = self.authenticator.verify(bearer(scope.get("headers", ())))
                transcript_id = found[1].get("transcript_id") if found else None
                if not grant.satisfies(rule.need, transcript_id):
                    raise forbidden(grant, rule.need, transcript_id)
            except Refused as refused:
                await _problem(refused)(scope, receive, send)
                return
            scope[GRANT_KEY] = grant
        await self.app(scope, receive, send)


def _problem(refused: Refused) -> Any:
    response = problem_response(refused)
    if refused.code == codes.UNAUTHORIZED:
        response.headers["www-authenticate"] = 'Bearer realm="tsync", error="invalid_token"'
    return response


async def list_readable(
    page: Callable[..., Awaitable[list[TranscriptInfo]]],
    grant: Grant,
    *,
    after: str | None,
    limit: int,
) -> list[TranscriptInfo]:
    """Up to ``limit`` transcripts after ``after`` that ``grant`` may read, in
    id order: pages of the store are read until enough are found or it ends,
    so a short answer means there are no more."""
    if grant.admin:
        return await page(after=after, limit=limit)
    found: list[TranscriptInfo] = []
    while len(found) < limit:
        infos = await page(after=after, limit=limit)
        found += [i for i in infos if grant.allows(rights.READ, i.transcript_id)]
        if len(infos) < limit:
            break
        after = infos[-1].transcript_id
    return found[:limit]


def auth_info(grant: Grant, transcript_id: str | None) -> Any:
    """The body of ``GET /v1/auth``."""
    from protocol import api

    return api.AuthInfo(
        sub=grant.sub,
        expires_at=None if grant.expires_at is None else int(grant.expires_at * 1000),
        admin=grant.admin,
        read=["*"] if grant.admin else list(grant.read),
        write=["*"] if grant.admin else list(grant.write),
        transcript=None
        if transcript_id is None
        else api.TranscriptRights(
            transcript_id=transcript_id,
            read=grant.allows(rights.READ, transcript_id),
            write=grant.allows(rights.WRITE, transcript_id),
        ),
    )
