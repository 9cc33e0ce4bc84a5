"""Output paths checked before any work: a folder to create or a file to write, with errors naming the path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import overload

from hetsplit.errors import OutputError


@overload
def output_dir(path: str | Path, flag: str = "--out") -> Path: ...
@overload
def output_dir(path: None, flag: str = "--out") -> None: ...
def output_dir(path: str | Path | None, flag: str = "--out") -> Path | None:
    """The folder ``path`` (given with ``flag``), created if missing; None for None. OutputError if it
    cannot be one."""
    if path is None:
        return None
    p = Path(path)
    _make_folder(p, p, flag)
    return p


@overload
def output_file(path: str | Path) -> Path: ...
@overload
def output_file(path: None) -> None: ...
def output_file(path: str | Path | None) -> Path | None:
    """The file ``path`` to write, its folder created if missing; None for None. OutputError if it cannot be."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"--out {p}: is a folder; give a file name for the output")
    _make_folder(p.parent, p, "--out")
    return p


def _make_folder(folder: Path, named: Path, flag: str) -> None:
    """Create ``folder`` (and its parents) and check it is writable; ``named`` is the path the user
    gave with ``flag``."""
    blocker = next((a for a in (folder, *folder.parents) if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"{flag} {named}: {blocker} is an existing file, not a folder; give another path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{flag} {named}: cannot create the folder {folder} ({exc.strerror or exc}); "
                          "give a writable path") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {named}: cannot write in {folder} (permission denied); give a writable path")
