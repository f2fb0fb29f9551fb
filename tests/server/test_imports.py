"""The server's import rules, read from the sources (no import needed).

- No cycles between ``server`` modules: the parts of a split module never
  import the whole (``hub`` imports ``live``, ``appends`` and ``outbound``,
  never the reverse).
- Store backends share what they need through ``server.store.base`` (and
  ``server.store.options``); none imports another.
- The HTTP and WebSocket layers only call the hub: they import no live
  transcript, committer or store internals and touch no live transcript.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.AST) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:``."""
    return {
        inner
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }


def _imports(path: Path, *, typing: bool = True) -> set[str]:
    """Every module ``path`` imports; with ``typing``, those imported only for
    the type checker too (a dependency for the reader all the same)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if typing else _type_only(tree)
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # "from server import http_api" imports server.http_api.
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


MODULES = {_module(p): p for p in sorted(SERVER.rglob("*.py"))}
GRAPH = {
    name: {m for m in _imports(path) if m in MODULES} - {name} for name, path in MODULES.items()
}
#: Without the type checker's imports: what Python actually imports.
RUNTIME = {
    name: {m for m in _imports(path, typing=False) if m in MODULES} - {name}
    for name, path in MODULES.items()
}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph[name]):
            if dep.startswith("server.store") and name == "server.store":
                continue  # a package's __init__ importing its own modules
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_the_module_graph_is_found() -> None:
    assert "server.live" in GRAPH["server.hub"]
    assert "server.appends" in GRAPH["server.hub"]


def test_server_modules_import_each_other_without_a_cycle() -> None:
    # Runtime imports; the entity's type-only pair (transcript <-> ranges) is
    # no cycle Python ever runs into.
    assert _cycle(RUNTIME) is None, " -> ".join(_cycle(RUNTIME) or [])


def test_the_cycle_check_would_notice_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("part", ["server.live", "server.appends", "server.outbound"])
def test_the_parts_of_the_hub_never_import_the_hub(part: str) -> None:
    assert "server.hub" not in GRAPH[part]


def test_a_live_transcript_knows_nothing_of_appends() -> None:
    assert "server.appends" not in GRAPH["server.live"]


BACKENDS = ["server.store.memory", "server.store.sqlite", "server.store.redis"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_store_backends_never_import_each_other(backend: str) -> None:
    """A backend imports the shared modules and its own parts
    (``server.store.redis_shards`` for ``server.store.redis``), which import
    only the shared modules."""
    shared = {"server.store", "server.store.base", "server.store.options"}
    parts = {m for m in GRAPH[backend] if m.startswith(backend + "_")}
    assert GRAPH[backend] & set(BACKENDS) == set()
    assert GRAPH[backend] <= shared | parts
    for part in parts:
        assert GRAPH[part] <= shared, part


TRANSPORTS = ["server.ws", "server.http_api", "server.http_lmml"]
#: What the transports must leave to the hub.
INTERNALS = {"server.live", "server.appends", "server.store.memory", "server.store.sqlite"}
#: Attributes of the hub and of live transcripts that are theirs alone.
PRIVATE_ATTRIBUTES = {
    "live",
    "_loading",
    "committer",
    "transcript",
    "subscribers",
    "window",
    "buffer",
    "lock",
    "forget",
    "reload",
}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_transports_only_call_the_hub(transport: str) -> None:
    assert GRAPH[transport] & INTERNALS == set()
    tree = ast.parse(MODULES[transport].read_text(encoding="utf-8"))
    touched = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES
    }
    assert touched == set()


def test_the_check_would_notice_a_transport_reaching_in() -> None:
    source = "def f(hub):\n    return hub.live['t'].transcript.revision\n"
    touched = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES
    }
    assert touched == {"live", "transcript"}
