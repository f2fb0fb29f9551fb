"""The ASGI entry module: what ``uvicorn``, ``hypercorn`` and ``gunicorn`` import.

::

    uvicorn server.app:app                       # the app, configured from TSYNC_*
    uvicorn --factory server.app:create_app      # the same, built by the server
    hypercorn server.app:app
    gunicorn -k uvicorn_worker.UvicornWorker server.app:app

``app`` is built when this module is imported, from the same ``TSYNC_*``
variables as ``tsync serve``; a bad one is one line on stderr and exit
status 2 before anything is opened. Code that builds its own app imports
``create_app`` from ``server.web.application`` (importing this module builds one).
"""

from __future__ import annotations

from server.web.application import TsyncApp, create_app

__all__ = ["TsyncApp", "app", "create_app"]

app: TsyncApp = create_app()
