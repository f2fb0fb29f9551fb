"""The npm side of the JavaScript package's tests: the test project's tools
(``npm ci`` of tests/js_package/package-lock.json, once) and the package as a
user gets it (``npm pack client_js`` installed into that project)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from tests.conftest import require_binary
from tests.support.node import npm_ci

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent
PACKAGE = ROOT / "client_js"
INSTALLED = PROJECT / "node_modules" / "@transcript-sync" / "client"


def _run(args: list[str], cwd: Path, timeout: float) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def tools() -> Path:
    """tests/js_package with its node_modules as package-lock.json says."""
    return npm_ci(PROJECT)


def pack(destination: Path) -> Path:
    """``npm pack client_js``: the tarball a user would install."""
    npm = require_binary("npm")
    out = _run([npm, "pack", "--json", "--pack-destination", str(destination)], PACKAGE, 120)
    return destination / json.loads(out)[0]["filename"]


def install(tarball: Path) -> Path:
    """The tarball unpacked where npm would put it, in the test project."""
    if INSTALLED.exists():
        shutil.rmtree(INSTALLED)
    INSTALLED.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            member.name = member.name.removeprefix("package/")
        archive.extractall(INSTALLED, filter="data")
    return INSTALLED


def tarball_names(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as archive:
        return {m.name.removeprefix("package/") for m in archive.getmembers()}


def readme_block(heading: str, what: str) -> str:
    """The first ```tsx block after the package README's ``## heading``."""
    text = (PACKAGE / "README.md").read_text()
    match = re.search(rf"## {re.escape(heading)}[^\n]*\n.*?```tsx\n(.*?)```", text, re.S)
    assert match is not None, f"client_js/README.md lost its {what}"
    return match.group(1)


def bundle_for_browser(entry: Path, outfile: Path) -> None:
    """``entry`` and everything it imports (React, the AI SDK, the packed
    package from this project's node_modules) as one ES module, by esbuild."""
    esbuild = PROJECT / "node_modules" / ".bin" / "esbuild"
    result = subprocess.run(
        [
            str(esbuild),
            str(entry),
            "--bundle",
            "--format=esm",
            "--jsx=automatic",
            '--define:process.env.NODE_ENV="development"',
            f"--outfile={outfile}",
            "--log-level=warning",
        ],
        env={**os.environ, "NODE_PATH": str(PROJECT / "node_modules")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
