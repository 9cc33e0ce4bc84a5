"""CPU throttling of a run's workers with the cgroup cpu controller (CFS bandwidth), so one machine
rehearses devices slower than its cores (``hetsplit run --emulate-devices``).

Each throttled rank gets a cgroup ``hetsplit-<pid>-<tag>-r<rank>`` (``runtime.owned``: ``pid`` the
process running the run) whose quota is ``share x period`` microseconds of CPU per period, so the
process (every thread of it: onnxruntime's are created inside it) gets at most ``share`` of one
core over time. cgroup v1 (the ``cpu`` hierarchy: ``cpu.cfs_period_us``/``cpu.cfs_quota_us``) and
v2 (``cpu.max``, where the unified hierarchy has the cpu controller) both work; the groups are made
directly under the hierarchy's root. The kernel refuses quotas under 1 ms: a share that small gets
a longer period (quota 1 ms) rather than a wrong share. Each worker moves itself (all its threads)
into its group once it has loaded its sub-model and connected (``join_group``), so startup runs at
full speed and only the streamed inputs are throttled. Needs root: ``throttle_available()`` says
why not.

Groups are removed on exit, after the processes are gone (processes still inside are killed: they
can only be this run's workers). A run killed before that leaves them behind: every run starts by
removing the groups (and namespaces) whose owner is gone (``runtime.leftovers``; so does ``hetsplit doctor``).
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.report import CpuGroup
from hetsplit.runtime.owned import PREFIX, Cleanup, kill_all, owned_name, owner_alive, owner_of, stale_names

PERIOD_US = 10_000
MIN_QUOTA_US = 1_000        # the kernel's minimum quota (and period)
MAX_PERIOD_US = 1_000_000   # the kernel's maximum period
MOUNTS = Path("/proc/self/mounts")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Controller:
    """Where the cpu controller is: the root of its hierarchy and the cgroup version (v1 or v2)."""

    root: Path
    version: str

    def procs(self, name: str) -> Path:
        return self.root / name / "cgroup.procs"

    def set_quota(self, name: str, quota_us: int, period_us: int) -> None:
        """Write a group's CFS bandwidth (v1: period first, so the quota is checked against it)."""
        d = self.root / name
        if self.version == "v2":
            (d / "cpu.max").write_text(f"{quota_us} {period_us}\n")
        else:
            (d / "cpu.cfs_period_us").write_text(f"{period_us}\n")
            (d / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")

    def groups(self) -> list[str]:
        """The names of hetsplit's groups under the root."""
        try:
            return sorted(e.name for e in self.root.iterdir() if e.is_dir() and e.name.startswith(PREFIX))
        except OSError:
            return []

    def pids_in(self, name: str) -> list[int]:
        try:
            return [int(p) for p in self.procs(name).read_text().split() if p.isdigit()]
        except OSError:
            return []


def find_controller(mounts: Path = MOUNTS) -> Controller | str:
    """The cpu controller's hierarchy from the mount table (v1 preferred), else why there is none."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError as exc:
        return f"cannot read {mounts}: {exc.strerror}"
    v2 = []
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        fstype, where, options = parts[2], Path(parts[1]), parts[3].split(",")
        if fstype == "cgroup" and "cpu" in options:
            return Controller(where, "v1")
        if fstype == "cgroup2":
            v2.append(where)
    for where in v2:
        try:
            if "cpu" in (where / "cgroup.controllers").read_text().split():
                return Controller(where, "v2")
        except OSError:
            continue
    return ("no cgroup cpu controller here (neither a cgroup v1 'cpu' hierarchy nor a cgroup v2 hierarchy "
            "listing 'cpu' in cgroup.controllers)")


def _enable_v2(ctl: Controller) -> str | None:
    """Make sure the v2 root hands the cpu controller to its children; None, or why not."""
    ctl_file = ctl.root / "cgroup.subtree_control"
    try:
        if "cpu" in ctl_file.read_text().split():
            return None
        ctl_file.write_text("+cpu\n")
    except OSError as exc:
        return f"cannot enable the cpu controller for child groups in {ctl_file}: {exc.strerror}"
    return None


def throttle_available(controller: Controller | None = None) -> str | None:
    """None when workers can be throttled here, else the reason (not root, no cpu controller, read-only)."""
    if controller is None:
        if os.geteuid() != 0:
            return "CPU throttling (--emulate-devices) needs root (it creates cgroups)"
        found = find_controller()
        if isinstance(found, str):
            return f"CPU throttling (--emulate-devices): {found}"
        controller = found
    if controller.version == "v2" and (why := _enable_v2(controller)):
        return f"CPU throttling (--emulate-devices): {why}"
    probe = owned_name(uuid.uuid4().hex[:6], "probe")
    try:
        (controller.root / probe).mkdir()
    except OSError as exc:
        return (f"CPU throttling (--emulate-devices): cannot create a cgroup under {controller.root}: "
                f"{exc.strerror}")
    try:
        controller.set_quota(probe, MIN_QUOTA_US * 5, PERIOD_US)
    except OSError as exc:
        return f"CPU throttling (--emulate-devices): cannot set a CPU quota under {controller.root}: {exc.strerror}"
    finally:
        _rmdir(controller.root / probe, 0.5)
    return None


def quota_for(share: float, period_us: int = PERIOD_US) -> tuple[int, int]:
    """(quota, period) in microseconds giving ``share`` of one core; a quota under the kernel's 1 ms
    minimum lengthens the period instead (up to 1 s)."""
    if not 0 < share <= 1:
        raise ValueError(f"a CPU share is in (0, 1], not {share}")
    quota = round(share * period_us)
    if quota < MIN_QUOTA_US:
        period_us = min(MAX_PERIOD_US, math.ceil(MIN_QUOTA_US / share))
        quota = max(MIN_QUOTA_US, round(share * period_us))
    return quota, period_us


def _rmdir(path: Path, wait_s: float) -> bool:
    """rmdir a cgroup, retrying for ``wait_s`` (it is busy until its last process is reaped)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)


def remove_group(ctl: Controller, name: str, wait_s: float = 2.0) -> str | None:
    """Remove a group, killing any process still inside it first; None, or why it could not be removed."""
    path = ctl.root / name
    if _rmdir(path, 0.2):
        return None
    if why := kill_all(ctl.pids_in(name)):
        return why
    if _rmdir(path, wait_s):
        return None
    left = ctl.pids_in(name)
    return f"still busy after {wait_s:g} s" + (f" (processes {left} inside)" if left else "")


def clean_stale_groups(dry_run: bool = False, controller: Controller | None = None) -> Cleanup:
    """Find the hetsplit cgroups whose owner is gone and (unless ``dry_run``) remove them; nothing
    to do where there is no cpu controller."""
    ctl = controller if controller is not None else find_controller()
    out = Cleanup(dry_run=dry_run, kind="CPU cgroup")
    if isinstance(ctl, str):
        return out
    out.stale = stale_names(ctl.groups())
    if dry_run:
        return out
    for name in out.stale:
        pid = owner_of(name)
        if pid is not None and owner_alive(pid):   # checked again: never remove a group whose owner (re)appeared
            continue
        pids = ctl.pids_in(name)
        if why := remove_group(ctl, name):
            out.failed[name] = why
            continue
        if pids:
            out.killed[name] = pids
        out.removed.append(name)
    return out


def remove_stale_groups(controller: Controller | None = None) -> list[str]:
    """Remove the groups of hetsplit runs whose process is gone; the names removed (logged as a warning)."""
    result = clean_stale_groups(controller=controller)
    if result.removed:
        log.warning(result.summary())
    for name, why in result.failed.items():
        log.warning("could not remove stale CPU cgroup %s: %s", name, why)
    return result.removed


class CpuThrottle:
    """One cgroup per throttled rank, each at its CPU share of one core, for one run (a context manager).

    ``shares``: rank -> share in (0, 1]; ranks not in it (the driver) are not throttled. ``controller``:
    default the one ``find_controller`` finds (tests give another root)."""

    def __init__(self, shares: dict[int, float], period_us: int = PERIOD_US, controller: Controller | None = None):
        why = throttle_available(controller)
        if why:
            raise RuntimeFailure(why)
        found = controller if controller is not None else find_controller()
        assert isinstance(found, Controller)
        self.controller = found
        self.tag = uuid.uuid4().hex[:5]
        self.period_us = int(period_us)
        self.bandwidth = {int(r): quota_for(float(s), self.period_us) for r, s in shares.items()}
        self.shares = {int(r): float(s) for r, s in shares.items()}
        self.names = {r: owned_name(self.tag, f"r{r}") for r in self.bandwidth}
        self.created: list[str] = []
        self.removed_stale: list[str] = []

    def procs_files(self) -> dict[str, str]:
        """rank -> the cgroup.procs file its worker writes its pid to once connected (``join_group``): the
        worker starts (imports, session load, warm-up, rendezvous) at full speed and is throttled from
        its first input on. The paths go through this process's root (``/proc/<pid>/root``): a worker
        in a network namespace (``ip netns exec``) sees a freshly mounted /sys without the cgroups."""
        root = f"/proc/{os.getpid()}/root"
        return {str(rank): root + str(self.controller.procs(name).resolve()) for rank, name in self.names.items()}

    def __enter__(self) -> "CpuThrottle":
        self.removed_stale = remove_stale_groups(self.controller)
        try:
            for rank, name in self.names.items():
                (self.controller.root / name).mkdir()
                self.created.append(name)
                quota, period = self.bandwidth[rank]
                self.controller.set_quota(name, quota, period)
        except OSError as exc:
            self.__exit__(None, None, None)
            raise RuntimeFailure(f"CPU throttling: cannot set up cgroup under {self.controller.root}: "
                                 f"{exc.strerror}") from None
        return self

    def __exit__(self, *exc) -> None:
        failed = {}
        for name in self.created:
            if why := remove_group(self.controller, name):
                failed[name] = why
        self.created = [n for n in self.created if n in failed]
        for name, why in failed.items():
            log.warning("could not remove CPU cgroup %s: %s (hetsplit doctor removes it later)", name, why)

    def groups(self) -> dict[str, CpuGroup]:
        """Per worker rank, the share its cgroup gives it and the quota per period written."""
        return {str(r): CpuGroup(self.shares[r], q, p) for r, (q, p) in self.bandwidth.items()}


def join_group(procs_file: str | None) -> None:
    """Move this process, every thread of it, into the cgroup whose ``cgroup.procs`` is given (None: stay).

    Only a group made by the run that started this process is joined: ``hetsplit-<pid>-<tag>-r<rank>``
    (``runtime.owned``) whose ``pid`` is this process's parent (the run's launcher), through its
    ``cgroup.procs`` file, which must exist: the file is opened without creating, truncating or following a
    link, so no other file can be written this way."""
    if not procs_file:
        return
    path = _owned_procs(procs_file)
    _write_existing(path, f"{os.getpid()}\n", f"join {path.parent.name}")


def release_group(procs_file: str | None) -> None:
    """Lift the CPU quota of this rank's own cgroup (the one ``join_group`` joined; None: none) once its
    measured work is done: what follows (reports, exit) is not the emulated device's work,
    and at a share of a few percent of a core it took tens of seconds. Same checks as ``join_group``; the
    group's quota file is written, never created."""
    if not procs_file:
        return
    group = _owned_procs(procs_file).parent
    if (group / "cpu.max").exists():
        _write_existing(group / "cpu.max", "max\n", f"release {group.name}")
    else:
        _write_existing(group / "cpu.cfs_quota_us", "-1\n", f"release {group.name}")


def _owned_procs(procs_file: str) -> Path:
    """``procs_file`` when it is the ``cgroup.procs`` of a group made by the run that started this process."""
    path = Path(procs_file)
    owner = owner_of(path.parent.name)
    if path.name != "cgroup.procs" or owner is None:
        raise RuntimeFailure(f"CPU throttling: {procs_file!r:.200} is not the cgroup.procs of a hetsplit cgroup; "
                             "refused")
    if owner != os.getppid():
        raise RuntimeFailure(f"CPU throttling: cgroup {path.parent.name} was made by process {owner}, not by the "
                             f"run that started this process ({os.getppid()}); refused")
    return path


def _write_existing(path: Path, text: str, what: str) -> None:
    """Write ``text`` to the existing file ``path`` (never created, truncated or followed through a link)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise RuntimeFailure(f"CPU throttling: cannot {what}: {exc.strerror}") from None
