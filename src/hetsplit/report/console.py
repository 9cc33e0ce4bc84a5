"""The terminal console of every command."""

from __future__ import annotations

from rich.console import Console


def wide_console(stderr: bool = False) -> Console:
    """A console that keeps table rows on one line when output goes to a file or a pipe."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=160)
