"""Where hetsplit writes, and how: the one owner of the rule for output files and folders.

- **Checked before any work** (``output_dir``, ``output_file``): an existing file where a folder is
  needed, or a folder (a pipe, a device) where a file is, is refused naming the path and the flag.
- **One writer per output**: each claims its folder (``DIR/.hetsplit-lock``) or file
  (``.NAME.hetsplit-lock`` beside it) with an exclusive create when it is checked, and holds it until the
  command ends; a second command writing there meanwhile is refused naming the first one's process (a
  lock whose process is gone is taken over).
- **Nothing left behind**: a command that fails removes its locks and the folders it created, if they
  are still empty (``release``, called by the CLI when a command ends).
- **Regular files, replaced atomically** (``write_text``, ``write_bytes``, ``replacing``): the bytes go to a
  new file in the same folder (exclusive create, never through a link) that is then renamed over the
  target, so a reader sees the old file or the new one, a link planted at the target is replaced (never
  followed), and a pipe or device at the target is refused (never opened: it could block or swallow).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Iterator, overload

from hetsplit.errors import OutputError

LOCK = ".hetsplit-lock"
_held: list[Path] = []          # locks this process took
_created: list[Path] = []       # folders this process created (outermost first)


@overload
def output_dir(path: str | Path, flag: str = "--out") -> Path: ...
@overload
def output_dir(path: None, flag: str = "--out") -> None: ...
def output_dir(path: str | Path | None, flag: str = "--out") -> Path | None:
    """The folder ``path`` (given with ``flag``), created if missing and claimed for this command; None
    for None. OutputError if it cannot be one or another command writes into it."""
    if path is None:
        return None
    p = Path(path)
    _make_folder(p, p, flag)
    _claim(p / LOCK, p, flag)
    return p


@overload
def output_file(path: str | Path, flag: str = "--out") -> Path: ...
@overload
def output_file(path: None, flag: str = "--out") -> None: ...
def output_file(path: str | Path | None, flag: str = "--out") -> Path | None:
    """The file ``path`` to write, its folder created if missing, the file claimed for this command; None
    for None. OutputError if it cannot be a regular file or another command writes it."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{flag} {p}: is a folder; give a file name for the output")
    _check_target(p, flag)
    _make_folder(p.parent, p, flag)
    _claim(p.parent / f".{p.name}{LOCK}", p, flag)
    return p


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see the module's docstring); returns the path."""
    return write_bytes(path, text.encode(encoding))


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module's docstring); returns the path."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return Path(path)


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A new empty file beside ``path`` (same suffix: writers that infer the format from it work) for the
    caller to write; renamed over ``path`` when the block ends, removed if it fails."""
    path = Path(path)
    _check_target(path, "output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}{path.suffix}"
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({exc.strerror or exc})") from None
    try:
        yield tmp
        _check_target(path, "output")
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)


def release(failed: bool) -> None:
    """End of a command: drop its locks; if it ``failed``, also remove the folders it created that are
    still empty (innermost first)."""
    while _held:
        _held.pop().unlink(missing_ok=True)
    created, _created[:] = list(_created), []
    if failed:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _check_target(path: Path, flag: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot be written ({exc.strerror or exc})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = "a folder" if stat.S_ISDIR(mode) else "a named pipe, socket or device"
        raise OutputError(f"{flag} {path}: is {kind}, not a regular file; hetsplit writes only regular files: "
                          "give another path")


def _claim(lock: Path, named: Path, flag: str) -> None:
    if lock in _held:
        return
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            owner = _owner(lock)
            if owner is not None:
                raise OutputError(f"{flag} {named}: another hetsplit command (process {owner}) is writing there; "
                                  f"wait for it to end or give another path (a lock {lock} left by a process "
                                  "that is gone is taken over)") from None
            lock.unlink(missing_ok=True)        # its process is gone: take it over
            continue
        except OSError as exc:
            raise OutputError(f"{flag} {named}: cannot write in {lock.parent} ({exc.strerror or exc}); give a "
                              "writable path") from None
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        _held.append(lock)
        return
    raise OutputError(f"{flag} {named}: cannot take the lock {lock}; give another path")


def _owner(lock: Path) -> int | None:
    """The live process (other than this one) holding ``lock``; None if it is gone or the lock is not one
    of ours (then it is taken over)."""
    try:
        if lock.is_symlink() or not lock.is_file():
            return None
        pid = int(lock.read_text()[:20].strip())
    except (OSError, ValueError):
        return None
    if pid <= 0 or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:             # alive, another user's
        pass
    return pid


def _make_folder(folder: Path, named: Path, flag: str) -> None:
    """Create ``folder`` (and its parents; remembered for ``release``) and check it is writable; ``named``
    is the path the user gave with ``flag``."""
    blocker = next((a for a in (folder, *folder.parents) if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"{flag} {named}: {blocker} is an existing file, not a folder; give another path")
    missing = [a for a in (folder, *folder.parents) if not a.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{flag} {named}: cannot create the folder {folder} ({exc.strerror or exc}); "
                          "give a writable path") from None
    _created.extend(a for a in reversed(missing) if a not in _created)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {named}: cannot write in {folder} (permission denied); give a writable path")
