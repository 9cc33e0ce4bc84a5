"""Helpers shared by CLI commands: subcommand creation with examples, progress, loading inputs."""

from __future__ import annotations

import argparse
import contextlib
from typing import Callable, Iterator


def add_command(sub, name: str, help: str, examples: list[str], description: str = "") -> argparse.ArgumentParser:
    """A subcommand whose --help ends with its examples."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help, description=description or help, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``low..high`` (no upper bound for None); anything else
    is refused by argparse (exit 2) with the allowed range."""
    allowed = f"a whole number {low}..{high}" if high is not None else f"a whole number >= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give {allowed}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range; give {allowed}")
        return value

    parse.__name__ = "whole number"
    return parse


@contextlib.contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while a step runs (shown only on a terminal, after ~1 s it is visible)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def add_input_shape_option(p: argparse.ArgumentParser) -> None:
    """``--input-shape NAME:D0,D1,...`` (repeatable; bare ``D0,D1,...`` for a single-input model)."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...", dest="input_shape",
                   help="fix a model input's symbolic dims (repeatable; a bare D0,D1,... for a single-input "
                        "model), e.g. --input-shape images:1,3,640,640; plans and profiles record it")


def input_shapes(args: argparse.Namespace):
    """The parsed ``--input-shape`` options (``graph.input_shapes.InputShapes``), or None when none given."""
    from hetsplit.graph.input_shapes import parse_input_shapes

    return parse_input_shapes(args.input_shape) if getattr(args, "input_shape", None) else None
