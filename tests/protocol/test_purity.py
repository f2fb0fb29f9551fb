"""``protocol`` is pure: importing it pulls in no event loop, socket, server
framework or database, and its sources call no file-system I/O.

Both ends (the server, the Python client, the JavaScript client's tests, the
replica mirroring) rely on that, so it is proved, not promised.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "protocol"

#: Modules whose presence after ``import protocol...`` means I/O machinery
#: came along: event loops, sockets, TLS, web frameworks, databases, processes,
#: thread pools, HTTP clients, and the impure packages of this project itself.
FORBIDDEN = (
    "asyncio",
    "socket",
    "selectors",
    "ssl",
    "starlette",
    "redis",
    "websockets",
    "uvicorn",
    "anyio",
    "sqlite3",
    "_sqlite3",
    "subprocess",
    "multiprocessing",
    "concurrent.futures",
    "http.client",
    "urllib.request",
    "httpx",
    "server",
    "client_py",
)


def _module_names() -> list[str]:
    # Walk the files, not pkgutil: a subpackage without __init__.py (a namespace
    # package) is still part of protocol and must be pure too.
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


MODULES = _module_names()


def test_the_discovery_finds_the_known_modules() -> None:
    for name in ("protocol", "protocol.wire", "protocol.types", "protocol.continuity"):
        assert name in MODULES


def _imported_after(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    # -I: no user site, no PYTHON* variables, no current directory on the path.
    result = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def _forbidden_in(loaded: set[str]) -> list[str]:
    return sorted(
        name for name in loaded for bad in FORBIDDEN if name == bad or name.startswith(bad + ".")
    )


def test_importing_every_protocol_module_loads_no_io_machinery() -> None:
    loaded = _imported_after(MODULES)
    assert set(MODULES) <= loaded
    assert _forbidden_in(loaded) == []


def test_the_check_would_notice_a_forbidden_import() -> None:
    found = _forbidden_in(_imported_after(["protocol", "asyncio"]))
    assert "asyncio" in found
    assert "socket" in found


# --- static: no file-system calls in the sources ----------------------------------------

#: Modules a pure source has no business importing.
_IO_MODULES = {"os", "pathlib", "shutil", "tempfile", "glob", "io.open"}
#: Method names that only ever mean file-system I/O.
_IO_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink"}


def _io_calls(source: str, filename: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [
                f"{where} import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in _IO_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _IO_MODULES:
            found.append(f"{where} from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(f"{where} open(...)")
            elif isinstance(func, ast.Attribute):
                if func.attr in _IO_METHODS:
                    found.append(f"{where} .{func.attr}(...)")
                if (
                    isinstance(func.value, ast.Name)
                    and func.value.id in {"os", "io"}
                    and (func.value.id == "os" or func.attr == "open")
                ):
                    found.append(f"{where} {func.value.id}.{func.attr}(...)")
    return found


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_file_system_io_in_the_sources(path: Path) -> None:
    assert _io_calls(path.read_text(encoding="utf-8"), path.name) == []


def test_the_static_check_would_notice_file_io() -> None:
    source = (
        "import os\nfrom pathlib import Path\n"
        "def f():\n    open('x')\n    os.remove('x')\n    Path('y').write_text('z')\n"
    )
    assert len(_io_calls(source, "m.py")) == 5
    # In-memory I/O is fine: a BytesIO and a zip member opened from it.
    assert _io_calls("import io\nb = io.BytesIO()\narchive.open(info)\n", "m.py") == []
