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
import shutil
import subprocess

from hetsplit.runtime.owned import PREFIX, Cleanup, kill_all, owned_name, owner_alive, owner_of, stale_names

__all__ = ["PREFIX", "Cleanup", "clean_stale", "list_namespaces", "namespace_name", "owner_alive", "owner_of",
           "remove_stale_namespaces", "stale_namespaces"]
log = logging.getLogger(__name__)


def namespace_name(tag: str, what: str, pid: int | None = None) -> str:
    """The name of a namespace of run ``tag`` owned by ``pid`` (default: this process)."""
    return owned_name(tag, what, pid)


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
    return stale_names(list_namespaces() if names is None else names)


def _pids_in(name: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split() if p.isdigit()] if r.returncode == 0 else []


def clean_stale(dry_run: bool = False) -> Cleanup:
    """Find the stale hetsplit namespaces and (unless ``dry_run``) remove them."""
    out = Cleanup(stale=stale_namespaces(), dry_run=dry_run)
    if dry_run:
        return out
    for name in out.stale:
        pid = owner_of(name)
        if pid is None or owner_alive(pid):   # checked again: never remove a set whose owner (re)appeared
            continue
        pids = _pids_in(name)
        if why := kill_all(pids):
            out.failed[name] = why
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
