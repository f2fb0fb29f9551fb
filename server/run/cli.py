"""``tsync``: the command line.

``tsync serve`` runs the server, ``tsync token`` mints a development token;
the client commands (``tail``, ``append``,
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
    "jwt_secret": "--jwt-secret",
    "jwt_key": "--jwt-key",
    "allowed_origins": "--allowed-origins",
    "allowed_hosts": "--allowed-hosts",
    "cors_origins": "--cors-origins",
    "page_remote_images": "--page-remote-images",
    "log_level": "--log-level",
    "log_format": "--log-format",
    "workers": "--workers",
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
        "precedence: a flag or --set, then TSYNC_<NAME>, then the default; a setting\n"
        "given both as a flag and with --set (or twice with --set) is an error.\n"
        "sizes take units (--set max_frame_bytes=4MiB: KiB, MiB, GiB, KB, MB, GB),\n"
        "durations too (--set idle_ttl_s=5m: ms, s, m, h)."
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
    for name, metavar, text in (
        ("host", "ADDRESS", "address to bind"),
        ("port", "PORT", "port to bind, 0 for any free one"),
        ("store", "URL", "where data goes: sqlite:PATH, memory, or redis://host:port/db"),
        ("token", "SECRET", "a static admin token clients may send"),
        ("jwt_secret", "SECRET", "accept HS256 JWTs signed with this (32+ bytes)"),
        ("jwt_key", "FILE", "accept RS256/ES256 JWTs: a PEM public key or JWKS file"),
        ("allowed_origins", "LIST", "web origins whose pages may connect, comma-separated"),
        ("allowed_hosts", "LIST", "Host names requests may name, comma-separated"),
        ("cors_origins", "LIST", "web origins allowed to call the HTTP API (CORS)"),
        ("page_remote_images", None, "let the chat page load images from anywhere"),
        ("log_level", "{debug,info,warning,error}", "least severe log level written"),
        ("log_format", "{text,json}", "log line format"),
        ("workers", "N", "processes serving the port, each a replica (needs redis)"),
    ):
        # No metavar: a switch, given or not.
        takes: dict[str, Any] = (
            {"metavar": metavar} if metavar else {"action": "store_const", "const": True}
        )
        serve.add_argument(FLAGS[name], help=_flag_help(name, text), **takes)
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other setting, e.g. --set queue_max_frames=5000 (listed below)",
    )
    serve.set_defaults(func=_serve)

    _register_token(commands)

    from client_py import cli as client_cli

    client_cli.register(commands)
    _register_bench(commands)
    return parser


def _register_bench(commands: Any) -> None:
    """``tsync bench``; its parser is plain data, its dependencies (the
    ``bench`` extra) are imported when it runs."""
    from client_py.bench import cli as bench_cli

    bench_cli.register(commands)


def _register_token(commands: Any) -> None:
    token = commands.add_parser(
        "token",
        help="mint a development token (HS256, signed with the server's jwt_secret)",
        description="Print a JWT for the given rights, signed with jwt_secret (--jwt-secret "
        "or TSYNC_JWT_SECRET, as the server reads it; jwt_audience is put into its aud). "
        "Patterns: * is any run of characters, ? one character.",
        epilog="example: tsync token --sub alice --read 'chat-*' --write chat-1 --ttl 1h",
    )
    token.add_argument("--sub", required=True, help="who the token names")
    token.add_argument(
        "--read", action="append", default=[], metavar="PATTERN", help="ids it may read"
    )
    token.add_argument(
        "--write", action="append", default=[], metavar="PATTERN", help="ids it may write"
    )
    token.add_argument("--admin", action="store_true", help="create, delete, list everything")
    token.add_argument(
        "--ttl", default="1h", help="how long it is valid: 90s, 15m, 1h, 7d (default 1h)"
    )
    token.add_argument("--jwt-secret", metavar="SECRET", help="the secret (default: env)")
    token.set_defaults(func=_token)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> float:
    """``90s``, ``15m``, ``1h``, ``7d`` or plain seconds -> seconds (> 0)."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:])
    number = text[:-1] if unit else text
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise ValueError(f"--ttl {text!r}: expected e.g. 90s, 15m, 1h or 7d") from None
    if not seconds > 0:
        raise ValueError(f"--ttl {text!r}: must be more than 0")
    return seconds


def _token(args: argparse.Namespace) -> int:
    from server.auth import Authenticator

    hint = "(see 'tsync token --help')"
    try:
        ttl = parse_ttl(args.ttl)
        config = load_config(
            None,
            {"jwt_secret": args.jwt_secret},
            given_as={"jwt_secret": "--jwt-secret"},
            check_store=False,
        )
        print(
            Authenticator(config).mint(
                sub=args.sub, ttl_s=ttl, read=args.read, write=args.write, admin=args.admin
            )
        )
    except (ValueError, ConfigError) as exc:
        print(f"tsync token: {exc} {hint}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from ``tsync serve``'s flags over ``TSYNC_*``."""
    overrides: dict[str, Any] = {name: getattr(args, name) for name in FLAGS}
    given_as = dict(FLAGS)
    said = {
        name: f"{flag}" if overrides[name] is True else f"{flag} {overrides[name]}"
        for name, flag in FLAGS.items()
        if overrides[name] is not None
    }
    for item in args.set:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        if name in said:
            # Which one wins would be a guess: a flag, a --set, or the last.
            raise ConfigError(
                f"{said[name]} and --set {name}={value} both set {name}: give it once", name
            )
        said[name] = f"--set {name}={value}"
        given_as[name] = f"--set {name}"
        overrides[name] = value
    return load_config(None, overrides, given_as=given_as)


def serve_synopsis(width: int = 100) -> str:
    """``tsync serve [--host HOST] ...``: every flag of ``FLAGS``, as the
    README's synopsis prints it (``server.run.config_docs`` writes it there)."""
    parser = _command_parser(build_parser(), "serve")
    words = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag = action.option_strings[0]
        if action.nargs == 0:
            words.append(f"[{flag}]")
        elif action.dest == "set":
            words.append(f"[{flag} {action.metavar} ...]")
        else:
            words.append(f"[{flag} {action.metavar or action.dest.upper()}]")
    lines, line = [], "tsync serve"
    for word in words:
        if len(line) + 1 + len(word) > width:
            lines.append(line)
            line = " " * len("tsync serve")
        line += " " + word
    return "\n".join([*lines, line])


def _serve(args: argparse.Namespace) -> int:
    from server.run import serve

    hint = "(see 'tsync serve --help')"
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"tsync serve: {exc} {hint}", file=sys.stderr)
        return EXIT_USAGE
    if config.workers > 1:
        from server.run import supervisor

        return supervisor.run(config)
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
