"""The browser side: the JavaScript client and the live chat page.

- ``/v1/client.js``: the dependency-free JavaScript client, the entry of its ES modules,
  and beside it the modules it imports by relative paths (``/v1/wire.js``,
  ``/v1/consumer.js``, ...: ``CLIENT_MODULES``), which a browser resolves there; among them
  ``/v1/render.js``, the npm package's renderer (``@transcript-sync/client/render``), which
  the page uses with its vendored libraries. Each is ``server/static/client/<name>``, a
  symlink into ``client_js/`` in a checkout (the files of the npm package, served as they
  are, no build step), and so served here: ``/static`` serves no file from outside its
  folder.
- ``/``: the transcript list and a form to create one.
- ``/t/{transcript_id}``: one transcript, live.
- ``/static/...``: the page's modules (``app.js``, ``timeline.js``, ``messages.js``), its
  style sheet and the vendored libraries it uses (``static/vendor/``: marked, DOMPurify,
  highlight.js, KaTeX; see its README).

The pages are static files: the script reads the transcript id from the path
and the token from the fragment (``#token=``, which no request line carries)
or the tab's ``sessionStorage``, and talks to the HTTP API and ``/v1/ws`` like
any other client. These paths need no credentials; the API calls the page
makes carry the token.

The Content-Security-Policy allows scripts and styles from this origin only (no
inline script, no inline style attribute, no eval): message text is sanitized
before it reaches the DOM, and this policy is the second wall behind that.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC: Final = Path(__file__).resolve().parents[1] / "static"


def page_headers(remote_images: bool) -> dict[str, str]:
    """The page's headers: it loads only its own script, style and API; images
    come from the page itself (``data:``, ``blob:``: attachments and uploaded
    images) and, only with ``page_remote_images``, from anywhere, so that by
    default a message cannot make its readers' browsers call its author's
    server."""
    images = "'self' data: blob:" + (" https: http:" if remote_images else "")
    return {
        "Content-Security-Policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; font-src 'self'; "
            "connect-src 'self'; "
            f"img-src {images}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


#: The JavaScript client's ES modules (``client_js/``), each served at ``/v1/<name>``:
#: ``client.js``, the package's entry, and every module it, ``render.js`` or
#: ``ui_stream.js`` imports (tests/browser/test_pages.py holds the list to the imports).
CLIENT_MODULES: Final = (
    "client.js",
    "connection.js",
    "consumer.js",
    "continuity.js",
    "copy.js",
    "digest.js",
    "drafts.js",
    "events.js",
    "fallback.js",
    "render.js",
    "store.js",
    "ui_stream.js",
    "ui_writer.js",
    "wire.js",
)


async def client_module(request: Request) -> Response:
    """One of the client's modules (``CLIENT_MODULES``), as an ES module; 404 for another name."""
    name = f"{request.path_params['module']}.js"
    if name not in CLIENT_MODULES:
        raise HTTPException(status_code=404)
    return FileResponse(
        STATIC / "client" / name,
        media_type="text/javascript; charset=utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


async def page(request: Request) -> Response:
    """The chat page; its script decides from the path what to show, and
    reads from ``<html data-remote-images>`` whether to show remote images."""
    remote = bool(request.app.state.config.page_remote_images)
    return Response(
        _page_html(remote), media_type="text/html; charset=utf-8", headers=page_headers(remote)
    )


@functools.lru_cache(maxsize=2)
def _page_html(remote_images: bool) -> str:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    flag = "on" if remote_images else "off"
    return html.replace("<html ", f'<html data-remote-images="{flag}" ', 1)


routes: list[BaseRoute] = [
    Route("/v1/{module}.js", client_module, methods=["GET", "HEAD"]),
    Route("/", page, methods=["GET", "HEAD"]),
    Route("/t/{transcript_id}", page, methods=["GET", "HEAD"]),
    Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
]
