"""``tsync``: the command line.

``tsync serve`` runs the server; the client commands (``tail``, ``append``,
``get``, ``list``, ``create``, ``delete``, ``segment``, ``import``,
``export``) are registered by ``client_py.cli``, and ``bench`` by
``client_py.bench.cli``, whose own dependencies (the ``bench`` extra) are
imported only when it runs. Bad usage exits with 2 and one line on stderr
that ends with where to look (``see 'tsync serve --help'``); a server that
says no exits with 1; Ctrl-C with 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from server import package_version
from server.config import FIELDS, ConfigError, ServerConfig, env_name, load_config

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: The settings with a flag of their own; every other one is ``--set NAME=VALUE``.
FLAGS = {
    "host": "--host",
    "port": "--port",
    "store": "--store",
    "token": "--token",
    "log_level": "--log-level",
    "log_format": "--log-format",
}


class _Parser(argparse.ArgumentParser):
    """Errors are one line that ends with where to read more."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


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


def _default(name: str) -> str:
    value = FIELDS[name].default
    return (
        "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _flag_help(name: str, text: str) -> str:
    return f"{text} (default {_default(name)}; env {env_name(name)})"


def _settings_epilog() -> str:
    others = [name for name in FIELDS if name not in FLAGS]
    width = max(len(n) for n in others)
    lines = [f"  {name.ljust(width)}  {_default(name)}" for name in others]
    return (
        "other settings (--set NAME=VALUE or env TSYNC_<NAME>; defaults shown;\n"
        "every one is explained in docs/configuration.md):\n" + "\n".join(lines) + "\n\n"
        "precedence: a flag or --set, then TSYNC_<NAME>, then the default."
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tsync", description="transcript-sync: real-time sync of LLM transcripts")
    parser.add_argument("--version", action="version", version=f"tsync {package_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    commands.required = True

    serve = commands.add_parser(
        "serve",
        help="run the server",
        description="Run the server on http://HOST:PORT (WebSocket at /v1/ws, the chat page "
        "at /). Every setting also reads TSYNC_<NAME> from the environment.",
        epilog=_settings_epilog(),
    )
    serve.add_argument("--host", help=_flag_help("host", "address to bind"))
    serve.add_argument("--port", help=_flag_help("port", "port to bind, 0 for any free one"))
    serve.add_argument(
        "--store",
        help=_flag_help("store", "where data goes: sqlite:PATH, memory, or redis://host:port/db"),
    )
    serve.add_argument(
        "--token", help=_flag_help("token", "require this bearer token from every client")
    )
    serve.add_argument(
        "--log-level",
        metavar="{debug,info,warning,error}",
        help=_flag_help("log_level", "least severe log level written"),
    )
    serve.add_argument(
        "--log-format", metavar="{text,json}", help=_flag_help("log_format", "log line format")
    )
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other setting, e.g. --set queue_max_frames=5000 (listed below)",
    )
    serve.set_defaults(func=_serve)

    from client_py import cli as client_cli

    client_cli.register(commands)
    _register_bench(commands)
    return parser


def _register_bench(commands: Any) -> None:
    """``tsync bench``; its parser is plain data, its dependencies (the
    ``bench`` extra) are imported when it runs."""
    from client_py.bench import cli as bench_cli

    bench_cli.register(commands)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from ``tsync serve``'s flags over ``TSYNC_*``."""
    overrides: dict[str, Any] = {name: getattr(args, name) for name in FLAGS}
    given_as = dict(FLAGS)
    for item in args.set:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        given_as[name] = f"--set {name}"
        overrides[name] = value
    return load_config(None, overrides, given_as=given_as)


def _serve(args: argparse.Namespace) -> int:
    from server import serve

    hint = "(see 'tsync serve --help')"
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"tsync serve: {exc} {hint}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return serve.run(config)
    except KeyboardInterrupt:
        # uvicorn shut down gracefully, then raised SIGINT again.
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's parser, so that the hint names the command
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    code: int = args.func(args)
    return code


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


if __name__ == "__main__":
    sys.exit(main())
