"""Entry point of the ``hetsplit`` command.

Every module ``hetsplit.cli.cmd_<name>`` defines ``register(subparsers)``, which adds the subcommand
``<name>`` and sets ``func`` (args -> exit code) as the parser default; this file discovers them,
so a new command is one new module. A command line imports only the command it names: the others are
listed with the one-line help of their ``add_command`` call, read from their source, so ``hetsplit run``
does not pay for the search package. Errors derived from HetsplitError print their message and exit 2
(the traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import pkgutil
import signal
import sys
import textwrap
import threading
import traceback

import hetsplit.cli as cli_pkg
from collections.abc import Sequence

from hetsplit import __version__
from hetsplit.errors import HetsplitError

EPILOG = """examples:
  hetsplit demo
  hetsplit inspect resnet50
  hetsplit plan resnet152 --cluster donna-2cpu-1gpu-1cim-hb-wcc --out out/
  hetsplit clusters
"""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``hetsplit`` parser. Without ``argv`` every command is registered in full; with it, only the
    command ``argv`` names is, and the others only by name and one-line help (what ``--help`` lists)."""
    parser = argparse.ArgumentParser(
        prog="hetsplit", description="Plan, predict and run one neural network split across heterogeneous devices.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hetsplit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = command_modules()
    named = None if argv is None else next((a for a in argv if not a.startswith("-")), None)
    for name, module in commands.items():
        summary = None if argv is None or name == named else _summary(module, name)
        if summary is None:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=summary)
    return parser


def command_modules() -> dict[str, str]:
    """Command name -> its module, for every ``hetsplit.cli.cmd_<name>``, sorted by name."""
    names = sorted(m.name for m in pkgutil.iter_modules(cli_pkg.__path__) if m.name.startswith("cmd_"))
    return {n.removeprefix("cmd_"): f"{cli_pkg.__name__}.{n}" for n in names}


@functools.lru_cache(maxsize=None)
def _summary(module: str, name: str) -> str | None:
    """The help of the ``add_command(sub, name, help, ...)`` call in ``module``'s source, without importing
    it; None when the source does not spell both as literals (then the module is imported instead). Only
    that call's statement is parsed (the fewest lines from its first that parse), once per process."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    at = source.find("add_command(")
    if at < 0:
        return None
    lines = source[source.rfind("\n", 0, at) + 1:].splitlines()
    for n in range(1, min(len(lines), 40) + 1):
        try:
            tree = ast.parse(textwrap.dedent("\n".join(lines[:n])))
            break
        except SyntaxError:
            continue
    else:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "add_command"
                and len(node.args) >= 3):
            command, target = node.args[1], node.args[2]
            if isinstance(command, ast.Constant) and isinstance(target, ast.Constant) and command.value == name \
                    and isinstance(target.value, str):
                return target.value
    return None


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
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from hetsplit import outpath

    failed = True
    try:
        code = int(args.func(args) or 0)
        failed = code != 0
        return code
    except HetsplitError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"hetsplit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        outpath.release(failed)        # its output locks; on failure the empty folders it created


if __name__ == "__main__":
    sys.exit(main())
