"""A joined worker's scratch folder (the sub-models it fetched, its ranks' logs), named for its owner
(``runtime.owned``: ``hetsplit-<pid>-<tag>-worker`` in the temporary directory) so that the folder of a
worker killed with SIGKILL, which cannot remove it, is removed by the next worker or run on the machine.

Only a real folder (not a link) of this user whose owner is gone is removed; anything else is left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from hetsplit.runtime.owned import PREFIX, Cleanup, owned_name, stale_names

WHAT = "worker"
log = logging.getLogger(__name__)


@contextlib.contextmanager
def worker_scratch(root: Path | None = None) -> Iterator[Path]:
    """A new scratch folder owned by this process (mode 0700), removed on exit; stale ones removed first."""
    base = Path(root or tempfile.gettempdir())
    remove_stale_scratch(base)
    path = base / owned_name(uuid.uuid4().hex[:6], WHAT)
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def clean_stale_scratch(root: Path | None = None, dry_run: bool = False) -> Cleanup:
    """The scratch folders under ``root`` (default: the temporary directory) of workers that are gone:
    removed (``dry_run``: only listed). Only real folders of this user count; anything else is left alone."""
    base = Path(root or tempfile.gettempdir())
    result = Cleanup(dry_run=dry_run, kind="worker scratch folder")
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX) and n.endswith(f"-{WHAT}")]
    except OSError:
        return result
    for name in stale_names(names):
        path = base / name
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        result.stale.append(name)
        if dry_run:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            result.failed[name] = "could not remove every file in it"
        else:
            result.removed.append(name)
    return result


def remove_stale_scratch(root: Path | None = None) -> list[str]:
    """Remove the scratch folders of workers that are gone (``clean_stale_scratch``); the names removed
    (logged as one warning)."""
    result = clean_stale_scratch(root)
    if result.removed:
        log.warning(result.summary())
    return result.removed
