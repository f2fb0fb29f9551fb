"""The client commands of ``tsync``: tail, append, stream, get, list, create,
delete, segment, views, view, usage, import, export, verify.

``server.run.cli`` calls ``register(subparsers)``. Every command takes ``--url``
(default ``$TSYNC_URL`` or http://127.0.0.1:8765) and ``--token``
(default ``$TSYNC_TOKEN``). Errors are one line on stderr; the exit code is 2
for bad usage (the line ends with ``see 'tsync COMMAND --help'``), 1 when the
server says no or cannot be reached, 130 after Ctrl-C. ``verify`` answers
0 (the copy's digest is the server's), 1 (it is not) or 2 (it could not tell:
bad usage, a server that says no or cannot be reached).

The package: ``parser`` (the commands' arguments and help texts),
``commands`` (what each command does, and how it fails), ``render`` (how
they print).
"""

from __future__ import annotations

from client_py.cli.parser import register

__all__ = ["register"]
