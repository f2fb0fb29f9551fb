"""``tsync``: the command line.

``tsync serve`` runs the server; the client commands (``tail``, ``append``,
``get``, ``create``, ``import``, ``export``, ``bench``) are registered by
``client_py.cli``. Bad usage exits with 2 and one line on stderr; a server
that says no exits with 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import msgspec

from server.config import ServerConfig

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"tsync: {message}\n")


class _CommandParser(_Parser):
    """A command's parser: options and positionals may come in any order
    (``tsync append ID --role user "text"``), which plain ``parse_args`` of
    Python 3.11 refuses once an option stands between two positionals."""

    _mixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._mixing:  # parse_known_intermixed_args calls back into us
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tsync", description="transcript-sync: real-time sync of LLM transcripts")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    commands.required = True

    serve = commands.add_parser(
        "serve",
        help="run the server",
        description="Run the server. Every setting also reads TSYNC_<NAME> from the environment "
        "(e.g. TSYNC_PORT, TSYNC_STORE, TSYNC_QUEUE_MAX_FRAMES); flags win.",
    )
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8765; 0 picks a free one)")
    serve.add_argument(
        "--store",
        help="sqlite:PATH (default sqlite:./data), memory, or redis://host:port/db",
    )
    serve.add_argument("--token", help="require this bearer token from every client")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--log-format", choices=["text", "json"])
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other setting, e.g. --set queue_max_frames=5000 (see docs/configuration.md)",
    )
    serve.set_defaults(func=_serve)

    for module in ("client_py.cli", "client_py.bench.cli"):
        try:
            extra = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise  # a real import error inside the module
            continue
        extra.register(commands)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from server import logs, serve

    overrides: dict[str, object] = {
        "host": args.host,
        "port": args.port,
        "store": args.store,
        "token": args.token,
        "log_level": args.log_level,
        "log_format": args.log_format,
    }
    names = {f.name for f in msgspec.structs.fields(ServerConfig)}
    for item in args.set:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in names:
            print(f"tsync: unknown setting {item!r} (see docs/configuration.md)", file=sys.stderr)
            return EXIT_USAGE
        overrides[name] = value
    try:
        config = ServerConfig.from_env(None, **overrides)
    except ValueError as exc:
        print(f"tsync: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logs.configure(config.log_level, config.log_format)
    try:
        serve.run(config)
    except ValueError as exc:  # e.g. an unknown store URL
        print(f"tsync: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
