"""Verifying credentials (``server.auth.Authenticator``), the settings that
configure it, ``tsync token``, and the table of rights (``protocol.rights``)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given
from hypothesis import strategies as st

from protocol import rights, wire
from protocol.rights import Grant
from server.auth import Authenticator, SettingError
from server.config import ConfigError, ServerConfig, load_config
from server.errors import Refused
from tests.auth.conftest import AUDIENCE, SECRET, STATIC, keep, mint

ROOT = Path(__file__).resolve().parents[2]


def _auth(**settings: Any) -> Authenticator:
    return Authenticator(ServerConfig(store="memory", **settings))


def _refused(auth: Authenticator, token: str | None) -> str:
    with pytest.raises(Refused) as refused:
        auth.verify(token)
    assert refused.value.code == "unauthorized"
    message = refused.value.message
    assert not token or token not in message
    return message


# --- HS256 and the static token ------------------------------------------------------


def test_an_hs256_token_grants_its_claims() -> None:
    auth = _auth(jwt_secret=SECRET, jwt_audience=AUDIENCE)
    grant = auth.verify(mint(read="chat-*", write=["chat-1", "x?"]))
    assert (grant.sub, grant.admin, grant.read, grant.write) == (
        "alice",
        False,
        ("chat-*",),
        ("chat-1", "x?"),
    )
    assert grant.expires_at is not None and grant.expires_at > time.time()
    assert grant.allows("read", "chat-9") and not grant.allows("write", "chat-9")
    assert grant.allows("write", "x1") and not grant.allows("write", "x12")
    assert not grant.allows("admin")
    assert auth.verify(mint(admin=True)).allows("write", "anything")


def test_a_server_without_credentials_settings_grants_everything() -> None:
    auth = _auth()
    assert not auth.required
    assert auth.verify(None).admin and auth.verify("whatever").admin


@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"ttl": -10}, "expired"),
        ({"secret": "another-secret-that-is-long-enough-000"}, "signature"),
        ({"audience": None}, "aud"),
        ({"audience": "elsewhere"}, "audience"),
        ({"read": 5}, "claims do not fit"),
        ({"admin": "yes"}, "claims do not fit"),
        ({"nbf": int(time.time()) + 600}, "refused"),
    ],
)
def test_refused_tokens_say_why_without_repeating_the_token(
    claims: dict[str, Any], says: str
) -> None:
    auth = _auth(jwt_secret=SECRET, jwt_audience=AUDIENCE)
    assert says in _refused(auth, mint(**claims))


def test_sub_and_exp_are_required_and_alg_none_is_refused() -> None:
    auth = _auth(jwt_secret=SECRET)
    now = int(time.time())
    for body in ({"exp": now + 60}, {"sub": "a"}, {"sub": 5, "exp": now + 60}):
        _refused(auth, keep(jwt.encode(body, SECRET, algorithm="HS256")))
    unsigned = keep(jwt.encode({"sub": "a", "exp": now + 60}, None, algorithm="none"))
    assert "not allowed" in _refused(auth, unsigned) or "accepts no" in _refused(auth, unsigned)
    for token in (None, "", "a.b", "a.b.c", "x" * 9000):
        _refused(auth, token)


def test_the_static_token_is_an_admin_that_never_expires() -> None:
    auth = _auth(token=STATIC, jwt_secret=SECRET)
    grant = auth.verify(STATIC)
    assert grant.admin and grant.expires_at is None and grant.sub is None
    _refused(auth, STATIC[:-1])
    _refused(auth, STATIC + "x")


# --- keys: PEM and JWKS ----------------------------------------------------------------


def _pem(public: Any) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def test_rs256_with_a_pem_key_and_no_algorithm_confusion(tmp_path: Path) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / "key.pem"
    key_file.write_text(_pem(private.public_key()))
    auth = _auth(jwt_key=str(key_file))
    exp = int(time.time()) + 60
    token = keep(jwt.encode({"sub": "svc", "exp": exp, "read": ["*"]}, private, algorithm="RS256"))
    assert auth.verify(token).allows("read", "anything")
    # The public key used as an HS256 secret (the classic confusion) is refused.
    forged = keep(jwt.encode({"sub": "x", "exp": exp, "admin": True}, "k" * 40, algorithm="HS256"))
    assert "HS256" in _refused(auth, forged)
    # A token signed by another key.
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _refused(auth, keep(jwt.encode({"sub": "a", "exp": exp}, other, algorithm="RS256")))


def test_es256_from_a_jwks_by_kid(tmp_path: Path) -> None:
    keys = {kid: ec.generate_private_key(ec.SECP256R1()) for kid in ("one", "two")}
    jwks = {
        "keys": [
            {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(k.public_key())), "kid": kid}
            for kid, k in keys.items()
        ]
    }
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    auth = _auth(jwt_key=str(path), jwt_secret=SECRET)
    body = {"sub": "svc", "exp": int(time.time()) + 60, "write": ["w"]}
    for kid, key in keys.items():
        token = keep(jwt.encode(body, key, algorithm="ES256", headers={"kid": kid}))
        assert auth.verify(token).allows("write", "w")
    wrong = keep(jwt.encode(body, keys["one"], algorithm="ES256", headers={"kid": "two"}))
    _refused(auth, wrong)
    unknown = keep(jwt.encode(body, keys["one"], algorithm="ES256", headers={"kid": "three"}))
    assert "kid" in _refused(auth, unknown)
    # HS256 tokens still go to the secret, never to the keys.
    assert auth.verify(mint(audience=None, read=["r"])).allows("read", "r")


# --- settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TSYNC_TOKEN": ""}, "TSYNC_TOKEN is empty"),
        ({"TSYNC_JWT_SECRET": "  "}, "TSYNC_JWT_SECRET is empty"),
        ({"TSYNC_JWT_SECRET": "short"}, "TSYNC_JWT_SECRET: must be at least 32 bytes"),
        ({"TSYNC_JWT_KEY": "/no/such/key.pem"}, "TSYNC_JWT_KEY: '/no/such/key.pem' is not a key"),
    ],
)
def test_credentials_settings_that_cannot_work_are_one_line_errors(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(env, check_store=False)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_a_key_file_that_is_no_key_and_a_config_built_in_code(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key at all")
    with pytest.raises(ConfigError, match="neither a PEM public key nor a JWKS"):
        load_config({"TSYNC_JWT_KEY": str(junk)}, check_store=False)
    # A config made in code cannot turn an empty token into "anyone may".
    with pytest.raises(SettingError):
        _auth(token="")


def test_without_cryptography_a_key_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Mocked: the package cannot be uninstalled for one test."""
    monkeypatch.setattr(jwt.algorithms, "has_crypto", False)
    with pytest.raises(ConfigError, match=r"pip install 'transcript-sync\[keys\]'"):
        load_config({"TSYNC_JWT_KEY": str(tmp_path)}, check_store=False)


@pytest.mark.parametrize("flag", ["--jwt-secret=", "--token=", "--jwt-secret=tooshort"])
def test_serve_with_an_empty_or_short_secret_exits_2_with_one_line(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from server.run.cli import main

    assert main(["serve", "--store", "memory", flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tsync serve: --")


def test_tsync_token_mints_what_the_server_accepts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from server.run.cli import main

    monkeypatch.setenv("TSYNC_JWT_SECRET", SECRET)
    monkeypatch.setenv("TSYNC_JWT_AUDIENCE", AUDIENCE)
    args = ["token", "--sub", "alice", "--read", "chat-*", "--write", "chat-1", "--ttl", "1h"]
    assert main(args) == 0
    token = keep(capsys.readouterr().out.strip())
    grant = _auth(jwt_secret=SECRET, jwt_audience=AUDIENCE).verify(token)
    assert (grant.sub, grant.read, grant.write) == ("alice", ("chat-*",), ("chat-1",))
    assert grant.expires_at is not None and 3590 < grant.expires_at - time.time() <= 3600
    monkeypatch.delenv("TSYNC_JWT_SECRET")
    assert main(["token", "--sub", "a"]) == 2
    assert "no secret" in capsys.readouterr().err
    assert main(["token", "--sub", "a", "--jwt-secret", SECRET, "--ttl", "soon"]) == 2


# --- the table of rights ---------------------------------------------------------------

IDS = st.text("abcxyz0123._:-", min_size=1, max_size=12)


@given(IDS, IDS)
def test_a_pattern_without_wildcards_is_the_id_itself(a: str, b: str) -> None:
    grant = Grant(read=[a])
    assert grant.allows("read", a)
    assert grant.allows("read", b) == (a == b)


@given(IDS, IDS)
def test_star_is_any_run_and_question_mark_one_character(prefix: str, rest: str) -> None:
    assert Grant(read=[prefix + "*"]).allows("read", prefix + rest)
    assert Grant(read=["*"]).allows("read", rest)
    assert Grant(read=[prefix + "?"]).allows("read", prefix + rest) == (len(rest) == 1)
    assert not Grant(read=[prefix + "*"], write=[]).allows("write", prefix + rest)


def test_dots_in_patterns_are_dots() -> None:
    grant = Grant(read=["a.b", "c*"])
    assert grant.allows("read", "a.b") and not grant.allows("read", "axb")
    assert not Grant().allows("read", "x") and not Grant(read=["x"]).allows("read", None)


def test_every_op_and_every_route_is_in_the_table() -> None:
    from starlette.routing import Mount, Route

    from server.web.application import create_app

    assert set(rights.OPS) == set(wire.OP_NAMES)
    app = create_app(ServerConfig(store="memory"), configure_logging=False)
    served = set()
    for route in app.starlette.routes:
        if isinstance(route, Mount):
            served.add(("GET", f"{route.path}/{{path}}"))
        elif isinstance(route, Route):
            path = re.sub(r":\w+}", "}", route.path)  # the table writes {p}, not {p:path}
            served |= {(m, path) for m in route.methods or () if m != "HEAD"}
    assert served == set(rights.ROUTES)


def test_protocol_md_shows_exactly_the_table() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- rights:begin[^\n]*\n(.*?)<!-- rights:end -->", text, re.DOTALL)
    assert found is not None, "docs/protocol.md has no rights table"
    assert found.group(1) == rights.render_markdown()
