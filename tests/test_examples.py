"""Every Python and shell example of README.md and docs/*.md runs, against a
real server, so that an example cannot rot (issue 25: "Streaming a draft"
did not run as written).

Examples run as a user of a fresh clone runs them (issue "Third contact",
item 1: ``tsync create demo-1`` was "command not found" there): in a folder
laid out as the clone (its ``scripts/`` and the ``.venv`` they made, which is
this suite's), with the ``PATH`` of someone who activated nothing, so the
README's ``./scripts/tsync`` and ``./scripts/python`` are what runs, and a
bare ``tsync`` or ``python`` fails as it would for that user.

- A ```` ```python ```` block is a complete program: saved and run as the
  text before it says (``Save as `hello.py` and run `./scripts/python
  hello.py```), else with ``./scripts/python``, while a ``tsync serve``
  runs; its ``http://127.0.0.1:8765`` is that server.
- A ```` ```sh ```` block is run by bash (``set -euo pipefail``) in that
  folder, with ``TSYNC_URL`` naming a running server. A line that starts a
  server in the foreground (``tsync serve``, ``uvicorn``) is started, waited
  for until ``/healthz`` answers, and stopped with SIGTERM. Addresses a test
  may not use are mapped: ``0.0.0.0`` to ``127.0.0.1``, every port to a free
  one, every ``redis://HOST:PORT/DB`` to a private ``redis-server``,
  ``/var/lib/tsync`` to a temporary folder.
- A block for a deployment, which has the package installed (``pip install
  .`` in an active venv: ``tsync``, ``python`` and ``uvicorn`` on ``PATH``),
  says so: ```` ```sh after-install ````; it runs with the venv's ``bin`` on
  ``PATH``, as ``source .venv/bin/activate`` would put it.
- A block that cannot run here says so in its info string, with the reason:
  ```` ```sh not-run: needs a TLS Redis ````. ``NOT_RUN_MAX`` caps how many
  may.
- A block another test runs as written (a program that serves until it is
  stopped, say) names it: ```` ```python tested-by: tests/redis/test_readme_agent.py ````;
  that test must exist and read the block from this very file.

Other languages (``js``, ``nginx``, plain ```` ``` ````) are not examples
this test runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN: dict[str, str] = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
#: Blocks marked ``not-run`` (each with its reason); more means examples rot.
NOT_RUN_MAX = 8
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(.*)$")
#: Programs that serve in the foreground: started, checked, stopped.
SERVERS = ("tsync serve", "uvicorn ")


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    language: str
    info: str
    code: str
    #: The text between the previous block and this one.
    before: str = ""

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """The reason given for not running it, or ``None``."""
        _, marked, reason = self.info.partition("not-run:")
        return reason.strip() if marked else None

    @property
    def after_install(self) -> bool:
        """Whether it runs where ``pip install .`` put the commands on ``PATH``."""
        return self.info.partition(" ")[2].strip() == "after-install"

    @property
    def run_as(self) -> tuple[str, str] | None:
        """The file and command the text before the block says to save it as
        and run it with (``Save as `hello.py` and run `...```), or ``None``."""
        said = re.search(r"Save as `([^`]+)` and run\s+`([^`]+)`", self.before)
        return (said[1], said[2]) if said else None

    @property
    def tested_by(self) -> str | None:
        """The test that runs this block as written, or ``None``."""
        _, marked, test = self.info.partition("tested-by:")
        return test.strip() if marked else None


def examples() -> list[Example]:
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        prose_from = 0
        while i < len(lines):
            match = _FENCE.match(lines[i])
            if match is None:
                i += 1
                continue
            before = " ".join(lines[prose_from:i])
            fence, info = match[1], match[2].strip()
            end = i + 1
            while end < len(lines) and not lines[end].startswith(fence[0] * len(fence)):
                end += 1
            language = info.split(" ", 1)[0].lower()
            if language in RUN:
                code = "\n".join(lines[i + 1 : end]) + "\n"
                found.append(Example(path, i + 1, RUN[language], info, code, before))
            i = end + 1
            prose_from = i
    return found


EXAMPLES = examples()


def test_the_examples_are_found_and_few_are_not_run() -> None:
    names = {e.name for e in EXAMPLES}
    assert any(n.startswith("README.md") for n in names)
    assert sum(e.language == "python" for e in EXAMPLES) >= 3
    skipped = [
        e
        for e in EXAMPLES
        if e.info.partition(" ")[2]
        and e.not_run is None
        and e.tested_by is None
        and not e.after_install
    ]
    assert skipped == [], (
        "an info string after the language must be 'not-run: <reason>', "
        "'tested-by: <test>' or 'after-install'"
    )
    for example in EXAMPLES:
        if example.tested_by is not None:
            test = ROOT / example.tested_by
            assert test.is_file(), f"{example.name}: no test {example.tested_by}"
            assert example.path.name in test.read_text(), (
                f"{example.tested_by} does not read its block from {example.path.name}"
            )
    marked = [e for e in EXAMPLES if e.not_run is not None]
    assert all(e.not_run for e in marked), "not-run needs a reason"
    assert len(marked) <= NOT_RUN_MAX, [f"{e.name}: {e.not_run}" for e in marked]


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = require_binary("redis-server")
    server = RedisServer(binary, tmp_path_factory.mktemp("redis"), appendonly=False).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(store="memory", log_path=tmp_path / "server.log") as srv:
        yield srv


#: The ``bin`` folder of the venv this suite runs in (the clone's ``.venv``).
VENV_BIN = Path(sys.prefix) / "bin"


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A folder laid out as a fresh clone where ``./scripts/serve`` ran once:
    the repository's ``scripts/`` and the ``.venv`` they made (this suite's,
    so nothing is installed again)."""
    venv = Path(sys.prefix)
    if not (venv / ".tsync-installed").is_file():
        pytest.skip("the suite runs in a venv scripts/_venv.sh did not make (use ./scripts/test)")
    folder = tmp_path / "clone"
    folder.mkdir()
    (folder / "scripts").symlink_to(ROOT / "scripts")
    (folder / ".venv").symlink_to(venv)
    return folder


def _env(server: ServerProcess, *, installed: bool = False, **extra: str) -> dict[str, str]:
    """A user's environment: no ``TSYNC_*`` but ``TSYNC_URL`` (the test's
    server in place of the default ``http://127.0.0.1:8765``), and no venv on
    ``PATH`` unless ``installed`` (an active venv that ``pip install .`` filled)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TSYNC_", "VIRTUAL_ENV"))}
    path = [p for p in clean.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN]
    if installed:
        path.insert(0, str(VENV_BIN))
        clean["VIRTUAL_ENV"] = sys.prefix
    return clean | {"PATH": os.pathsep.join(path), "TSYNC_URL": server.url} | extra


def _report(done: subprocess.CompletedProcess[str], example: Example, code: str) -> str:
    return (
        f"{example.name} failed ({done.returncode}):\n{code}\n"
        f"--- out\n{done.stdout}\n--- err\n{done.stderr}"
    )


def _cases(language: str) -> list[object]:
    return [
        pytest.param(
            e,
            id=e.name,
            marks=[pytest.mark.skip(reason=f"not-run: {e.not_run}")]
            if e.not_run
            else [pytest.mark.skip(reason=f"run by {e.tested_by}")]
            if e.tested_by
            else [],
        )
        for e in EXAMPLES
        if e.language == language
    ]


@pytest.mark.parametrize("example", _cases("python"))
def test_a_python_example_runs(example: Example, server: ServerProcess, clone: Path) -> None:
    code = example.code.replace("http://127.0.0.1:8765", server.url)
    name, command = example.run_as or ("example.py", "./scripts/python example.py")
    (clone / name).write_text(code)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=clone,
        env=_env(server, installed=example.after_install),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, _report(done, example, code)


class _Mapping:
    """What a shell example names that a test may not use, and its stand-in."""

    def __init__(self, tmp: Path, server: ServerProcess, redis_url: str | None) -> None:
        self.tmp = tmp
        self.server = server
        self.redis_url = redis_url
        self.ports: dict[str, int] = {}

    def port(self, number: str) -> str:
        if number == "0":
            return "0"
        return str(self.ports.setdefault(number, free_port()))

    def __call__(self, code: str) -> str:
        code = code.replace("http://127.0.0.1:8765", self.server.url)
        code = code.replace("0.0.0.0", "127.0.0.1").replace("/var/lib/tsync", str(self.tmp / "var"))
        code = re.sub(r"--port[ =](\d+)", lambda m: f"--port {self.port(m[1])}", code)
        code = re.sub(r"(--bind[ =][\d.]+):(\d+)", lambda m: f"{m[1]}:{self.port(m[2])}", code)

        def redis(match: re.Match[str]) -> str:
            if self.redis_url is None:
                raise LookupError("redis")
            return f"{self.redis_url.rsplit('/', 1)[0]}/{match[1] or 0}"

        return re.sub(r"redis://[^\s/'\"?]+(?:/(\d+))?", redis, code)


#: Run a foreground server command, wait for its /healthz, stop it with SIGTERM.
_SERVE_CHECK = r"""
serve_check() {
  local port=$1; shift
  "$@" & local pid=$!
  @PYTHON@ - "$port" "$pid" <<'PY'
import os, sys, time, httpx
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(f"the server exited before it answered /healthz on port {port}")
    time.sleep(0.1)
sys.exit(f"no answer from /healthz on port {port}")
PY
  local healthy=$?
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || true
  return $healthy
}
"""


def _script(code: str, env_port: str) -> str:
    """The block as a bash script: foreground server lines go through
    ``serve_check`` with the port they listen on."""
    out = ["set -euo pipefail", _SERVE_CHECK.replace("@PYTHON@", shlex.quote(sys.executable))]
    joined = code.replace("\\\n", " ")
    for line in joined.splitlines():
        command = line.split(" #", 1)[0].strip()
        words = shlex.split(command) if command and not command.startswith("#") else []
        program = next((i for i, w in enumerate(words) if "=" not in w.split(" ")[0]), None)
        rest = " ".join(words[program:]) if program is not None else ""
        if rest.startswith(SERVERS) and not command.endswith("&"):
            port = re.search(r"--port (\d+)|--bind [\d.]+:(\d+)", rest)
            listening = next(p for p in port.groups() if p) if port else env_port
            out.append(f"serve_check {listening} env {command}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("example", _cases("sh"))
def test_a_shell_example_runs(
    example: Example,
    server: ServerProcess,
    tmp_path: Path,
    clone: Path,
    request: pytest.FixtureRequest,
) -> None:
    needs_redis = "redis://" in example.code
    redis_url = request.getfixturevalue("redis").url if needs_redis else None
    mapping = _Mapping(tmp_path, server, redis_url)
    env_port = str(free_port())
    code = mapping(example.code)
    script = _script(code, env_port)
    # Files, not pipes: a server the block leaves running (``tsync serve &``)
    # would hold a pipe open after bash is done.
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=clone,
            env=_env(server, installed=example.after_install, TSYNC_PORT=env_port),
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=240)
        finally:
            # The block's process group: what it left running goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL if proc.returncode is None else signal.SIGTERM)
            proc.wait()
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    assert done.returncode == 0, _report(done, example, script)
