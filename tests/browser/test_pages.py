"""The page routes over plain HTTP (no browser): what is served, with which
headers, and that a token-protected server still serves the page and client."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from server.web.pages import CLIENT_MODULES
from tests.support.servers import running_server

PACKAGE = Path(__file__).resolve().parents[2] / "client_js"
# A static import or re-export of a module beside this one: `from "./x.js"`.
RELATIVE_IMPORT = re.compile(r'^(?:import|export)\b[^;]*?\bfrom "\./([\w.-]+)";', re.M | re.S)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_page_the_client_and_the_static_files_are_served_without_a_token() -> None:
    async with running_server(token="s3cret") as srv, httpx.AsyncClient(base_url=srv.url) as http:
        assert (await http.get("/v1/transcripts")).status_code == 401
        for path in ("/", "/t/some-id", "/t/a:b.c_d-e"):
            page = await http.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-type"].startswith("text/html")
            assert '<script type="module" src="/static/app.js">' in page.text
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        client = await http.get("/v1/client.js")
        assert client.status_code == 200
        assert client.headers["content-type"].startswith("text/javascript")
        assert "export class TsyncClient" in client.text
        for path in ("/static/app.js", "/static/style.css"):
            assert (await http.get(path)).status_code == 200, path
        # Every module the page imports is served, as JavaScript (module scripts need the type).
        for path in (
            "/static/timeline.js",
            "/static/messages.js",
            "/v1/render.js",
            "/static/vendor/marked/marked.esm.js",
            "/static/vendor/dompurify/purify.es.mjs",
            "/static/vendor/highlight/core.min.js",
            "/static/vendor/highlight/languages/python.min.js",
            "/static/vendor/katex/katex.min.js",
        ):
            module = await http.get(path)
            assert module.status_code == 200, path
            assert module.headers["content-type"].startswith("text/javascript"), path
        assert (await http.get("/static/nope.js")).status_code == 404
        assert (await http.get("/t/a/b")).status_code != 200


async def served_modules(http: httpx.AsyncClient, entries: list[str]) -> set[str]:
    """The modules served from these entries on, following their relative imports: each
    asserted to be served at /v1/ as the very file of client_js/, as JavaScript."""
    seen: set[str] = set()
    while entries:
        name = entries.pop()
        if name in seen:
            continue
        seen.add(name)
        module = await http.get(f"/v1/{name}")
        assert module.status_code == 200, name
        assert module.headers["content-type"].startswith("text/javascript"), name
        assert module.content == (PACKAGE / name).read_bytes(), name
        entries += RELATIVE_IMPORT.findall(module.text)
    return seen


async def test_every_module_of_the_client_is_served_beside_it_as_the_package_ships_it() -> None:
    """/v1/client.js imports its modules by relative paths (no build step): each one it,
    the renderer or the fold imports, again and again, is served at /v1/ without a token,
    as the very file of client_js/; the server serves those and no other, and they are
    every module the npm package ships that is not an entry of its own."""
    async with running_server(token="s3cret") as srv, httpx.AsyncClient(base_url=srv.url) as http:
        served = await served_modules(http, ["client.js", "render.js", "ui_stream.js"])
        assert (await http.get("/v1/nope.js")).status_code == 404
        # The page asks for what it imports at once, not one level of imports after another.
        page = (await http.get("/")).text
        preloaded = set(re.findall(r'<link rel="modulepreload" href="/v1/([\w.]+)">', page))
        assert preloaded == await served_modules(http, ["client.js", "render.js"])
    assert served == set(CLIENT_MODULES)
    meta = json.loads((PACKAGE / "package.json").read_text("utf-8"))
    shipped = {name for name in meta["files"] if name.endswith(".js")}
    exports = [e for e in meta["exports"].values() if isinstance(e, dict)]  # not package.json
    entries = {e["default"].removeprefix("./") for e in exports}
    assert shipped - entries <= served <= shipped
    assert len(served - entries) > 3  # the modules the entries import
