"""client_js/ as the npm package a user installs: what ``npm pack`` puts in it,
types that cover every export and check strictly, the same file served at
/v1/client.js, and the client working in Node (20: through ``ws``) against a
real server. The React component renders in Chromium in
tests/browser/test_react_package.py."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import client_py
from tests.conftest import require_binary
from tests.js_package import npm
from tests.support.node import node_script
from tests.support.servers import running_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    npm.tools()
    tarball = npm.pack(tmp_path_factory.mktemp("pack"))
    npm.install(tarball)
    yield tarball


def test_the_packed_package_holds_the_module_its_types_and_readme(installed: Path) -> None:
    assert npm.tarball_names(installed) == {
        "package.json",
        "client.js",
        "client.d.ts",
        "render.js",
        "render.d.ts",
        "README.md",
    }
    meta = json.loads((npm.INSTALLED / "package.json").read_text())
    assert meta["type"] == "module"
    assert meta["types"] == "./client.d.ts"
    assert meta["exports"]["."] == {"types": "./client.d.ts", "default": "./client.js"}
    assert meta["exports"]["./render"] == {"types": "./render.d.ts", "default": "./render.js"}
    assert "dependencies" not in meta  # no runtime dependency; ws is an optional peer
    assert meta["peerDependenciesMeta"]["ws"]["optional"] is True


@pytest.mark.parametrize(
    ("entry", "declarations"),
    [("@transcript-sync/client", "client.d.ts"), ("@transcript-sync/client/render", "render.d.ts")],
)
def test_the_declarations_name_every_export_and_nothing_else(
    installed: Path, entry: str, declarations: str
) -> None:
    node = require_binary("node")
    script = f"import('{entry}').then((m) => console.log(Object.keys(m).join(' ')))"
    out = subprocess.run(
        [node, "--input-type=module", "-e", script],
        cwd=npm.PROJECT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    runtime = set(out.stdout.split())
    declared = set(
        re.findall(
            r"^export (?:const|function|class) (\w+)",
            (npm.INSTALLED / declarations).read_text(),
            re.M,
        )
    )
    assert runtime == declared


def test_an_example_of_every_public_api_type_checks_strictly(installed: Path) -> None:
    tsc = npm.PROJECT / "node_modules" / ".bin" / "tsc"
    result = subprocess.run(
        [str(tsc), "-p", "tsconfig.json"],
        cwd=npm.PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["client.js", "render.js"])
async def test_the_server_serves_the_same_file(name: str) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        served = await http.get(f"/v1/{name}")
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("text/javascript")
    assert served.content == (npm.PACKAGE / name).read_bytes()


async def test_the_package_follows_a_transcript_in_node(installed: Path) -> None:
    text = "Hello from a draft"
    async with running_server() as srv, client_py.connect(srv.url) as writer:
        await writer.create("node-1", [{"role": "user", "content": "hi"}])
        args = (srv.ws_url, "node-1", text)
        async with node_script("node_example.mjs", *args, cwd=npm.PROJECT) as run:
            async with writer.draft("node-1") as draft:
                for word in ("Hello", " from", " a", " draft"):
                    await draft.write(word)
                    await draft.sync()
                await draft.commit()
            seen = await run.finish()
    assert seen["roles"] == ["user", "user", "assistant"]
    assert seen["ack"]["start"] == 1 and seen["ack"]["count"] == 1
    assert "live" in seen["statuses"]
    assert seen["draftTexts"], "the draft was never seen growing"
    assert all(text.startswith(t) for t in seen["draftTexts"]), seen["draftTexts"]
    assert seen["sameSnapshotWhenUnchanged"] is True
