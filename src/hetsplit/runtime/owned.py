"""Names of things a run creates outside its own processes (network namespaces, cgroups) that carry
their owner, so what a killed run left behind is recognisable, and the record of removing them.

A name is ``hetsplit-<pid>-<tag>-<what>``: ``pid`` the process that created it (the one running the run,
which removes it on exit), ``tag`` 3-12 hex digits per run, ``what`` ``r<rank>``, ``probe`` or ``worker``
(a joined worker's scratch folder, ``runtime.scratch``). It is
stale once its owner is no longer alive. A name that does not parse this way, or whose owner is alive,
is never touched (a reused pid keeps a stale one until that process ends too).
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field

PREFIX = "hetsplit-"
_NAME = re.compile(r"^hetsplit-(?P<pid>[1-9]\d{0,9})-(?P<tag>[0-9a-f]{3,12})-(?P<what>r\d{1,4}|probe|worker)$")


def owned_name(tag: str, what: str, pid: int | None = None) -> str:
    """The name of a thing of run ``tag`` owned by ``pid`` (default: this process)."""
    name = f"{PREFIX}{os.getpid() if pid is None else int(pid)}-{tag}-{what}"
    if not _NAME.match(name):
        raise ValueError(f"not a valid hetsplit name: {name!r} (tag: 3-12 hex digits, what: r<rank>, probe or worker)")
    return name


def owner_of(name: str) -> int | None:
    """The pid that owns ``name``; None when ``name`` is not one of hetsplit's."""
    m = _NAME.match(name)
    return int(m.group("pid")) if m else None


def owner_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user, or a zombie, counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_names(names: list[str]) -> list[str]:
    """The hetsplit names among ``names`` whose owner is no longer alive."""
    return [n for n in names if (pid := owner_of(n)) is not None and not owner_alive(pid)]


def kill_all(pids: list[int]) -> str | None:
    """SIGKILL ``pids`` (orphans of a killed run); None, or why one could not be killed."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            return f"cannot kill process {pid} inside it ({exc.strerror})"
    return None


@dataclass
class Cleanup:
    """What a stale cleanup found and did: stale ``kind`` items removed (or, dry run, to remove), the
    orphaned processes killed in them, and those that could not be removed with the reason."""

    stale: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    killed: dict[str, list[int]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    kind: str = "network namespace"

    def summary(self) -> str:
        """One line naming what was removed (empty when nothing was)."""
        if not self.removed:
            return ""
        k = sum(len(v) for v in self.killed.values())
        procs = f", killed {k} orphaned process{'es' if k != 1 else ''} in them" if k else ""
        return (f"removed {len(self.removed)} stale {self.kind}{'s' if len(self.removed) != 1 else ''} "
                f"left by killed hetsplit runs: {', '.join(self.removed)}{procs}")
