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


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` reads from, relative imports resolved
    against ``package``."""
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


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
            base = _from_base(node, package)
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


# --- private names ---------------------------------------------------------------------

#: Imports of another module's private name let through, with why: none since
#: issue 41 removed the last (an entry whose import is gone fails a test).
#: (importer, module imported from, name).
PRIVATE_ALLOWED: dict[tuple[str, str, str], str] = {}

#: The packages held to it. Tests may look into the module they test.
PRIVATE_RULE_PACKAGES = ("protocol", "server", "client_py")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


def private_imports(path: Path, module: str | None = None) -> set[tuple[str, str, int]]:
    """``(module, name, line)`` for every private name of another project
    module that ``path`` imports (``from m import _x``) or reads off an
    imported module (``m._x``, ``import a.m as m``)."""
    module = _module_name(path) if module is None else module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    aliases: dict[str, str] = {}  # a local name -> the project module it is
    found: set[tuple[str, str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PRIVATE_RULE_PACKAGES:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            if base.split(".")[0] not in PRIVATE_RULE_PACKAGES:
                continue
            for alias in node.names:
                if _private(alias.name) and base != module:
                    found.add((base, alias.name, node.lineno))
                elif _is_module(f"{base}.{alias.name}"):
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = ast.unparse(node.value)
            source = aliases.get(target)
            if source is not None and source != module:
                found.add((source, node.attr, node.lineno))
    return found


@pytest.mark.parametrize(
    "path",
    [path for package in PRIVATE_RULE_PACKAGES for path in _sources(package)],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_no_module_imports_another_modules_private_name(path: Path) -> None:
    importer = _module_name(path)
    bad = sorted(
        f"line {line}: {source}.{name}"
        for source, name, line in private_imports(path)
        if (importer, source, name) not in PRIVATE_ALLOWED
    )
    assert bad == [], f"{path.relative_to(ROOT)} uses private names of other modules: {bad}"


def test_every_allowed_private_import_is_still_there() -> None:
    """An allowed import that was fixed leaves ``PRIVATE_ALLOWED``."""
    seen = {
        (_module_name(path), source, name)
        for package in PRIVATE_RULE_PACKAGES
        for path in _sources(package)
        for source, name, _ in private_imports(path)
    }
    assert sorted(set(PRIVATE_ALLOWED) - seen) == []


def test_the_private_check_sees_each_way_in(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from server.live import outbound\n"
        "import server.live.frames as frames\n"
        "from server.live.hub import _secret, Hub\n"
        "from .presence import _state\n"
        "from ._private_mod import name\n"
        "outbound._lag\n"
        "frames._failed\n"
        "frames.__name__\n"
        "x._not_a_module\n",
        encoding="utf-8",
    )
    found = {(m, n) for m, n, _ in private_imports(source, "server.live.probe")}
    assert found == {
        ("server.live.hub", "_secret"),
        ("server.live.presence", "_state"),
        ("server.live.outbound", "_lag"),
        ("server.live.frames", "_failed"),
    }
    # A module's own private names are its own.
    assert private_imports(source, "server.live.hub") >= {("server.live.presence", "_state", 4)}
    assert ("server.live.hub", "_secret") not in {
        (m, n) for m, n, _ in private_imports(source, "server.live.hub")
    }
