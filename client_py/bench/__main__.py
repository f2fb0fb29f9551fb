"""``python -m client_py.bench SCENARIO ...``: the same as ``tsync bench``."""

from __future__ import annotations

import argparse
import sys

from client_py.bench.cli import add_arguments, main_args


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m client_py.bench")
    add_arguments(parser)
    return main_args(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
