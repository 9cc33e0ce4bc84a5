"""Names of link emulation's network namespaces, and removal of those a killed run left behind.

Every namespace ``runtime.netem`` creates is named ``hetsplit-<pid>-<tag>-<what>``: ``pid`` is the
process that created it (the one running the run, which deletes it on exit), ``tag`` a few hex
digits per run, ``what`` ``r<rank>`` (a worker's namespace) or ``probe``. A run killed with SIGKILL
cannot delete its namespaces; since the name carries the owner, a later run (or ``hetsplit
doctor``) recognises them as stale -- owner no longer alive -- and removes them. A namespace whose
name does not parse this way, or whose owner is alive, is never touched (a reused pid keeps a stale
set until that process ends too: it errs on the side of leaving things alone).

Veth pairs cannot outlive their namespaces: both ends are created directly inside the workers'
namespaces (never in the host's), and deleting a namespace destroys its veths and qdiscs. A
namespace lives on unnamed, though, while a process is still inside it: a killed run's workers run in
their own sessions and survive it, so removal first kills the processes inside the stale namespace
(they can only be that run's orphaned workers), then deletes the name.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

PREFIX = "hetsplit-"
_NAME = re.compile(r"^hetsplit-(?P<pid>[1-9]\d{0,9})-(?P<tag>[0-9a-f]{3,12})-(?P<what>r\d{1,4}|probe)$")
log = logging.getLogger(__name__)


def namespace_name(tag: str, what: str, pid: int | None = None) -> str:
    """The name of a namespace of run ``tag`` owned by ``pid`` (default: this process)."""
    name = f"{PREFIX}{os.getpid() if pid is None else int(pid)}-{tag}-{what}"
    if not _NAME.match(name):
        raise ValueError(f"not a valid hetsplit namespace name: {name!r} (tag: 3-12 hex digits, "
                         "what: r<rank> or probe)")
    return name


def owner_of(name: str) -> int | None:
    """The pid that owns hetsplit namespace ``name``; None when ``name`` is not one of hetsplit's."""
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


def list_namespaces() -> list[str]:
    """Every named network namespace here (``ip netns list``); empty without ``ip``."""
    if shutil.which("ip") is None:
        return []
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return []
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]   # "name (id: 3)"


def stale_namespaces(names: list[str] | None = None) -> list[str]:
    """The hetsplit namespaces (of ``names``, default all here) whose owner is no longer alive."""
    names = list_namespaces() if names is None else names
    return [n for n in names if (pid := owner_of(n)) is not None and not owner_alive(pid)]


def _pids_in(name: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split() if p.isdigit()] if r.returncode == 0 else []


@dataclass
class Cleanup:
    """What ``clean_stale`` found and did: stale namespaces removed (or, dry run, to remove), the
    orphaned processes killed in them, and those that could not be removed with the reason."""

    stale: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    killed: dict[str, list[int]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False

    def summary(self) -> str:
        """One line naming what was removed (empty when nothing was)."""
        if not self.removed:
            return ""
        k = sum(len(v) for v in self.killed.values())
        procs = f", killed {k} orphaned process{'es' if k != 1 else ''} in them" if k else ""
        return (f"removed {len(self.removed)} stale network namespace{'s' if len(self.removed) != 1 else ''} "
                f"left by killed hetsplit runs: {', '.join(self.removed)}{procs}")


def clean_stale(dry_run: bool = False) -> Cleanup:
    """Find the stale hetsplit namespaces and (unless ``dry_run``) remove them."""
    out = Cleanup(stale=stale_namespaces(), dry_run=dry_run)
    if dry_run:
        return out
    for name in out.stale:
        if owner_alive(owner_of(name)):   # checked again: never remove a set whose owner (re)appeared
            continue
        pids = _pids_in(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError as exc:
                out.failed[name] = f"cannot kill process {pid} inside it ({exc.strerror})"
        if name in out.failed:
            continue
        if pids:
            out.killed[name] = pids
        r = subprocess.run(["ip", "netns", "del", name], capture_output=True, text=True)
        if r.returncode == 0:
            out.removed.append(name)
        elif name in list_namespaces():   # else another cleaner removed it first
            out.failed[name] = r.stderr.strip() or f"`ip netns del {name}` exited with {r.returncode}"
    return out


def remove_stale_namespaces() -> list[str]:
    """Remove the namespaces left by hetsplit runs whose process is gone; the names removed.

    Logs one line naming them (a warning, so it shows on stderr without logging set up)."""
    result = clean_stale()
    if result.removed:
        log.warning(result.summary())
    for name, why in result.failed.items():
        log.warning("could not remove stale network namespace %s: %s", name, why)
    return result.removed
