"""``load_config``: defaults, then ``TSYNC_*``, then overrides; every bad
setting is a ``ConfigError`` that names it as it was given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.config import FIELDS, ConfigError, ServerConfig, load_config, unknown_env_names
from server.run import config_docs


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
        "docs/configuration.md is out of date: run python -m server.run.config_docs"
    )
    text = config_docs.render()
    for name in FIELDS:
        assert f"| `{name}` | `TSYNC_{name.upper()}` |" in text


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("max_frame_bytes", "4MiB", 4 << 20),
        ("max_frame_bytes", "4 MiB", 4 << 20),  # as the docs print it
        ("queue_max_bytes", "512KiB", 512 << 10),
        ("max_live_bytes", "1GiB", 1 << 30),
        ("max_http_body_bytes", "2MB", 2_000_000),
        ("max_http_body_bytes", "64KB", 64_000),
        ("max_http_body_bytes", "1.5MiB", 3 << 19),
        ("max_frame_bytes", "1000", 1000),
        ("idle_ttl_s", "5m", 300.0),
        ("graceful_shutdown_s", "30s", 30.0),
        ("draft_ttl_s", "1h", 3600.0),
        ("ping_interval_s", "500ms", 0.5),
        ("write_delay_ms", "2s", 2000.0),
        ("write_delay_ms", "3", 3.0),
    ],
)
def test_sizes_and_durations_take_units(name: str, raw: str, value: float) -> None:
    assert getattr(load_config({f"TSYNC_{name.upper()}": raw}), name) == value
    assert getattr(load_config({}, {name: raw}), name) == value


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("max_frame_bytes", "4Mx", "expected a size such as 4MiB"),
        ("max_frame_bytes", "5m", "expected a size"),
        ("idle_ttl_s", "5MiB", "expected a duration such as 30s"),
        ("max_frame_bytes", "0.5B", "not a whole number of bytes"),
        ("port", "80s", "expected int"),
    ],
)
def test_a_wrong_unit_is_one_line_naming_the_setting(name: str, raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({f"TSYNC_{name.upper()}": raw})
    assert says in str(raised.value) and f"TSYNC_{name.upper()}='{raw}'" in str(raised.value)


def _serve_config(argv: list[str]) -> ServerConfig:
    from server.run.cli import build_parser, config_from_args

    args, _ = build_parser().parse_known_args(["serve", *argv])
    return config_from_args(args)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--port", "9011", "--set", "port=9012"], "--port 9011 and --set port=9012 both set port"),
        (["--set", "port=1", "--set", "port=2"], "--set port=1 and --set port=2 both set port"),
        (
            ["--page-remote-images", "--set", "page_remote_images=false"],
            "--page-remote-images and --set page_remote_images=false",
        ),
    ],
)
def test_a_setting_given_twice_is_an_error_naming_both(argv: list[str], says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _serve_config(["--store", "memory", *argv])
    assert says in str(raised.value)


def test_a_flag_over_a_variable_is_the_documented_precedence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TSYNC_PORT", "9012")
    assert _serve_config(["--store", "memory", "--port", "9011"]).port == 9011
    assert _serve_config(
        ["--store", "memory", "--set", "max_frame_bytes=4MiB"]
    ).max_frame_bytes == (4 << 20)


def test_every_flag_is_in_the_readme_synopsis_and_the_precedence_paragraph() -> None:
    from server.run.cli import FLAGS

    readme = config_docs.README.read_text()
    assert readme == config_docs.render_readme(readme), (
        "README.md's tsync serve synopsis is out of date: run python -m server.run.config_docs"
    )
    synopsis = readme.split(config_docs.SYNOPSIS_BEGIN)[1].split(config_docs.SYNOPSIS_END)[0]
    precedence = config_docs.render().split("A setting given both")[0]
    for flag in FLAGS.values():
        assert f"[{flag}" in synopsis, flag
        assert f"`{flag}`" in precedence, flag


def test_the_http_shares_must_leave_room_for_requests_with_credentials() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({"TSYNC_HTTP_PARKED_SHARE": "0.8"}, check_store=False)
    assert raised.value.setting == "http_parked_share"
    assert str(raised.value).startswith("TSYNC_HTTP_PARKED_SHARE: ")
    assert "add up to 1 or more" in str(raised.value)
    assert load_config({"TSYNC_HTTP_PARKED_SHARE": "0.7"}, check_store=False)
