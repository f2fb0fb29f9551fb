"""Every JWT algorithm docs/protocol.md names for a key is accepted with that
key (PEM, JWKS with and without ``alg``), and nothing else is.

Tokens are minted by two libraries: PyJWT (which the server verifies with)
and joserfc (which it does not use), so that a token the server accepts is
one an outside issuer would make, not one PyJWT agrees with itself about.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import websockets
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from joserfc import jwk as jose_jwk
from joserfc import jwt as jose_jwt

from server.auth import Authenticator
from server.config import ConfigError, ServerConfig, load_config
from server.errors import Refused
from tests.auth.conftest import SECRET, keep
from tests.support.servers import running_server

#: What docs/protocol.md (section 4) lists, by the key that verifies it.
RSA_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGS = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
KINDS = [
    *(("rsa", alg) for alg in RSA_ALGS),
    *(("ec", alg) for alg in EC_ALGS),
    ("ed25519", "EdDSA"),
    ("ed448", "EdDSA"),
]


def _private(kind: str, alg: str) -> Any:
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ec":
        return ec.generate_private_key(EC_ALGS[alg])
    return (
        ed25519.Ed25519PrivateKey.generate()
        if kind == "ed25519"
        else ed448.Ed448PrivateKey.generate()
    )


_KEYS: dict[tuple[str, str], Any] = {}


def private_key(kind: str, alg: str) -> Any:
    """One key per kind (per curve for EC), made once: RSA keys are slow to make."""
    which = (kind, alg if kind == "ec" else "")
    if which not in _KEYS:
        _KEYS[which] = _private(kind, alg)
    return _KEYS[which]


def _pem(private: Any) -> bytes:
    return private.public_key().public_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _jose_type(private: Any) -> Any:
    if isinstance(private, rsa.RSAPrivateKey):
        return "RSA"
    return "EC" if isinstance(private, ec.EllipticCurvePrivateKey) else "OKP"


def _jwk(private: Any, **extra: Any) -> dict[str, Any]:
    public = jose_jwk.import_key(_pem(private), _jose_type(private)).as_dict(private=False)
    return {**public, **extra}


def _claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "svc", "exp": int(time.time()) + 60, "read": ["r-*"], **extra}


def mint_pyjwt(private: Any, alg: str, kid: str | None = None) -> str:
    headers = {"kid": kid} if kid else None
    return keep(jwt.encode(_claims(), private, algorithm=alg, headers=headers))


def mint_joserfc(private: Any, alg: str, kid: str | None = None) -> str:
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    header = {"alg": alg, **({"kid": kid} if kid else {})}
    with warnings.catch_warnings():
        # joserfc warns that "EdDSA" is deprecated by RFC 9864 (for "Ed25519"):
        # still the name the docs and PyJWT use.
        warnings.simplefilter("ignore")
        token = jose_jwt.encode(
            header, _claims(), jose_jwk.import_key(pem, _jose_type(private)), algorithms=[alg]
        )
    return keep(token)


MINTERS: dict[str, Callable[..., str]] = {"pyjwt": mint_pyjwt, "joserfc": mint_joserfc}


def _server(tmp_path: Path, key_file: str | dict[str, Any]) -> Authenticator:
    path = tmp_path / ("key.pem" if isinstance(key_file, str) else "jwks.json")
    path.write_text(key_file if isinstance(key_file, str) else json.dumps(key_file))
    return Authenticator(ServerConfig(store="memory", jwt_key=str(path)))


def hmac_token(secret: bytes, alg: str, **claims: Any) -> str:
    """An HMAC-signed token made by hand (both libraries refuse to use a PEM
    public key as an HMAC secret, which is what a forger does)."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    head = base64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = base64url(json.dumps(_claims(**claims)).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), digest).digest()
    return keep(f"{head}.{body}.{base64url(signature)}")


def base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _refused(auth: Authenticator, token: str) -> str:
    with pytest.raises(Refused) as refused:
        auth.verify(token)
    assert refused.value.code == "unauthorized"
    return refused.value.message


@pytest.mark.parametrize("minter", sorted(MINTERS))
@pytest.mark.parametrize("source", ["pem", "jwks", "jwks-with-alg"])
@pytest.mark.parametrize(("kind", "alg"), KINDS, ids=[f"{k}-{a}" for k, a in KINDS])
def test_every_listed_algorithm_is_accepted_for_its_key(
    tmp_path: Path, kind: str, alg: str, source: str, minter: str
) -> None:
    private = private_key(kind, alg)
    if source == "pem":
        auth, kid = _server(tmp_path, _pem(private).decode()), None
    else:
        named = {"alg": alg} if source == "jwks-with-alg" else {}
        other = _jwk(private_key("ec", "ES256"), kid="other")
        auth = _server(tmp_path, {"keys": [other, _jwk(private, kid="k1", **named)]})
        kid = "k1"
    grant = auth.verify(MINTERS[minter](private, alg, kid))
    assert grant.sub == "svc" and grant.allows("read", "r-1") and not grant.allows("write", "r-1")


@pytest.mark.parametrize("minter", sorted(MINTERS))
def test_a_jwks_alg_allows_that_algorithm_only(tmp_path: Path, minter: str) -> None:
    private = private_key("rsa", "")
    auth = _server(tmp_path, {"keys": [_jwk(private, kid="k", alg="PS384")]})
    assert auth.verify(MINTERS[minter](private, "PS384", "k")).sub == "svc"
    for alg in set(RSA_ALGS) - {"PS384"}:
        assert "not allowed" in _refused(auth, MINTERS[minter](private, alg, "k"))


@pytest.mark.parametrize("source", ["pem", "jwks"])
def test_algorithms_of_another_kind_of_key_and_unsigned_tokens_are_refused(
    tmp_path: Path, source: str
) -> None:
    keys = {kind: private_key(kind, "ES256") for kind in ("rsa", "ec", "ed25519")}
    for kind, private in keys.items():
        if source == "pem":
            auth, kid = _server(tmp_path, _pem(private).decode()), None
        else:
            auth, kid = _server(tmp_path, {"keys": [_jwk(private, kid="k")]}), "k"
        allowed = {"rsa": RSA_ALGS, "ec": ("ES256",), "ed25519": ("EdDSA",)}[kind]
        # Tokens of every other algorithm, each signed with a key that can sign it.
        for other_kind, alg in [*KINDS, ("ec", "ES256K")]:
            if alg in allowed:
                continue
            signer = ec.generate_private_key(ec.SECP256K1()) if alg == "ES256K" else None
            signer = signer or private_key(other_kind, alg)
            for minter in ("pyjwt", "joserfc") if alg != "ES256K" else ("pyjwt",):
                token = MINTERS[minter](signer, alg, kid)
                assert "not allowed" in _refused(auth, token), (kind, alg, minter)
        # The public key used as an HMAC secret (the classic confusion) and `none`.
        public_pem = _pem(private).decode()
        for alg in ("HS256", "HS384", "HS512"):
            forged = hmac_token(public_pem.encode(), alg, admin=True)
            assert "accepts no HS256" in _refused(auth, forged)
        unsigned = jwt.encode(_claims(admin=True), None, algorithm="none")
        assert "'none' is not allowed" in _refused(auth, keep(unsigned))
        # A listed algorithm, signed by another key of the same kind.
        stranger = _private(kind, "ES256")
        assert "signature" in _refused(auth, mint_joserfc(stranger, allowed[-1], kid))


def test_hs256_goes_to_the_secret_even_beside_keys(tmp_path: Path) -> None:
    private = private_key("rsa", "")
    path = tmp_path / "key.pem"
    path.write_text(_pem(private).decode())
    auth = Authenticator(ServerConfig(store="memory", jwt_key=str(path), jwt_secret=SECRET))
    assert auth.verify(keep(jwt.encode(_claims(), SECRET, algorithm="HS256"))).sub == "svc"
    assert auth.verify(mint_joserfc(private, "PS512")).sub == "svc"
    assert "signature" in _refused(auth, hmac_token(_pem(private), "HS256", admin=True))


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"alg": "ES256"}, "names alg 'ES256', which its key cannot verify"),
        ({"alg": "HS256"}, "names alg 'HS256', which its key cannot verify"),
        ({"kty": "XYZ"}, "kty 'XYZ', not RSA, EC or OKP"),
        ({"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}, "is secret"),
        ({"d": "AQAB"}, "is secret"),
    ],
)
def test_a_jwks_entry_that_cannot_verify_what_it_says_is_a_setting_error(
    tmp_path: Path, entry: dict[str, Any], says: str
) -> None:
    base = {} if entry.get("kty") == "oct" else _jwk(private_key("rsa", ""))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**base, "kid": "k", **entry}]}))
    with pytest.raises(ConfigError) as raised:
        load_config({"TSYNC_JWT_KEY": str(path)}, check_store=False)
    assert says in str(raised.value) and "TSYNC_JWT_KEY" in str(raised.value)


async def test_a_real_server_takes_a_ps384_token_on_both_transports(tmp_path: Path) -> None:
    """The same keys through a running server: HTTP (Bearer) and the
    WebSocket (``?token=``), an RSA key in a JWKS entry without ``alg``."""
    private = private_key("rsa", "")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [_jwk(private, kid="ps")]}))
    good = mint_joserfc(private, "PS384", "ps")
    wrong_alg = mint_pyjwt(private_key("ec", "ES256"), "ES256", "ps")
    async with (
        running_server(jwt_key=str(path)) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        me = await http.get("/v1/auth", headers={"authorization": f"Bearer {good}"})
        assert me.status_code == 200 and me.json()["sub"] == "svc"
        refused = await http.get("/v1/auth", headers={"authorization": f"Bearer {wrong_alg}"})
        assert refused.status_code == 401 and "not allowed" in refused.json()["detail"]
        async with asyncio.timeout(10), websockets.connect(f"{srv.ws_url}?token={good}") as ws:
            await ws.send('{"op":"ping","ref":"p"}')
            assert json.loads(await ws.recv())["type"] == "pong"
