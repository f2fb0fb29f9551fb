"""The open-file limit warning's rule, at its boundary (issue "Third
contact", item 8): ``tsync serve`` speaks only when the hard limit is below
``max_connections + max_http_connections + FD_RESERVE``, the most sockets the
settings allow plus the server's own files. A limit that fits them is
raised (when needed) without a word; one a descriptor short lowers the caps
to fit, said as a warning when an operator set them and as information when
they are the defaults (20,000 WebSockets and 1,000 HTTP connections need
21,128: a hard limit of 20,000 does not fit them, and that is no fault).
``tests/server/run/test_entrypoints.py`` checks the same with real processes.
"""

from __future__ import annotations

import logging
import resource

import pytest

from server.config import ServerConfig, load_config
from server.run.serve import FD_RESERVE, fit_open_file_limit


def _with_limit(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> list[int]:
    """This process's limit as ``(soft, hard)`` for the function under test;
    returns the soft limits it set."""
    raised: list[int] = []

    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE and limits[1] == hard
        if limits[0] > hard:
            raise ValueError("not allowed to raise maximum limit")
        raised.append(limits[0])

    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return raised


def _config(**caps: int) -> ServerConfig:
    return load_config({}, {"store": "memory", **caps})


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "open-file" in r.getMessage()]


def test_a_limit_that_fits_the_settings_is_raised_without_a_word(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = _config(max_connections=20_000 - 1000 - FD_RESERVE, max_http_connections=1000)
    raised = _with_limit(monkeypatch, 1024, 20_000)
    assert fit_open_file_limit(config) is config
    assert raised == [20_000]
    assert _warnings(caplog) == []


def test_a_limit_below_the_settings_is_one_warning_and_the_caps_fit_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = _config(max_connections=20_000 - 1000 - FD_RESERVE + 1, max_http_connections=1000)
    _with_limit(monkeypatch, 1024, 20_000)
    fitted = fit_open_file_limit(config)
    assert fitted.max_connections + fitted.max_http_connections + FD_RESERVE <= 20_000
    [said] = _warnings(caplog)
    assert said.startswith("the open-file limit is 20000 and cannot be raised")


def test_the_defaults_do_not_fit_a_hard_limit_of_20000(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = _config()
    assert config.max_connections + config.max_http_connections + FD_RESERVE == 21_128
    _with_limit(monkeypatch, 20_000, 20_000)
    fitted = fit_open_file_limit(config)
    assert (fitted.max_connections, fitted.max_http_connections) == (18_926, 946)
    # Said once, as information: the defaults are what the server may take,
    # and fitting them to the machine is no fault (a WARNING at every start
    # of a machine with 20,000 descriptors was noise).
    [record] = [r for r in caplog.records if "open-file" in r.getMessage()]
    assert record.levelno == logging.INFO


def test_caps_an_operator_set_that_do_not_fit_are_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = _config(max_connections=30_000)
    _with_limit(monkeypatch, 20_000, 20_000)
    fit_open_file_limit(config)
    [record] = [r for r in caplog.records if "open-file" in r.getMessage()]
    assert record.levelno == logging.WARNING
