"""The server's import rules, read from the sources (no import needed).

- The folders are floors, and imports only run down (``docs/architecture.md``
  draws them): ``server.app`` and ``server.run`` over the two faces
  (``server.web``, ``server.streams``; only ``server.web.application``, which
  assembles both, imports the other face), over ``server.replicas``, over
  ``server.live``, over the shared ground flat in ``server/`` (config, auth,
  errors, metrics, tuning, logs), over ``server.model`` and ``server.store``,
  over ``protocol``.
- No cycles between ``server`` modules, not even through imports made only for
  the type checker: the parts of a split module never
  import the whole (``hub`` imports ``live``, ``appends`` and ``outbound``,
  never the reverse).
- Store backends (a module or a package of modules) share what they need
  through ``server.store.base`` and ``server.store.options`` (and the
  streams' model, ``server.streams.model``, a floor below the stores); none
  imports another, and no module of ``server.store`` or ``server.streams``
  is over 1,000 lines.
- No module imports another module's private (``_name``) name (the older
  ones are listed, to go; none may be added).
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
            # "from server import http_api" imports server.web.http_api.
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
    assert "server.live.live_transcript" in GRAPH["server.live.hub"]
    assert "server.live.appends" in GRAPH["server.live.hub"]


def test_server_modules_import_each_other_without_a_cycle() -> None:
    assert _cycle(RUNTIME) is None, " -> ".join(_cycle(RUNTIME) or [])
    # A cycle made only for the type checker is one the reader still has to
    # untangle: none either.
    assert _cycle(GRAPH) is None, " -> ".join(_cycle(GRAPH) or [])


#: The floors, top down; a module imports only from its own folder or a floor
#: below (the faces of one floor not from each other).
FLOORS: list[tuple[str, ...]] = [
    ("server.app", "server.run"),
    ("server.web", "server.streams"),
    ("server.replicas",),
    ("server.live",),
    ("server",),  # the shared ground: config, auth, errors, metrics, tuning, logs
    ("server.model", "server.store"),
    # One stream's state and the protocol's rules that do not wait (pure):
    # what every backend's streams part stores.
    ("server.streams.model",),
]
#: The one module of a face that may import the other face: it assembles both.
ASSEMBLY = {("server.web.application", "server.streams")}


def _room(module: str) -> tuple[int, str]:
    """(floor, folder) of a server module: the longest room it is in."""
    found: tuple[int, str] | None = None
    for level, rooms in enumerate(FLOORS):
        for room in rooms:
            inside = module == room or module.startswith(room + ".")
            if room != "server" and inside and (found is None or len(room) > len(found[1])):
                found = level, room
    return found or (FLOORS.index(("server",)), "server")


def _upward(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for name, deps in sorted(graph.items()):
        level, room = _room(name)
        for dep in sorted(deps):
            dep_level, dep_room = _room(dep)
            across = dep_level == level and dep_room != room
            if dep_level < level or (across and (name, dep_room) not in ASSEMBLY):
                found.append(f"{name} -> {dep}")
    return found


def test_imports_only_run_down_the_floors() -> None:
    assert _upward(GRAPH) == []


def test_the_floor_check_would_notice_an_import_running_up() -> None:
    assert _upward({"server.model.transcript": {"server.live.hub"}}) == [
        "server.model.transcript -> server.live.hub"
    ]
    assert _upward({"server.streams.http": {"server.web.ws"}}) == [
        "server.streams.http -> server.web.ws"
    ]
    assert _upward({"server.live.hub": {"server.model.transcript", "server.config"}}) == []


def test_the_cycle_check_would_notice_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize(
    "part", ["server.live.live_transcript", "server.live.appends", "server.live.outbound"]
)
def test_the_parts_of_the_hub_never_import_the_hub(part: str) -> None:
    assert "server.live.hub" not in GRAPH[part]


def test_a_live_transcript_knows_nothing_of_appends() -> None:
    assert "server.live.appends" not in GRAPH["server.live.live_transcript"]


BACKENDS = ["server.store.memory", "server.store.sqlite", "server.store.redis"]


def _package_of(module: str) -> str | None:
    """The backend a module belongs to (a backend is a module or a package)."""
    for backend in BACKENDS:
        if module == backend or module.startswith(backend + "."):
            return backend
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_store_backends_never_import_each_other(backend: str) -> None:
    """A backend's modules import the shared modules, their own package and
    the streams' model (what a streams part stores); never another backend,
    nor the registry or any other floor above."""
    shared = {"server.store", "server.store.base", "server.store.options", "server.streams.model"}
    modules = [m for m in GRAPH if _package_of(m) == backend]
    assert modules, backend
    for module in modules:
        foreign = {m for m in GRAPH[module] if _package_of(m) not in (None, backend)}
        assert foreign == set(), f"{module} imports {foreign}"
        outside = {m for m in GRAPH[module] if _package_of(m) is None} - shared
        assert outside == set(), f"{module} imports {outside}"


def test_the_backend_check_would_notice_a_backend_importing_another() -> None:
    assert _package_of("server.store.redis.link") == "server.store.redis"
    assert _package_of("server.store.sqlite") == "server.store.sqlite"
    assert _package_of("server.store.base") is None


def test_each_backend_is_one_package_and_no_source_file_is_over_1000_lines() -> None:
    """Issue 41: the backends are packages, and no source file of the
    project (``protocol``, ``server``, ``client_py``, ``client_js``) is over
    1,000 lines: a file that grows past it is several jobs to split."""
    for backend in ("server.store.sqlite", "server.store.redis"):
        assert MODULES[backend].name == "__init__.py", backend
    sources = [
        path
        for folder in ("protocol", "server", "client_py", "client_js")
        for pattern in ("*.py", "*.js", "*.d.ts")
        for path in (ROOT / folder).rglob(pattern)
        if "vendor" not in path.parts and "node_modules" not in path.parts
    ]
    assert len(sources) > 100
    long = {
        str(path.relative_to(ROOT)): n
        for path in sources
        if (n := path.read_text(encoding="utf-8").count("\n")) > 1000
    }
    assert long == {}


def _private_imports(path: Path) -> list[str]:
    """``from x import _name`` statements of ``path`` (another module's
    private name); relative imports too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.module}.{alias.name}")
    return found


def test_no_server_module_imports_another_modules_private_name() -> None:
    found = {name: bad for name, path in MODULES.items() if (bad := _private_imports(path))}
    assert found == {}


def test_the_private_import_check_would_notice_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from server.store.redis import _Script\nfrom a import b, _c\n")
    assert _private_imports(probe) == ["server.store.redis._Script", "a._c"]


TRANSPORTS = ["server.web.ws", "server.web.http_api", "server.web.http_lmml"]
#: What the transports must leave to the hub.
INTERNALS = {
    "server.live.live_transcript",
    "server.live.appends",
    "server.store.memory",
    "server.store.sqlite",
}
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


def test_the_hub_stays_a_coordinator() -> None:
    """The hub coordinates its parts (``docs/architecture.md``); a hub that
    grows past this is doing a part's job again."""
    lines = MODULES["server.live.hub"].read_text(encoding="utf-8").count("\n")
    assert lines < 500, f"server/live/hub.py has {lines} lines"


LONG_MODULE = 600


@pytest.mark.parametrize("package", ["server", "protocol", "client_py"])
def test_a_long_module_says_at_its_top_why_it_is_one(package: str) -> None:
    unexplained = []
    for path in sorted((ROOT / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= LONG_MODULE:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if "Why one module of over 600 lines" not in docstring:
            unexplained.append(str(path.relative_to(ROOT)))
    assert unexplained == []
