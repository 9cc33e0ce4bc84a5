"""Entry point of the ``hetsplit`` command.

Every module ``hetsplit.cli.cmd_<name>`` defines ``register(subparsers)``, which adds its
subcommand and sets ``func`` (args -> exit code) as the parser default; this file discovers them,
so a new command is one new module. Errors derived from HetsplitError print their message and exit 2
(the traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import threading
import traceback

import hetsplit.cli as cli_pkg
from hetsplit import __version__
from hetsplit.errors import HetsplitError

EPILOG = """examples:
  hetsplit demo
  hetsplit inspect resnet50
  hetsplit plan resnet152 --cluster donna-2cpu-1gpu-1cim-hb-wcc --out out/
  hetsplit clusters
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hetsplit", description="Plan, predict and run one neural network split across heterogeneous devices.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hetsplit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(cli_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"hetsplit.cli.{info.name}").register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every ``finally`` (workers, cgroups, namespaces) still runs."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except HetsplitError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"hetsplit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
