"""HTTP endpoints backed by ``protocol.lmml``: import, export and chat rendering."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from server.http_api import Problem


async def import_transcript(request: Request) -> Response:
    raise Problem(501, "not-implemented", "LMML import is not available yet")


async def chat(request: Request) -> Response:
    raise Problem(501, "not-implemented", "chat rendering is not available yet")


async def export_lmml(request: Request) -> Response:
    raise Problem(501, "not-implemented", "LMML export is not available yet")


async def export_lmmlz(request: Request) -> Response:
    raise Problem(501, "not-implemented", "LMML export is not available yet")
