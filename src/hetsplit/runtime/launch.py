"""Starting and supervising the processes of a run on this host; nothing is left behind.

The driver (rank 0) starts first, serves the rendezvous (on ``--port``, or on a port the OS picks: no
race) and writes its port to ``port.txt``; only then do the workers start, so a run whose port is
taken starts no worker at all. Every process dies with the launcher, SIGKILL of it included
(``lifetime.die_with_parent``). The launcher polls them: when one fails it gives the others a moment
to report, kills every process it started, and raises ``RuntimeFailure`` with the root cause (a
process that died outright, else the first error, else the first stalled or lost link), naming the
device. In a run across hosts the launcher also watches ``peers`` (``runtime.hosts``): the ranks on
other hosts (driver side), or the driver (worker side).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from hetsplit.errors import RuntimeFailure
from hetsplit.lifetime import die_with_parent
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.nccl import BLOCKING_WAIT_ENV

GRACE_S = 1.0
POLL_S = 0.05
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


# root causes first: a process that died outright, an error, a stalled link, a lost link, a silent host
ORDER = {"died": 0, "error": 1, "stall": 2, "lost": 3, "silent": 4}


class RankSeat(Protocol):
    """What the launcher reads of one rank: the device it runs as."""

    @property
    def device(self) -> str: ...


class Launchable(Protocol):
    """What the launcher reads of a run (a ``Manifest``, a pipeline job): its ranks and their devices."""

    @property
    def world_size(self) -> int: ...

    def worker(self, rank: int) -> RankSeat: ...


class Peers(Protocol):
    """What a launcher watches beyond its own processes (``runtime.hosts``)."""

    def open(self, cfg: RunConfig) -> None:
        """Before any rank starts (may serve the rendezvous and set ``cfg.master_port``)."""

    def tick(self) -> bool:
        """Called every poll: True once the peers are done; raises RuntimeFailure when the run must stop."""

    def docs(self) -> dict[int, dict]:
        """The reports of ranks elsewhere (``ok`` false for a failure)."""

    def close(self, docs: dict[int, dict], failure: str | None) -> None:
        """After the run (this host's reports, the failure if there was one)."""


class PeerSet:
    """Several ``Peers`` watched as one (a generation across hosts: the token stream and the other hosts)."""

    def __init__(self, *members: Peers):
        self.members = members

    def open(self, cfg: RunConfig) -> None:
        for m in self.members:
            m.open(cfg)

    def tick(self) -> bool:
        return all([m.tick() for m in self.members])       # every member ticks, every poll

    def docs(self) -> dict[int, dict]:
        return {r: d for m in self.members for r, d in m.docs().items()}

    def close(self, docs: dict[int, dict], failure: str | None) -> None:
        for m in self.members:
            m.close(docs, failure)


class RankProcess(Protocol):
    """What the launcher reads of a rank's process: a ``Popen``, or the pool's view of one rank run in a
    warm process (``pool.PooledRank``)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class Proc:
    rank: int
    device: str
    popen: RankProcess
    log: Path
    killed_by_us: bool = False


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({v: str(max(1, threads)) for v in THREAD_VARS})
    env["PYTHONUNBUFFERED"] = "1"
    env.update(BLOCKING_WAIT_ENV)  # NCCL waits honour their timeout (GPU runs only)
    return env


class Launcher:
    """Starts ranks ``ranks`` of a run in ``run_dir`` and supervises them until they end.

    Each rank runs ``python -m <module> RUN_DIR RANK`` (``module``: ``runtime.process`` by default);
    ``manifest`` needs only ``world_size`` and ``worker(rank).device``."""

    module = "hetsplit.runtime.process"

    def __init__(self, manifest: Launchable, cfg: RunConfig, run_dir: Path, ranks: list[int] | None = None,
                 wrap: Callable[[int], list[str]] | None = None, peers: Peers | None = None):
        self.manifest, self.cfg, self.run_dir = manifest, cfg, Path(run_dir)
        self.ranks = list(range(manifest.world_size)) if ranks is None else ranks
        self.wrap = wrap or (lambda rank: [])
        self.peers = peers
        self.procs: list[Proc] = []

    # ---- starting -----------------------------------------------------------------------------
    def start(self, rank: int) -> Proc:
        device = self.manifest.worker(rank).device
        threads = int(self.cfg.threads.get(device, 1))
        log = self.run_dir / f"rank{rank}.log"
        wrap, args = self.wrap(rank), [str(self.run_dir), str(rank)]
        p = self.fork(rank, threads, log) if not wrap else None
        if p is None:
            with open(log, "wb") as f:
                p = subprocess.Popen(wrap + [sys.executable, "-m", self.module, *args], stdout=f,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env(threads),
                                     start_new_session=True, preexec_fn=die_with_parent())
        proc = Proc(rank, device, p, log)
        self.procs.append(proc)
        return proc

    def fork(self, rank: int, threads: int, log: Path):
        """Rank ``rank`` forked by this process's zygote (``runtime.zygote``); None where it cannot be: more
        than one thread (the zygote's libraries were loaded for one), a GPU, a CPU-throttling cgroup to join
        (only a child of the run's launcher may), or no zygote here."""
        from hetsplit.runtime import zygote

        kind = self.cfg.kinds.get(self.manifest.worker(rank).device, "cpu")
        if threads != 1 or (kind == "gpu" and not self.cfg.cpu_only) or self.cfg.joins_cgroup(rank):
            return None
        z = zygote.shared(child_env(1))
        if z is None:
            return None
        try:
            return z.spawn(self.module, [str(self.run_dir), str(rank)], child_env(threads), log,
                           self.cfg.startup_timeout_s)
        except RuntimeError:
            return None

    def wait_port(self, driver: Proc) -> int:
        """The port the driver's rendezvous listens on, once it has written it."""
        path = self.run_dir / "port.txt"
        deadline = time.time() + self.cfg.startup_timeout_s
        while time.time() < deadline:
            if path.exists():
                return int(path.read_text())
            if driver.popen.poll() is not None:
                raise self.failure()
            time.sleep(POLL_S)
        raise RuntimeFailure(f"driver: did not open the rendezvous within {self.cfg.startup_timeout_s:g} s")

    def run(self) -> dict[int, dict]:
        """Start, supervise and reap every rank; the result documents by rank."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in [self.run_dir / "port.txt", *self.run_dir.glob("rank*.json")]:   # of an earlier run here
            stale.unlink(missing_ok=True)
        failure = None
        try:
            if self.peers is not None:
                self.peers.open(self.cfg)
            self.cfg.save(self.run_dir / "config.json")
            if 0 in self.ranks:
                driver = self.start(0)
                if not self.cfg.launcher_serves:   # workers start once the driver serves the rendezvous
                    port = self.wait_port(driver)
                    if self.cfg.master_port == 0:
                        self.cfg.master_port = port
                        self.cfg.save(self.run_dir / "config.json")
            for rank in self.ranks:
                if rank != 0:
                    self.start(rank)
            docs = self.supervise()
            self.count_unwaited_cpu(docs)
            return docs
        except RuntimeFailure as exc:
            failure = str(exc)
            raise
        finally:
            self.kill_all()
            if self.peers is not None:
                self.peers.close(self.rank_docs(), failure)

    def count_unwaited_cpu(self, docs: dict[int, dict]) -> None:
        """The CPU each rank this process never waits for (forked by the zygote, run in a warm process)
        reported, counted as this process's own (``machine_load.count_own_cpu``): a rank started here with
        ``Popen`` is reaped here, and ``os.times`` already holds it."""
        from hetsplit.costs.machine_load import count_own_cpu

        for p in self.procs:
            cpu = docs.get(p.rank, {}).get("job_cpu_s")
            if not isinstance(p.popen, subprocess.Popen) and isinstance(cpu, (int, float)) and cpu >= 0:
                count_own_cpu(float(cpu))

    # ---- supervising --------------------------------------------------------------------------
    def deadline_s(self) -> float:
        return self.cfg.startup_timeout_s + self.cfg.timeout_s * (self.cfg.inputs + 2)

    def supervise(self) -> dict[int, dict]:
        deadline = time.time() + self.deadline_s()
        while True:
            codes = [p.popen.poll() for p in self.procs]
            peers_done = self.peers.tick() if self.peers is not None else True
            if any(c not in (None, 0) for c in codes) or self.peer_failed():
                raise self.failure()
            if all(c == 0 for c in codes) and peers_done:
                docs = {p.rank: self.result(p) for p in self.procs}
                return {**docs, **(self.peers.docs() if self.peers is not None else {})}
            if time.time() > deadline:
                running = [f"{p.device} (rank {p.rank})" for p, c in zip(self.procs, codes) if c is None]
                raise RuntimeFailure(f"the run exceeded its deadline of {self.deadline_s():g} s; still running: "
                                     f"{', '.join(running) or 'ranks on other hosts'}; logs in {self.run_dir}")
            time.sleep(POLL_S)

    def peer_failed(self) -> bool:
        return self.peers is not None and any(d.get("ok") is False for d in self.peers.docs().values())

    def result(self, p: Proc) -> dict:
        path = self.run_dir / f"rank{p.rank}.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def rank_docs(self) -> dict[int, dict]:
        """Each process's report; one that died outright (not by us) gets a report saying so."""
        out = {}
        for p in self.procs:
            doc = self.result(p)
            code = p.popen.returncode
            if not doc and code not in (0, None) and not p.killed_by_us:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                doc = {"ok": False, "kind": "died", "rank": p.rank, "device": p.device, "t_fail": time.time(),
                       "error": f"device {p.device} (rank {p.rank}) died: {how} before reporting"}
            if doc:
                doc.setdefault("log", str(p.log))
            out[p.rank] = doc
        return out

    def failure(self) -> RuntimeFailure:
        """Give the others (here and elsewhere) a moment to report, stop everything, and name the root cause."""
        end = time.time() + GRACE_S
        while time.time() < end and (any(p.popen.poll() is None for p in self.procs) or self.peers_pending()):
            time.sleep(POLL_S)
        self.kill_all()
        docs = list(self.rank_docs().values()) + list(self.peers.docs().values() if self.peers else [])
        return root_cause(docs, self.run_dir)

    def peers_pending(self) -> bool:
        if self.peers is None:
            return False
        try:
            return not self.peers.tick()
        except RuntimeFailure:
            return False

    def kill_all(self) -> None:
        """SIGKILL every process this launcher started that is still running, then reap it."""
        for p in self.procs:
            if p.popen.poll() is None:
                p.killed_by_us = True
                try:
                    os.killpg(p.popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.popen.kill()
        for p in self.procs:
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def root_cause(docs: list[dict], run_dir: Path) -> RuntimeFailure:
    """The failure to report among the processes' reports: by ``ORDER``; a link failure blaming a peer that
    reported its own failure is a consequence, so the blame follows it to the peer that went silent. The
    device blamed (what a run that recovers leaves out) is the one that failed: for a stalled or lost link,
    the peer that stopped answering, not the rank that waited for it."""
    failed = [d for d in docs if d.get("ok") is False]
    if not failed:
        return RuntimeFailure(f"a process of the run failed without a report; logs in {run_dir}")
    reported = {d.get("device") for d in failed}
    first = min(failed, key=lambda d: (ORDER.get(str(d.get("kind")), 1), d.get("peer") in reported,
                                       d.get("t_fail", 0.0)))
    log = first.get("log") or run_dir / f"rank{first.get('rank')}.log"
    device = first.get("peer") if first.get("kind") in ("stall", "lost") else first.get("device")
    return RuntimeFailure(f"{first['error']} (log: {log})", device if isinstance(device, str) else None)


def processes_of(run_dir: str | Path) -> list[int]:
    """PIDs of live processes whose command line names ``run_dir`` (to check nothing was left behind)."""
    marker = str(run_dir).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().split(") ")[-1][:1]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids
