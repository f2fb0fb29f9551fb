"""Credentials: who a request or a connection is (``server.web.access`` decides
what it may do, by the table of ``protocol.rights``).

Three kinds of credentials, any of them configured (``server.config``):

- the static ``token``: an admin credential that never expires;
- JWTs signed with HS256 and ``jwt_secret``;
- JWTs signed with an asymmetric key whose public half is ``jwt_key``: a PEM
  file or a JWKS file (keys chosen by ``kid``). An RSA key verifies
  RS256/384/512 and PS256/384/512, an EC key the ES256/384/512 of its curve,
  an Ed25519 or Ed448 key EdDSA; a JWKS entry that names its ``alg`` that one
  only.

A JWT must carry ``sub`` and ``exp``; ``aud`` must name ``jwt_audience`` when
one is configured (and a JWT with an ``aud`` is refused when none is);
``read``/``write`` are lists of transcript id patterns and ``admin`` a
boolean (see ``protocol.rights``). PyJWT checks the signature, the algorithm
(one the key allows: the token's ``alg`` only picks among them), ``exp``,
``nbf`` and ``aud``.
With nothing configured every request may do everything.

``Authenticator.verify`` turns a token into a ``protocol.rights.Grant`` or
raises ``Refused(unauthorized)`` saying why; ``server.web.access`` applies grants
to connections and requests.

Tokens are secrets: they are compared in constant time, never logged, never
put into an error message, and an ``Auth`` op's repr hides its token.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Protocol
from urllib.parse import parse_qs

import jwt
import msgspec
from msgspec import Meta

from protocol import codes
from protocol.limits import MAX_TOKEN_LENGTH
from protocol.rights import EVERYTHING, Grant
from server.errors import Refused


class CredentialSettings(Protocol):
    """The settings an ``Authenticator`` reads (``server.config.ServerConfig``
    has them; this module does not import the config, which imports it)."""

    @property
    def token(self) -> str | None: ...
    @property
    def jwt_secret(self) -> str | None: ...
    @property
    def jwt_key(self) -> str | None: ...
    @property
    def jwt_audience(self) -> str | None: ...
    @property
    def auth_timeout_s(self) -> float: ...


__all__ = [
    "GRANT_KEY",
    "Authenticator",
    "SettingError",
    "bearer",
    "check_settings",
    "handshake_token",
    "unauthorized",
]

#: The ASGI scope key under which ``server.web.access.HttpAccess`` leaves
#: the grant of a request it admitted (the stream face reads it there).
GRANT_KEY: Final = "tsync.grant"

#: RFC 7518 3.2: an HS256 key is at least as long as the hash (256 bits).
MIN_SECRET_BYTES: Final = 32
HS_ALGORITHMS: Final = ("HS256",)
#: A PEM key or a JWKS is a few KiB; anything much larger is not one.
MAX_KEY_FILE_BYTES: Final = 1 << 20
#: What an RSA key may verify (any of these: the key does not say which).
RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
#: What an EC key may verify: the one algorithm of its curve (RFC 7518 3.4).
EC_ALGORITHMS: Final = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
#: What an Ed25519 or Ed448 key may verify (RFC 8037).
OKP_ALGORITHMS: Final = ("EdDSA",)
#: A WebSocket's ``?token=`` (browsers cannot set headers there).
QUERY_TOKEN: Final = "token"
UNAUTHORIZED_HINT: Final = (
    "send `Authorization: Bearer <token>` (on the WebSocket also the `token` query "
    "parameter or an `auth` op)"
)

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


def unauthorized(why: str) -> Refused:
    """``unauthorized``, saying why (never repeating the token)."""
    return Refused(codes.UNAUTHORIZED, why)


@dataclass(frozen=True)
class _Key:
    """One public key of ``jwt_key`` and the algorithms it may verify (the
    key decides them, never the token)."""

    public: Any  # a cryptography public key
    algorithms: tuple[str, ...]


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
        self.by_kid: dict[str | None, _Key] = {}
        try:
            if text.lstrip().startswith("{"):
                data = json.loads(text)
                keys = data["keys"] if isinstance(data, dict) and "keys" in data else [data]
                for entry in keys:
                    self.by_kid[entry.get("kid")] = _jwk_key(entry)
            else:
                self.by_kid[None] = _pem_key(text)
        except (ValueError, KeyError, TypeError, jwt.PyJWTError) as exc:
            raise SettingError(
                f"{path!r} is neither a PEM public key nor a JWKS: {exc}", "jwt_key"
            ) from None
        if not self.by_kid:
            raise SettingError(f"{path!r} holds no key", "jwt_key")

    def key_for(self, kid: Any) -> _Key:
        if kid is None and len(self.by_kid) == 1:
            return next(iter(self.by_kid.values()))
        key = self.by_kid.get(kid) if isinstance(kid, str) or kid is None else None
        if key is None:
            raise unauthorized("the token's key (kid) is not one this server knows")
        return key


def _family(public: Any) -> tuple[str, ...]:
    """Every algorithm ``public`` (a cryptography public key) may verify:
    RS*/PS* for RSA, the ES* of an EC key's curve, EdDSA for Ed25519/Ed448."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(public, rsa.RSAPublicKey):
        return RSA_ALGORITHMS
    if isinstance(public, ec.EllipticCurvePublicKey):
        alg = EC_ALGORITHMS.get(public.curve.name)
        if alg is None:
            raise ValueError(f"unsupported curve {public.curve.name}")
        return (alg,)
    if isinstance(public, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return OKP_ALGORITHMS
    raise ValueError(f"unsupported key type {type(public).__name__}")


def _pem_key(text: str) -> _Key:
    """A PEM public key and the algorithms its type allows."""
    from cryptography.hazmat.primitives import serialization

    public = serialization.load_pem_public_key(text.encode())
    return _Key(public, _family(public))


#: How a JWK of each key type is read (not ``jwt.PyJWK``: it pins one
#: algorithm per key, and reads no Ed448 key).
_JWK_READERS: Final[dict[Any, Any]] = (
    {
        "RSA": jwt.algorithms.RSAAlgorithm,
        "EC": jwt.algorithms.ECAlgorithm,
        "OKP": jwt.algorithms.OKPAlgorithm,
    }
    if jwt.algorithms.has_crypto
    else {}
)


def _jwk_key(entry: Any) -> _Key:
    """A JWKS entry's public key and the algorithms it allows: its family's,
    or only the one its ``alg`` names (which must be of that family)."""
    if not isinstance(entry, dict):
        raise TypeError("a JWKS key must be an object")
    kid = entry.get("kid")
    which = f"key {kid!r}" if kid is not None else "the key"
    if entry.get("kty") == "oct" or "d" in entry:
        raise ValueError(f"{which} is secret: jwt_key takes public keys (HS256: jwt_secret)")
    reader = _JWK_READERS.get(entry.get("kty"))
    if reader is None:
        raise ValueError(f"{which} has kty {entry.get('kty')!r}, not RSA, EC or OKP")
    public = reader.from_jwk(entry)
    family = _family(public)
    named = entry.get("alg")
    if named is None:
        return _Key(public, family)
    if named not in family:
        raise ValueError(f"{which} names alg {named!r}, which its key cannot verify")
    return _Key(public, (named,))


class Authenticator:
    """Verifies credentials against the server's settings. Build one per app
    (``for_config``); a bad setting raises ``SettingError``."""

    def __init__(self, config: CredentialSettings) -> None:
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
    def for_config(config: CredentialSettings) -> Authenticator:
        """The authenticator of ``config`` (made once, shared by both transports)."""
        return Authenticator(config)

    def verify(self, token: str | None) -> Grant:
        """The grant of ``token``; raises ``Refused(unauthorized)`` saying why
        (never repeating the token)."""
        if not self.required:
            return EVERYTHING
        if not token:
            raise unauthorized(f"no credentials: {UNAUTHORIZED_HINT}")
        if len(token) > MAX_TOKEN_LENGTH:
            raise unauthorized(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
        if self.static is not None and secrets.compare_digest(token.encode(), self.static):
            return EVERYTHING
        if token.count(".") != 2 or not (self.secret or self.keys):
            raise unauthorized("the token is not one this server accepts")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise unauthorized("the token is malformed (not a JWT)") from None
        alg = header.get("alg")
        if isinstance(alg, str) and alg.startswith("HS"):
            if self.secret is None:
                raise unauthorized("this server accepts no HS256 tokens")
            key: Any = self.secret
            algorithms: list[str] = list(HS_ALGORITHMS)
        else:
            if self.keys is None:
                raise unauthorized(f"this server accepts no {alg} tokens")
            known = self.keys.key_for(header.get("kid"))
            key, algorithms = known.public, list(known.algorithms)
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                audience=self.audience,
                options={"require": ["exp", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise unauthorized("the token has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            raise unauthorized(f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidAudienceError:
            raise unauthorized(
                "the token is for another audience (aud)"
                if self.audience
                else "the token names an audience (aud) but this server has none"
            ) from None
        except jwt.InvalidSignatureError:
            raise unauthorized("the token's signature does not verify") from None
        except jwt.InvalidAlgorithmError:
            raise unauthorized(f"the token's algorithm {alg!r} is not allowed") from None
        except jwt.InvalidTokenError as exc:
            raise unauthorized(f"the token is refused: {type(exc).__name__}") from None
        try:
            return msgspec.convert(payload, Claims).grant()
        except msgspec.ValidationError as exc:
            raise unauthorized(f"the token's claims do not fit: {exc}") from None

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


def check_settings(config: CredentialSettings) -> None:
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
