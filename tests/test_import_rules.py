"""The packages' import rules (docs/architecture.md), proved on the sources.

- ``protocol`` imports neither ``server`` nor ``client_py``: it is the pure
  layer both ends share (``tests/protocol/test_purity.py`` also proves it
  loads no I/O machinery).
- ``client_py`` never imports ``server``: a client must install and run
  without the server's dependencies.

Every import statement counts, also those under ``if TYPE_CHECKING:`` or
inside a function, and relative imports are resolved. The same rules are
then checked at run time: importing every module of a package in a fresh
interpreter loads none of the forbidden packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.protocol.test_purity import _imported_after

ROOT = Path(__file__).resolve().parents[1]

#: package -> packages it must never import.
RULES: dict[str, tuple[str, ...]] = {
    "protocol": ("server", "client_py"),
    "client_py": ("server",),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, module: str | None = None) -> set[str]:
    """Every module an import statement in ``path`` (the module ``module``,
    by default named after its place under the root) may load, relative
    imports resolved: for ``from a import b`` both ``a`` and ``a.b``."""
    module = _module_name(path) if module is None else module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, node.module] if node.module else parts)
            else:
                base = node.module or ""
            if base:
                found.add(base)
            found.update(f"{base}.{a.name}" if base else a.name for a in node.names)
    return found


def _breaks(name: str, forbidden: tuple[str, ...]) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in forbidden)


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    ("package", "path"),
    [(package, path) for package in RULES for path in _sources(package)],
    ids=lambda value: str(value.relative_to(ROOT)) if isinstance(value, Path) else value,
)
def test_no_source_imports_a_forbidden_package(package: str, path: Path) -> None:
    bad = sorted(name for name in imported_modules(path) if _breaks(name, RULES[package]))
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}"


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from server.live.hub import Hub\n"
        "def f():\n    import server.model.transcript\n"
        "from .. import server as s\n"
        "from .mirror import Mirror\n",
        encoding="utf-8",
    )
    names = imported_modules(source, "client_py.probe")
    assert {"server.live.hub", "server.model.transcript", "server", "client_py.mirror"} <= names
    assert [n for n in names if _breaks(n, RULES["client_py"])] != []


@pytest.mark.parametrize("package", sorted(RULES))
def test_importing_a_package_loads_none_of_its_forbidden_ones(package: str) -> None:
    modules = [_module_name(path) for path in _sources(package)]
    loaded = _imported_after(modules)
    assert set(modules) <= loaded
    assert [name for name in loaded if _breaks(name, RULES[package])] == []
