"""What a new user does, from a clean copy of the repository in a temporary
folder, with nothing installed yet:

- ``pip install <copy>`` (no extras) into a fresh venv gives a ``tsync``
  whose ``--version`` and ``serve --store memory`` work, a bad ``--store``
  is one line and exit 2, and ``uvicorn server.app:app`` with
  ``TSYNC_TOKEN`` refuses a request without the token;
- the README's quick start, ``./scripts/serve`` then ``./scripts/test``, in
  that order (the first installs no extras, the second must add its own),
  and beside the server the README's next steps as written:
  ``./scripts/tsync create demo-1`` and ``./scripts/python``.

Marked ``newuser``: it installs packages (from pip's cache when it can) and
takes about a minute, so ``.ci/run`` runs it beside the rest of the suite.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.servers import free_port, wait_healthy

pytestmark = [pytest.mark.newuser, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a person who never ran this project."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TSYNC_", "VIRTUAL_ENV"))}
    # Not this suite's venv first on PATH: the scripts must find python3 alone.
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env | extra


def _copy_of_the_repository(target: Path) -> Path:
    """The files git knows (tracked or new, never ignored): what a clone has."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_of_the_repository(tmp_path_factory.mktemp("new-user") / "transcript-sync")


class Served:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        self.port = 0
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=out, stderr=out, start_new_session=True
            )

    def healthy(self, url: str, timeout: float) -> bool:
        return wait_healthy(self.proc, url, timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def served() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for server in started:
        server.stop()


def _plain_install(copy: Path, venv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_clean_env())
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         str(copy)],
        capture_output=True, text=True, env=_clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin"


def _readme_serve(copy: Path, served: list[Served], log: Path) -> Served:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Served(
        ["./scripts/serve", "--store", "memory", "--port", str(port)], _clean_env(), copy, log
    )
    server.port = port
    served.append(server)
    assert server.healthy(url, timeout=240), server.output()
    return server


def test_pip_install_and_the_readme_quick_start_work_from_a_clean_copy(
    copy: Path, tmp_path: Path, served: list[Served]
) -> None:
    began = time.monotonic()
    # The two installs are independent: run them side by side.
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(_plain_install, copy, tmp_path / "venv")
        readme = pool.submit(_readme_serve, copy, served, tmp_path / "scripts-serve.log")
        bin_dir = plain.result()
        quick_server = readme.result()

    # ./scripts/serve: no extras, and it said what it was doing, once.
    first_lines = quick_server.output().splitlines()
    assert first_lines[0] == "creating .venv and installing (first run, about a minute)"
    assert (copy / ".venv" / ".tsync-installed").read_text().strip() == ""
    # ... and how to run what the README runs next, which then works as written
    # (the commands are in .venv/bin, not on the user's PATH).
    assert first_lines[1].startswith("while it runs, from this folder: ./scripts/tsync")
    port = quick_server.port
    for argv in (
        ["./scripts/tsync", "create", "demo-1", "--url", f"http://127.0.0.1:{port}"],
        ["./scripts/python", "-c", "import client_py"],
    ):
        done = subprocess.run(argv, cwd=copy, capture_output=True, text=True, env=_clean_env())
        assert done.returncode == 0 and "install" not in done.stderr, (argv, done)
    quick_server.stop()

    tsync = str(bin_dir / "tsync")
    env = _clean_env()
    version = subprocess.run([tsync, "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout.startswith("tsync 0.")

    port = free_port()
    server = Served(
        [tsync, "serve", "--store", "memory", "--port", str(port)], env, tmp_path,
        tmp_path / "serve.log",
    )  # fmt: skip
    served.append(server)
    assert server.healthy(f"http://127.0.0.1:{port}", timeout=30), server.output()
    # The installed package holds the page's files: the client's modules and the renderer,
    # symlinks into client_js/ in a checkout, and the vendored libraries (KaTeX's fonts two
    # folders down).
    for path in (
        "/v1/client.js",
        "/v1/wire.js",
        "/v1/render.js",
        "/static/messages.js",
        "/static/vendor/katex/katex.min.js",
        "/static/vendor/katex/fonts/KaTeX_Main-Regular.woff2",
    ):
        got = httpx.get(f"http://127.0.0.1:{port}{path}")
        assert got.status_code == 200 and got.content, path
    server.stop()

    bad = subprocess.run(
        [tsync, "serve", "--store", "nosuch://x"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "--store" in bad.stderr and "Traceback" not in bad.stderr

    port = free_port()
    guarded = Served(
        [str(bin_dir / "uvicorn"), "server.app:app", "--port", str(port)],
        _clean_env(TSYNC_TOKEN="s3cret", TSYNC_STORE="memory"),
        tmp_path,
        tmp_path / "uvicorn.log",
    )
    served.append(guarded)
    url = f"http://127.0.0.1:{port}"
    assert guarded.healthy(url, timeout=30), guarded.output()
    assert httpx.get(url + "/v1/transcripts").status_code == 401
    ok = httpx.get(url + "/v1/transcripts", headers={"authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    guarded.stop()

    # ./scripts/test after ./scripts/serve: it installs the extras it needs.
    tested = subprocess.run(
        ["./scripts/test", "tests/protocol/test_wire.py", "-q", "-p", "no:cacheprovider"],
        cwd=copy, capture_output=True, text=True, env=_clean_env(), timeout=400,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert "passed" in tested.stdout
    assert "installing the dev extras" in tested.stderr
    # Generous: CI runs this beside the whole suite on 2 cores, and the dev extras
    # (test SDKs, Locust, Playwright) are most of what it waits for.
    assert time.monotonic() - began < 480
