"""client_js/ as the npm package a user installs: what ``npm pack`` puts in it,
types that cover every export and check strictly, the same files served at
/v1/client.js and beside it, and the client working in Node (20: through ``ws``) against a
real server. The React component renders in Chromium in
tests/browser/test_react_package.py."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import client_py
from server.web.pages import CLIENT_MODULES
from tests.conftest import require_binary
from tests.js_package import npm
from tests.support.node import node_script
from tests.support.servers import running_server

pytestmark = pytest.mark.slow


# The modules client.js imports (relative imports, no build step): shipped and served, not
# entries (tests/browser/test_pages.py holds the server's list to the imports).
MODULES = set(CLIENT_MODULES) - {"client.js", "render.js", "ui_stream.js"}


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
        *MODULES,
        "render.js",
        "render.d.ts",
        "ui_stream.js",
        "ui_stream.d.ts",
        "ai_chat.js",
        "ai_chat.d.ts",
        "ai_chat_react.js",
        "ai_chat_react.d.ts",
        "README.md",
    }
    meta = json.loads((npm.INSTALLED / "package.json").read_text())
    assert meta["type"] == "module"
    assert meta["types"] == "./client.d.ts"
    assert meta["exports"]["."] == {"types": "./client.d.ts", "default": "./client.js"}
    assert meta["exports"]["./render"] == {"types": "./render.d.ts", "default": "./render.js"}
    assert meta["exports"]["./ui-stream"] == {
        "types": "./ui_stream.d.ts",
        "default": "./ui_stream.js",
    }
    assert meta["exports"]["./ai-chat"] == {"types": "./ai_chat.d.ts", "default": "./ai_chat.js"}
    assert meta["exports"]["./ai-chat/react"] == {
        "types": "./ai_chat_react.d.ts",
        "default": "./ai_chat_react.js",
    }
    assert "dependencies" not in meta  # no runtime dependency; ws is an optional peer
    assert meta["peerDependenciesMeta"]["ws"]["optional"] is True
    # The modules behind the entries are no API: exports names none of them.
    script = "import('@transcript-sync/client/wire.js').catch((e) => console.log(e.code))"
    refused = subprocess.run(
        [require_binary("node"), "--input-type=module", "-e", script],
        cwd=npm.PROJECT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert refused.stdout.strip() == "ERR_PACKAGE_PATH_NOT_EXPORTED"


@pytest.mark.parametrize(
    ("entry", "declarations"),
    [
        ("@transcript-sync/client", "client.d.ts"),
        ("@transcript-sync/client/render", "render.d.ts"),
        ("@transcript-sync/client/ui-stream", "ui_stream.d.ts"),
        ("@transcript-sync/client/ai-chat", "ai_chat.d.ts"),
        ("@transcript-sync/client/ai-chat/react", "ai_chat_react.d.ts"),
    ],
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
    text = (npm.INSTALLED / declarations).read_text()
    declared = set(re.findall(r"^export (?:const|function|class) (\w+)", text, re.M))
    for names in re.findall(r"^export \{([^}]*)\} from", text, re.M):  # re-exported values
        declared |= {name.strip() for name in names.split(",")}
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


def readme_examples() -> dict[str, str]:
    """The TypeScript examples of client_js/README.md (its ```ts and ```tsx
    blocks), each named after the README line it starts on."""
    text = (npm.PACKAGE / "README.md").read_text()
    examples = {}
    for match in re.finditer(r"^```(tsx?)\n(.*?)^```", text, re.M | re.S):
        line = text.count("\n", 0, match.start()) + 2
        examples[f"readme-line-{line}.{match[1]}"] = match[2]
    return examples


def test_every_typescript_example_of_the_readme_type_checks_strictly(installed: Path) -> None:
    text = (npm.PACKAGE / "README.md").read_text()
    # The React component is TSX, checked like the rest: as JSX it escaped the
    # check and had four implicit anys. No example is JSX, which no check sees.
    assert re.search(r"## React\n.*?```tsx\n.*?export function LiveTranscript", text, re.S)
    assert not re.search(r"^```jsx\b", text, re.M)
    examples = readme_examples()
    assert len(examples) >= 2, examples
    # Inside the test project, as in a user's: its node_modules holds the packed
    # package, React's types and tsc.
    with tempfile.TemporaryDirectory(prefix=".readme-", dir=npm.PROJECT) as name:
        folder = Path(name)
        (folder / ".gitignore").write_text("*\n")
        for file, code in examples.items():
            (folder / file).write_text(code)
        tsconfig = {
            "extends": "../tsconfig.json",
            "compilerOptions": {"jsx": "react-jsx", "types": ["node"]},
            "files": sorted(examples),
        }
        (folder / "tsconfig.json").write_text(json.dumps(tsconfig))
        tsc = npm.PROJECT / "node_modules" / ".bin" / "tsc"
        result = subprocess.run(
            [str(tsc), "-p", "tsconfig.json"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["client.js", "render.js", "ui_stream.js", *sorted(MODULES)])
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


async def test_the_package_takes_the_server_url_as_the_python_client_does(installed: Path) -> None:
    """Every form of the server's URL the Python client takes reaches the server
    from Node, over the WebSocket and over the HTTP fallback; a URL it would only
    fail to connect to, over and over, is refused in the constructor."""
    async with running_server() as srv, client_py.connect(srv.url) as writer:
        await writer.create("urls-1", [{"role": "user", "content": "hi"}])
        host = srv.url.removeprefix("http://")
        accepted = [
            srv.url,  # http://127.0.0.1:port: the Python client's, the CLI's and the README's
            srv.url + "/",
            srv.url.replace("http://", "HTTP://"),
            srv.ws_url,
            srv.ws_url + "/",
            f"ws://{host}",
        ]
        refused = [host, f"ftp://{host}", "/v1/ws", f"http://user:pw@{host}"]
        args = ("urls-1", json.dumps(accepted), json.dumps(refused))
        async with node_script("node_urls.mjs", *args, cwd=npm.PROJECT) as run:
            seen = await run.finish()
    for outcome in seen["followed"]:
        assert outcome.get("error") is None, outcome
        assert outcome["wsUrl"] == srv.ws_url, outcome
        assert outcome["httpUrl"] == srv.url, outcome
        assert outcome["via"] == outcome["transport"], outcome
        assert outcome["messages"] == 1, outcome
    assert len(seen["followed"]) == 2 * len(accepted)
    errors = {o["url"]: o["error"] for o in seen["refused"]}
    assert list(errors) == refused
    for url, error in errors.items():
        assert error is not None, f"{url} was taken"
        assert error.startswith("TypeError: url: "), error
        assert "http(s)://host[:port][/base] or ws(s)://host[:port][/base][/v1/ws]" in error
    assert "no user or password" in errors[refused[-1]]
    assert "user:pw" not in errors[refused[-1]]


async def ui_stream(url: str, transcript_id: str, mode: str) -> Any:
    """What tests/js_package/node_ui_stream.mjs saw in ``mode``."""
    async with node_script("node_ui_stream.mjs", url, transcript_id, mode, cwd=npm.PROJECT) as run:
        return await run.finish()


async def test_a_ui_message_stream_of_the_ai_sdk_is_piped_into_a_draft_and_committed(
    installed: Path,
) -> None:
    """client.writeUIMessageStream in Node: the SDK's stream of a reply with
    reasoning, a tool call and text goes in as a draft and commits as the
    very UIMessage the SDK's own readUIMessageStream makes of the chunks."""
    async with running_server() as srv, client_py.connect(srv.url) as setup:
        await setup.create("ui-1", [{"role": "user", "content": "Weather in Paris?"}])
        seen = await ui_stream(srv.url, "ui-1", "finish")
    assert seen["ack"]["transcriptId"] == "ui-1" and seen["ack"]["start"] == 1
    expected = seen["expected"]
    assert expected["id"] == "reply-1"
    assert seen["ours"] == expected
    assert seen["stored"][1] == expected


async def test_a_stop_from_another_connection_ends_the_pipe_with_the_partial_reply_committed(
    installed: Path,
) -> None:
    async with running_server() as srv, client_py.connect(srv.url) as setup:
        await setup.create("ui-2", [{"role": "user", "content": "Talk forever"}])
        seen = await ui_stream(srv.url, "ui-2", "stop")
    result, stop = seen["result"], seen["stopAck"]
    assert result["stopped"] is True and result["transcriptId"] == "ui-2"
    assert result["revision"] == stop["revision"] == 2
    assert seen["cancelled"] is True  # the pipe read no more of the model
    assert seen["writtenAfterStop"] <= 1
    reply = seen["stored"][1]
    assert reply["id"] == "reply-stopped"
    [text] = [p for p in reply["parts"] if p["type"] == "text"]
    assert text["text"].startswith("word word ")
    assert any(d["parts"] for d in seen["drafts"] if d["state"] == "open")  # the reader saw parts
    assert seen["drafts"][-1]["state"] == "final"


@pytest.mark.parametrize("mode", ["error", "abort"])
async def test_an_error_chunk_or_an_abort_cancels_the_draft_with_the_reason(mode: str) -> None:
    async with running_server() as srv, client_py.connect(srv.url) as setup:
        await setup.create("ui-3", [{"role": "user", "content": "hi"}])
        seen = await ui_stream(srv.url, "ui-3", mode)
    reason = "the model failed" if mode == "error" else "the user left"
    assert seen["rejected"] == reason
    assert seen["drafts"][-1]["state"] == "cancelled"  # a reader saw it end with nothing
    assert len(seen["stored"]) == 1
