"""Runs across hosts: the driver's host serves the rendezvous, every other host runs ``hetsplit worker``.

``hetsplit run PLAN MODEL --hosts gpu0=10.0.0.2,cpu1=10.0.0.3`` runs the driver and every device not
named here; its launcher serves the run's rendezvous on ``--port`` (0: a free one) and prints, per
device placed elsewhere, the one command to run on its host::

    hetsplit worker --join 10.0.0.1:29500 --token 3f2a... --device gpu0

(``--ssh`` runs exactly these commands over ssh). A worker host needs hetsplit and nothing else: the
worker joins the rendezvous with the run's token (``runtime.rendezvous``: another run's worker is
refused), fetches the manifest and its device's sub-models from the store, runs its device's rank
under a launcher of its own, beats every ``BEAT_S`` and sends back the rank's report (measurements,
or the failure naming the device and the cause).

Lifetimes: a worker ends when its driver ends (the driver posts an abort, or the store goes away:
the launcher serving it ended or its host died); the driver ends the run, naming the device, when a
worker reports a failure, stops beating (its host died) or never joins within the startup timeout.
Per-hop transfer times compare timestamps taken on two hosts: they need the hosts' clocks in sync
(NTP); throughput and latency are the driver's own.
"""

from __future__ import annotations

import json
import shlex
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from hetsplit.errors import RuntimeFailure, UsageError
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launcher
from hetsplit.runtime.manifest import Manifest, load_manifest

BEAT_S = 0.25            # how often a worker says it is alive (and checks the driver is)
LOST_AFTER_S = 5.0       # a worker silent this long is taken for dead (at most the run's --timeout)
CHUNK = 4 << 20          # the store takes values up to 8 MiB: larger ones go in chunks


# ---- values of any size in the store ------------------------------------------------------------------
def put(store, key: str, data: bytes) -> None:
    """Store ``data`` under ``key`` in chunks (the count last, so a reader never sees part of it)."""
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
    for i, c in enumerate(chunks):
        store.set(f"{key}#{i}", c)
    store.set(key, str(len(chunks)))


def get(store, key: str, timeout_s: float | None = None) -> bytes:
    """A value written by ``put`` (waiting for it up to ``timeout_s``)."""
    if timeout_s is not None:
        store.wait([key], rendezvous._td(timeout_s))
    n = int(store.get(key))
    return b"".join(store.get(f"{key}#{i}") for i in range(n))


def local_addr(host: str, port: int) -> str:
    """This machine's address on the route to ``host`` (what that host sees us as)."""
    try:
        family, kind, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind) as s:
            s.connect(sockaddr)
            return s.getsockname()[0]
    except OSError as exc:
        raise RuntimeFailure(f"host {host}: no route to it from here ({exc})") from None


@dataclass
class HostMap:
    """The devices that run on other hosts, and where (``--hosts DEV=HOST,...``)."""

    by_device: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> "HostMap":
        pairs: dict[str, str] = {}
        for item in [x.strip() for x in text.split(",") if x.strip()]:
            dev, sep, host = (x.strip() for x in item.partition("="))
            if not sep or not dev or not host:
                raise UsageError(f"--hosts: {item!r} is not DEVICE=HOST; write e.g. gpu0=10.0.0.2,cpu1=10.0.0.3")
            if dev in pairs:
                raise UsageError(f"--hosts names device {dev!r} twice")
            pairs[dev] = host
        if not pairs:
            raise UsageError("--hosts is empty; write DEVICE=HOST pairs separated by commas")
        return cls(pairs)

    def check(self, manifest: Manifest) -> None:
        devices = {w.device for w in manifest.stages}
        unknown = sorted(set(self.by_device) - devices)
        if unknown:
            raise UsageError(f"--hosts names devices {unknown} that the plan does not use; it uses {sorted(devices)}")

    def remote_ranks(self, manifest: Manifest) -> dict[int, str]:
        """rank -> host of every device placed on another host."""
        return {w.rank: self.by_device[w.device] for w in manifest.stages if w.device in self.by_device}


@dataclass(frozen=True)
class WorkerCommand:
    """The command that serves ``device`` on ``host``."""

    device: str
    host: str
    argv: list[str]

    def text(self) -> str:
        return shlex.join(self.argv)


def worker_argv(addr: str, port: int, token: str, device: str, timeout_s: float) -> list[str]:
    return ["hetsplit", "worker", "--join", f"{addr}:{port}", "--token", token, "--device", device,
            "--timeout", f"{timeout_s:g}"]


class Hosted:
    """The driver side of a run across hosts (the launcher's ``Peers``): serves the rendezvous, publishes
    what each worker needs, follows the workers' beats and collects their reports."""

    def __init__(self, manifest: Manifest, hostmap: HostMap,
                 announce: Callable[[list[WorkerCommand]], None] | None = None):
        self.manifest, self.hostmap, self.announce = manifest, hostmap, announce
        self.remote = hostmap.remote_ranks(manifest)
        self.reports: dict[int, dict] = {}
        self.commands: dict[int, WorkerCommand] = {}
        self.base = self.store = None

    def open(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        cfg.launcher_serves = True
        self.base = rendezvous.serve(cfg.master_port, cfg.token, cfg.startup_timeout_s)
        cfg.master_port = self.base.port
        addr = local_addr(next(iter(self.remote.values())), cfg.master_port)
        cfg.master_addr = addr
        cfg.addrs = {str(r): addr for r in range(self.manifest.world_size) if r not in self.remote}
        self.store = rendezvous.scoped(self.base, cfg.token)
        put(self.store, "manifest", (Path(cfg.manifest)).read_bytes())
        for rank in self.remote:
            for seg in self.manifest.worker(rank).segments:
                if seg.submodel:
                    put(self.store, f"file/{seg.submodel}", self.manifest.submodel_path(rank, seg.index).read_bytes())
        put(self.store, "config", json.dumps(asdict(cfg)).encode())
        self.store.set("remote", json.dumps({self.manifest.worker(r).device: r for r in self.remote}))
        self.t_open = time.time()
        self.beats = {r: (0, self.t_open) for r in self.remote}
        self.t_tick = 0.0
        self.commands = {r: WorkerCommand(self.manifest.worker(r).device, host,
                                          worker_argv(addr, cfg.master_port, cfg.token, self.manifest.worker(r).device,
                                                      cfg.timeout_s))
                         for r, host in self.remote.items()}
        if self.announce is not None:
            self.announce(list(self.commands.values()))

    def tick(self) -> bool:
        now = time.time()
        if now - self.t_tick >= BEAT_S / 2:
            self.t_tick = now
            for rank in self.remote:
                if rank not in self.reports:
                    self._follow(rank, now)
        return len(self.reports) == len(self.remote)

    def _follow(self, rank: int, now: float) -> None:
        if self.store.check([f"report/{rank}"]):
            self.reports[rank] = json.loads(get(self.store, f"report/{rank}"))
            return
        beats = self.store.add(f"beat/{rank}", 0)
        last, since = self.beats[rank]
        if beats != last:
            self.beats[rank] = (beats, now)
            return
        cmd = self.commands[rank]
        lost = min(LOST_AFTER_S, self.cfg.timeout_s)
        if beats == 0 and now - since > self.cfg.startup_timeout_s:
            self._silent(rank, f"device {cmd.device}: no worker joined from {cmd.host} within "
                               f"{self.cfg.startup_timeout_s:g} s; run there: {cmd.text()}")
        elif beats > 0 and now - since > lost:
            self._silent(rank, f"device {cmd.device} on {cmd.host} stopped answering for {lost:g} s: its "
                               "worker died or the host is unreachable")

    def _silent(self, rank: int, error: str) -> None:
        self.reports[rank] = {"ok": False, "kind": "silent", "rank": rank, "device": self.commands[rank].device,
                              "error": error, "t_fail": time.time(),
                              "log": f"the worker's output on {self.remote[rank]}"}

    def docs(self) -> dict[int, dict]:
        return dict(self.reports)

    def close(self, docs: dict[int, dict], failure: str | None) -> None:
        if self.store is not None and failure is not None:
            try:
                self.store.set("abort", failure)
                time.sleep(2 * BEAT_S)        # the workers read why before the store goes away
            except (RuntimeError, OSError):
                pass
        self.store = self.base = None         # the server stops: every worker still joined ends


class DriverWatch:
    """The worker side (the launcher's ``Peers`` on a worker host): beats for its ranks, ends them when
    the driver aborts or goes away, and sends their reports back."""

    def __init__(self, store, where: str, ranks: dict[int, str], run_dir: Path, kept: bool):
        self.store, self.where, self.ranks = store, where, ranks
        self.run_dir, self.kept = run_dir, kept
        self.t_beat = 0.0

    def open(self, cfg: RunConfig) -> None:
        pass

    def tick(self) -> bool:
        now = time.time()
        if now - self.t_beat < BEAT_S:
            return True
        self.t_beat = now
        try:
            if self.store.check(["abort"]):
                raise RuntimeFailure(f"the driver at {self.where} ended the run: {self.store.get('abort').decode()}")
            for rank in self.ranks:
                self.store.add(f"beat/{rank}", 1)
        except (RuntimeError, OSError):   # the store's connection: torch's DistError is a RuntimeError
            raise RuntimeFailure(f"worker of {', '.join(self.ranks.values())}: the driver at {self.where} is gone "
                                 "(the run ended, or its host died or cannot be reached); stopped") from None
        return True

    def docs(self) -> dict[int, dict]:
        return {}

    def close(self, docs: dict[int, dict], failure: str | None) -> None:
        for rank, device in self.ranks.items():
            doc = docs.get(rank) or {"ok": False, "kind": "error", "rank": rank, "device": device,
                                     "t_fail": time.time(), "error": failure or f"device {device}: no report"}
            log = doc.get("log")
            doc["log"] = (f"{log} on the worker's host" if self.kept else
                          "the worker's host (keep its logs with hetsplit worker --run-dir DIR)")
            try:
                put(self.store, f"report/{rank}", json.dumps(doc).encode())
            except (RuntimeError, OSError):
                return          # the driver is gone: nobody to tell


@dataclass
class JoinOptions:
    """``hetsplit worker``: where the driver is, the run's token, which devices this host serves."""

    host: str
    port: int
    token: str
    devices: list[str]
    timeout_s: float = 60.0
    addr: str = ""                 # this host's address for the other hosts (default: the route to the driver)
    run_dir: Path | None = None    # keep the sub-models and logs here (default: a temporary directory)

    def __post_init__(self) -> None:
        rendezvous.check_port(self.port, "--join")
        if self.port == 0:
            raise UsageError("--join HOST:PORT: give the port the driver printed (not 0)")
        if not self.token:
            raise UsageError("--token: give the run token the driver printed")
        if not self.devices:
            raise UsageError("--device: name the device (or devices, comma-separated) this host runs")
        if not self.timeout_s > 0:
            raise UsageError(f"--timeout {self.timeout_s}: give a number of seconds > 0")


def join_run(opts: JoinOptions) -> dict[int, dict]:
    """Serve ``opts.devices`` in the run at ``opts.host:opts.port`` until it ends; their reports."""
    where = f"{opts.host}:{opts.port}"
    who = f"worker of {', '.join(opts.devices)}"
    base = rendezvous.join(opts.host, opts.port, opts.token, opts.timeout_s, who)
    store = rendezvous.scoped(base, opts.token)
    try:
        store.wait(["remote"], rendezvous._td(opts.timeout_s))
        remote = json.loads(store.get("remote"))
        cfg = RunConfig(**json.loads(get(store, "config", opts.timeout_s)))
    except (RuntimeError, OSError) as exc:
        raise RuntimeFailure(f"{who}: the driver at {where} did not hand out the run ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise RuntimeFailure(f"{who}: the driver at {where} hands out a run this hetsplit cannot read (another "
                             f"version? {exc}); install the same hetsplit on every host") from None
    unknown = [d for d in opts.devices if d not in remote]
    if unknown:
        raise UsageError(f"--device {', '.join(unknown)}: this run places only {sorted(remote)} on other hosts")
    for d in opts.devices:
        if store.add(f"claim/{d}", 1) > 1:
            raise rendezvous.Refused(f"{who}: device {d} already has a worker in the run at {where}")
    ranks = {int(remote[d]): d for d in opts.devices}
    with tempfile.TemporaryDirectory(prefix="hetsplit-worker-") as tmp:
        run_dir = Path(opts.run_dir or tmp)
        split = run_dir / "split"
        split.mkdir(parents=True, exist_ok=True)
        (split / "manifest.json").write_bytes(get(store, "manifest"))
        manifest = load_manifest(split)
        for rank in ranks:
            for seg in manifest.worker(rank).segments:
                if seg.submodel:
                    if Path(seg.submodel).name != seg.submodel or seg.submodel.startswith("."):
                        raise RuntimeFailure(f"{who}: the driver names a sub-model {seg.submodel!r}; a worker writes "
                                             "only plain file names into its own directory")
                    (split / seg.submodel).write_bytes(get(store, f"file/{seg.submodel}"))
        cfg.manifest = str(split / "manifest.json")
        cfg.master_addr, cfg.launcher_serves = opts.host, True
        cfg.cpus = {}                  # --pin chose CPUs of the driver's host, not of this one
        addr = opts.addr or local_addr(opts.host, opts.port)
        cfg.addrs.update({str(r): addr for r in ranks})
        watch = DriverWatch(store, where, ranks, run_dir, kept=opts.run_dir is not None)
        return Launcher(manifest, cfg, run_dir, ranks=sorted(ranks), peers=watch).run()
