"""Helpers shared by CLI commands: subcommand creation with examples, progress, loading inputs."""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator


def add_command(sub, name: str, help: str, examples: list[str], description: str = "") -> argparse.ArgumentParser:
    """A subcommand whose --help ends with its examples."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help, description=description or help, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


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
