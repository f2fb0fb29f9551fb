"""``load_config``: defaults, then ``TSYNC_*``, then overrides; every bad
setting is a ``ConfigError`` that names it as it was given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server import config_docs
from server.config import FIELDS, ConfigError, ServerConfig, load_config, unknown_env_names


def test_defaults_then_env_then_overrides() -> None:
    assert load_config({}) == ServerConfig()
    env = {"TSYNC_PORT": "9000", "TSYNC_STORE": "memory", "TSYNC_PERMESSAGE_DEFLATE": "true"}
    config = load_config(env)
    assert (config.port, config.store, config.permessage_deflate) == (9000, "memory", True)
    config = load_config(env, {"port": 9001, "store": None})
    assert (config.port, config.store) == (9001, "memory")  # None leaves the env value
    assert load_config({"TSYNC_LOG_LEVEL": "WARNING"}).log_level == "warning"


@pytest.mark.parametrize(
    ("env", "overrides", "given_as", "says"),
    [
        ({"TSYNC_PORT": "abc"}, {}, {}, "TSYNC_PORT='abc': expected int"),
        ({"TSYNC_PORT": "70000"}, {}, {}, "TSYNC_PORT='70000': expected int <= 65535"),
        ({}, {"port": "x"}, {"port": "--port"}, "--port='x'"),
        ({"TSYNC_TOKEN": ""}, {}, {}, "TSYNC_TOKEN is empty"),
        ({"TSYNC_LOG_FORMAT": "xml"}, {}, {}, "expected one of text, json"),
        ({"TSYNC_QUEUE_MAX_FRAMES": "0"}, {}, {}, "TSYNC_QUEUE_MAX_FRAMES='0'"),
        ({"TSYNC_STORE": "ftp://x"}, {}, {}, "TSYNC_STORE='ftp://x': unknown store scheme"),
        (
            {},
            {"queue_max_frame": "5"},
            {"queue_max_frame": "--set queue_max_frame"},
            "--set queue_max_frame: unknown setting 'queue_max_frame' (did you mean "
            "'queue_max_frames'",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(
    env: dict[str, str], overrides: dict[str, str], given_as: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(env, overrides, given_as=given_as)
    message = str(raised.value)
    assert says in message and "\n" not in message


def test_a_store_url_is_parsed_without_opening_it(tmp_path: Path) -> None:
    folder = f"{tmp_path}/never"
    config = load_config({"TSYNC_STORE": f"sqlite:{folder}"})
    assert config.store == f"sqlite:{folder}"
    assert not os.path.exists(folder)  # parsed, not opened


def test_unknown_tsync_variables_are_reported_but_known_others_are_not() -> None:
    env = {"TSYNC_PROT": "1", "TSYNC_URL": "http://x", "TSYNC_PORT": "1", "OTHER": "x"}
    assert unknown_env_names(env) == ["TSYNC_PROT"]


@given(st.sampled_from(sorted(FIELDS)), st.text(max_size=12))
def test_any_env_value_is_a_config_or_a_config_error(name: str, raw: str) -> None:
    try:
        config = load_config({f"TSYNC_{name.upper()}": raw}, check_store=False)
    except ConfigError as exc:
        assert name in (exc.setting or "") and "\n" not in str(exc)
    else:
        assert isinstance(config, ServerConfig)


def test_every_setting_has_a_description() -> None:
    for name, field in FIELDS.items():
        assert field.type.__metadata__[-1].description, name


def test_docs_configuration_md_is_generated_from_the_settings() -> None:
    assert config_docs.DOC.read_text() == config_docs.render(), (
        "docs/configuration.md is out of date: run python -m server.config_docs"
    )
    text = config_docs.render()
    for name in FIELDS:
        assert f"| `{name}` | `TSYNC_{name.upper()}` |" in text
