"""Every dotted name of this project's code that a docstring or a page of
``docs/`` gives (``server.live.outbound.OutboundQueue.push_shared``,
``protocol.presence``, ``client_py.cli``) names a module that exists, or an
attribute of one: a module that moved takes its mentions with it.

Names are resolved on the sources, without importing them (some modules
patch the interpreter when imported: ``client_py.locust`` brings gevent):
the longest prefix that is a module's file, then a name defined at the top
of that module (a def, class, assignment or import), then, inside a class,
a name its body defines or its methods assign on ``self``.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "protocol", "client_py")

#: A dotted name of the project; not part of a longer one (``tests.server``,
#: a host name), of a path (``server/live``) nor a file's name (``protocol.md``).
DOTTED = re.compile(
    r"(?<![\w./-])(?:server|protocol|client_py)"
    r"(?:\.(?!(?:md|py|js|mjs|json|html|txt)\b)[A-Za-z_]\w*)+"
)

#: Mentions known not to resolve, each with why it stays for now.
ALLOWED: dict[tuple[str, str], str] = {
    # Records of past runs: the commands and modules of the commit measured.
    ("docs/benchmarks.md", "server.cli"): "a command run on commit 2cd97d2, where it existed",
    ("docs/benchmarks.md", "server.Connection"): "a heap profile of an old commit",
    # server/streams/ is being rewritten by another engineer in parallel (issue 41):
    # fix it there, then drop this line.
    ("server/streams/fanout.py", "server.outbound"): "should be server.live.outbound",
}


def _module_path(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module's or a class's body binds, with what binds them."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names[sub.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, block, []):
                    inner = child.body if isinstance(child, ast.ExceptHandler) else [child]
                    names.update(_defined(inner))
    return names


def _class_names(cls: ast.ClassDef) -> set[str]:
    names = set(_defined(cls.body))
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries
    return names


def resolves(name: str) -> bool:
    """Whether ``name`` is a module of the project or an attribute of one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_path(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        defined = _defined(_tree(path).body)
        if "__getattr__" in defined:
            return True
        node = defined.get(rest[0])
        if node is None:
            return False
        if len(rest) == 1 or not isinstance(node, ast.ClassDef):
            # An imported or assigned name's attributes are not followed.
            return True
        return rest[1] in _class_names(node)
    return False


def _docstrings(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                line = node.body[0].lineno if node.body else 0
                found.append((line, doc))
    return found


def _mentions() -> list[tuple[str, str]]:
    """(where, dotted name) for every mention in docstrings and docs/*.md."""
    found: list[tuple[str, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, doc in _docstrings(path):
                where = f"{path.relative_to(ROOT)}:{line}"
                found.extend((where, name) for name in DOTTED.findall(doc))
    for page in sorted((ROOT / "docs").glob("*.md")):
        for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{page.relative_to(ROOT)}:{number}"
            found.extend((where, name) for name in DOTTED.findall(text))
    return found


def test_every_dotted_name_in_docstrings_and_docs_resolves() -> None:
    mentions = _mentions()
    assert len(mentions) > 100, "the scan found too few names to be looking"
    broken = sorted(
        {
            f"{where}: {name}"
            for where, name in mentions
            if not resolves(name) and (where.partition(":")[0], name) not in ALLOWED
        }
    )
    assert broken == [], "names of modules or attributes that do not exist:\n" + "\n".join(broken)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("server.live.outbound", True),
        ("server.live.outbound.OutboundQueue.push_shared", True),
        ("server.live.outbound.OutboundQueue.closed", True),  # a slot set in __init__
        ("protocol.presence.presence_change", True),
        ("client_py.cli", True),
        ("server.outbound", False),  # moved to server.live.outbound
        ("server.presence", False),
        ("server.live.outbound.NoSuchThing", False),
        ("server.live.outbound.OutboundQueue.no_such_method", False),
    ],
)
def test_the_resolver_tells_names_that_exist_from_those_that_do_not(
    name: str, expected: bool
) -> None:
    assert resolves(name) is expected


def test_the_scan_finds_names_but_not_paths_or_longer_names() -> None:
    text = "see ``server.live.hub``, tests.server.x, server/live/hub.py, a.protocol.b, protocol.md"
    assert DOTTED.findall(text) == ["server.live.hub"]


def test_every_allowed_exception_is_still_needed() -> None:
    """An entry whose mention was fixed or removed goes from ``ALLOWED``."""
    seen = {(where.partition(":")[0], name) for where, name in _mentions()}
    stale = sorted(key for key in ALLOWED if key not in seen or resolves(key[1]))
    assert stale == []
