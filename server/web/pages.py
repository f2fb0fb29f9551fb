"""The browser side: the JavaScript client and the live chat page.

- ``/v1/client.js``: the dependency-free ES module client (``server/static/client.js``).
- ``/v1/render.js``: the npm package's renderer (``@transcript-sync/client/render``,
  ``server/static/render.js``), which the page uses with its vendored libraries. Served
  here, beside ``client.js`` (it imports ``./client.js``), because both are symlinks into
  ``client_js/`` in a checkout, and ``/static`` serves no file from outside its folder.
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


async def client_js(request: Request) -> Response:
    """The JavaScript client, as an ES module."""
    return FileResponse(
        STATIC / "client.js",
        media_type="text/javascript; charset=utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


async def render_js(request: Request) -> Response:
    """The package's renderer (one message as the page shows it), as an ES module."""
    return FileResponse(
        STATIC / "render.js",
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
    Route("/v1/client.js", client_js, methods=["GET", "HEAD"]),
    Route("/v1/render.js", render_js, methods=["GET", "HEAD"]),
    Route("/", page, methods=["GET", "HEAD"]),
    Route("/t/{transcript_id}", page, methods=["GET", "HEAD"]),
    Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
]
