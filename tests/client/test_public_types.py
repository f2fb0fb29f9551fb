"""The Python client's types are complete for its users' type checkers.

``typed/user_program.py`` calls every public API of ``client_py`` (and the chat
renderers) the way a user's program would, annotating what each returns; this
test runs ``mypy --strict`` on it from a folder of its own, with none of the
project's mypy settings, and the packages found as an installed copy would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_call_type_checks_strictly_in_a_users_file(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    program = tmp_path / "user_program.py"
    shutil.copy(Path(__file__).parent / "typed" / "user_program.py", program)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", ""]
    result = subprocess.run(
        [*mypy, str(program)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_packages_say_they_are_typed() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    for package in ("client_py", "protocol", "server"):
        assert (ROOT / package / "py.typed").exists()
        assert "py.typed" in package_data[package]
