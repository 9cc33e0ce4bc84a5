"""Runs across hosts: the driver's host serves the rendezvous, every other host runs ``hetsplit worker``.

``hetsplit run PLAN MODEL --hosts gpu0=10.0.0.2,cpu1=10.0.0.3`` runs the driver and every device not
named here; its launcher serves the run's rendezvous on ``--port`` (0: a free one) and prints, per
device placed elsewhere, the one command to run on its host, and the run's token once::

    HETSPLIT_TOKEN=3f2a... hetsplit worker --join 10.0.0.1:29500 --device gpu0

The printed commands never carry the token (a command line shows in the host's process list): the
worker reads it from ``--token-file`` or ``$HETSPLIT_TOKEN`` (``--ssh`` runs these commands over ssh,
handing the token on the command's standard input). A worker host needs hetsplit and nothing else: the
worker joins the rendezvous with the run's token (``runtime.rendezvous``: another run's worker is
refused), fetches the manifest and its device's sub-models from the store, runs its device's rank
under a launcher of its own, beats every ``BEAT_S`` and sends back the rank's report (measurements,
or the failure naming the device and the cause).

A worker trusts only what it checked: every value either side acts on is authenticated with a key
derived from the token and sized before its bytes are read (``runtime.store_auth``); the worker takes
from the driver only the checked settings of ``runtime.peer_config``; sub-model names are plain file
names (``manifest.check_submodel_name``) written as new files of its own in its run folder. A worker
that fails before it computes gives back its devices' claims and leaves its error for the driver.

Lifetimes: a worker ends when its driver ends (the driver posts an abort, or the store goes away:
the launcher serving it ended or its host died); the driver ends the run, naming the device, when a
worker reports a failure, stops beating (its host died) or never joins within the startup timeout.
Per-hop transfer times compare timestamps taken on two hosts: they need the hosts' clocks in sync
(NTP); throughput and latency are the driver's own.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from hetsplit.errors import HetsplitError, RuntimeFailure, UsageError
from hetsplit.jsonfile import MAX_INPUT_ENV, ONNX_MAX_BYTES, max_input_bytes
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launchable, Launcher
from hetsplit.runtime.manifest import MANIFEST_FILE, Manifest, load_manifest
from hetsplit.runtime.scratch import worker_scratch
from hetsplit.runtime.peer_config import published, remote_ranks, steps_per_input, worker_config
from hetsplit.runtime.store_auth import (StoreKey, Unauthenticated, declared, fetch, get_sealed, put, put_file,
                                         set_sealed)
from hetsplit.storeprobe import TOKEN_ENV, check_timeout

if TYPE_CHECKING:
    import torch.distributed as dist

BEAT_S = 0.25            # how often a worker says it is alive (and checks the driver is)
WANT = "want-files"       # a worker asks for the handout's files (published on request)
LOST_AFTER_S = 5.0       # a worker silent this long is taken for dead (at most the run's --timeout)
REPORT_BYTES = 100 << 20          # a worker's report (its measurements) is at most this ...
REPORT_BYTES_PER_STEP = 128       # ... or its timestamps, a few JSON numbers per input, segment and message end


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

    def check(self, job: Launchable) -> None:
        devices = {job.worker(r).device for r in range(job.world_size)}
        unknown = sorted(set(self.by_device) - devices)
        if unknown:
            raise UsageError(f"--hosts names devices {unknown} that the plan does not use; it uses {sorted(devices)}")

    def remote_ranks(self, job: Launchable) -> dict[int, str]:
        """rank -> host of every device placed on another host."""
        return {r: self.by_device[job.worker(r).device] for r in range(job.world_size)
                if job.worker(r).device in self.by_device}


@dataclass(frozen=True)
class WorkerCommand:
    """The command that serves ``device`` on ``host`` (``argv``: without the token, which the worker reads
    from ``$TOKEN_ENV`` or ``--token-file``)."""

    device: str
    host: str
    argv: list[str]
    token: str = field(repr=False, default="")

    def text(self) -> str:
        return shlex.join(self.argv)

    def remote_shell(self) -> str:
        """The command for a POSIX shell on ``host`` (ssh) that reads the token from its first input line."""
        return f"IFS= read -r {TOKEN_ENV} && export {TOKEN_ENV} && exec {self.text()}"


def worker_argv(addr: str, port: int, device: str, timeout_s: float) -> list[str]:
    return ["hetsplit", "worker", "--join", f"{addr}:{port}", "--device", device, "--timeout", f"{timeout_s:g}"]


@dataclass
class Handout:
    """What a driver hands its workers on other hosts: the program their ranks run (``PROGRAMS``), the
    documents they read (store name -> bytes: the manifest or the job), the files they fetch (store name ->
    the driver's file; ``on_request``: published once a worker asks), the records each remote rank keeps
    per input (its report's cap), and what each sends back beside its report (rank -> result name -> its
    exact size in bytes)."""

    program: str
    documents: dict[str, bytes]
    files: dict[str, Path]
    steps: dict[int, int]
    results: dict[int, dict[str, int]] = field(default_factory=dict)
    on_request: bool = False      # the files only once a worker asks for them (``WANT``): others have their own


def mapping_handout(manifest: Manifest, manifest_file: Path, remote: list[int]) -> Handout:
    """A mapping's handout: the manifest and the sub-models of the remote ranks."""
    files = {f"file/{seg.submodel}": manifest.submodel_path(rank, seg.index)
             for rank in remote for seg in manifest.worker(rank).segments if seg.submodel}
    return Handout("mapping", {"manifest": manifest_file.read_bytes()}, files,
                   {r: steps_per_input(manifest, [r]) for r in remote})


class Hosted:
    """The driver side of a run across hosts (the launcher's ``Peers``): serves the rendezvous, publishes
    what each worker needs (``handout``), follows the workers' beats and collects their reports and results."""

    def __init__(self, job: Launchable, hostmap: HostMap, handout: Handout,
                 announce: Callable[[list[WorkerCommand]], None] | None = None):
        self.job, self.hostmap, self.handout, self.announce = job, hostmap, handout, announce
        self.remote = hostmap.remote_ranks(job)
        self.reports: dict[int, dict] = {}
        self.results: dict[int, dict[str, bytes]] = {}
        self.commands: dict[int, WorkerCommand] = {}
        self.base: dist.TCPStore | None = None
        self.store: rendezvous.KeyValueStore | None = None

    def open(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        cfg.launcher_serves = True
        self.base = base = rendezvous.serve(cfg.master_port, cfg.token, cfg.startup_timeout_s)
        cfg.master_port = base.port
        addr = local_addr(next(iter(self.remote.values())), cfg.master_port)
        cfg.master_addr = addr
        cfg.addrs = {str(r): addr for r in range(self.job.world_size) if r not in self.remote}
        self.store = store = rendezvous.scoped(base, cfg.token)
        self.key = StoreKey.of(cfg.token)
        for name, data in self.handout.documents.items():
            put(store, self.key, name, data)
        self.files_out = False
        if not self.handout.on_request:
            self._put_files()
        doc = published(cfg, self.job, sorted(self.remote))
        put(store, self.key, "config", json.dumps(doc).encode())
        set_sealed(store, self.key, "program", self.handout.program.encode())
        set_sealed(store, self.key, "remote",
                   json.dumps({self.job.worker(r).device: r for r in self.remote}).encode())
        self.t_open = time.time()
        self.beats = {r: (0, self.t_open) for r in self.remote}
        self.t_tick = 0.0
        self.commands = {r: WorkerCommand(self.job.worker(r).device, host,
                                          worker_argv(addr, cfg.master_port, self.job.worker(r).device,
                                                      cfg.timeout_s), cfg.token)
                         for r, host in self.remote.items()}
        if self.announce is not None:
            self.announce(list(self.commands.values()))

    def _put_files(self) -> None:
        for name, path in self.handout.files.items():
            put_file(self._open_store(), self.key, name, path)
        self.files_out = True

    def tick(self) -> bool:
        now = time.time()
        if now - self.t_tick >= BEAT_S / 2:
            self.t_tick = now
            if not self.files_out and self._open_store().check([WANT]):
                self._put_files()
            for rank in self.remote:
                if rank not in self.reports:
                    self._follow(rank, now)
        return len(self.reports) == len(self.remote)

    def _open_store(self) -> rendezvous.KeyValueStore:
        if self.store is None:
            raise RuntimeFailure("driver: the run's store is not open (open() first, or it was closed)")
        return self.store

    def _follow(self, rank: int, now: float) -> None:
        store = self._open_store()
        cmd = self.commands[rank]
        who = f"driver (device {cmd.device} on {cmd.host})"
        try:
            if store.check([f"report/{rank}"]):
                steps = self.handout.steps.get(rank, 1)
                cap = max(REPORT_BYTES, self.cfg.inputs * steps * REPORT_BYTES_PER_STEP)
                doc = report_doc(fetch(store, self.key, f"report/{rank}", cap, who), rank, cmd.device)
                if doc["ok"]:
                    self.results[rank] = {name: exact(fetch(store, self.key, f"result/{rank}/{name}", size, who),
                                                      size, f"{who}: its result {name!r}")
                                          for name, size in self.handout.results.get(rank, {}).items()}
                self.reports[rank] = doc
                return
            beats = 0
            if store.check([f"beat/{rank}"]):
                beats = int(get_sealed(store, self.key, f"beat/{rank}", who).decode())
        except (Unauthenticated, ValueError) as exc:
            self.reports[rank] = {"ok": False, "kind": "error", "rank": rank, "device": cmd.device,
                                  "t_fail": time.time(), "error": f"device {cmd.device}: {exc}",
                                  "log": f"the worker's output on {cmd.host}"}
            return
        last, since = self.beats[rank]
        if beats > last:
            self.beats[rank] = (beats, now)
            return
        lost = min(LOST_AFTER_S, self.cfg.timeout_s)
        if beats == 0 and now - since > self.cfg.startup_timeout_s:
            self._silent(rank, f"device {cmd.device}: no worker joined from {cmd.host} within "
                               f"{self.cfg.startup_timeout_s:g} s{self._last_error(rank, who)}; run there, with the "
                               f"run's token in ${TOKEN_ENV} or --token-file: {cmd.text()}")
        elif beats > 0 and now - since > lost:
            self._silent(rank, f"device {cmd.device} on {cmd.host} stopped answering for {lost:g} s: its "
                               "worker died or the host is unreachable")

    def _last_error(self, rank: int, who: str) -> str:
        """What the last worker that tried to serve ``rank`` and failed before computing said (or nothing)."""
        try:
            store = self._open_store()
            if store.check([f"failed/{rank}"]):
                said = get_sealed(store, self.key, f"failed/{rank}", who, cap=8192).decode(errors="replace")
                return f" (a worker tried and failed: {said})"
        except (RuntimeError, OSError, HetsplitError):
            pass
        return ""

    def _silent(self, rank: int, error: str) -> None:
        self.reports[rank] = {"ok": False, "kind": "silent", "rank": rank, "device": self.commands[rank].device,
                              "error": error, "t_fail": time.time(),
                              "log": f"the worker's output on {self.remote[rank]}"}

    def docs(self) -> dict[int, dict]:
        return dict(self.reports)

    def close(self, docs: dict[int, dict], failure: str | None) -> None:
        if self.store is not None and failure is not None:
            try:
                set_sealed(self.store, self.key, "abort", failure.encode())
                time.sleep(2 * BEAT_S)        # the workers read why before the store goes away
            except (RuntimeError, OSError):
                pass
        self.store = self.base = None         # the server stops: every worker still joined ends


def exact(data: bytes, size: int, what: str) -> bytes:
    """``data`` if it has exactly ``size`` bytes, else ValueError naming ``what``."""
    if len(data) != size:
        raise ValueError(f"{what} has {len(data):,} bytes, not the {size:,} expected; refused")
    return data


def report_doc(data: bytes, rank: int, device: str) -> dict:
    """A worker's report as the driver takes it: a JSON object whose rank and device are the driver's own."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        doc = {"ok": False, "error": f"device {device}: its worker sent a report that is not JSON ({exc})"}
    if not isinstance(doc, dict) or type(doc.get("ok")) is not bool:
        doc = {"ok": False, "error": f"device {device}: its worker sent a report that is not a report"}
    if doc["ok"] is False:
        doc["error"] = str(doc.get("error") or f"device {device}: failed")[:4000]
        doc.setdefault("kind", "error")
        doc.setdefault("t_fail", time.time())
    doc.update(rank=rank, device=device)
    return doc


class DriverWatch:
    """The worker side (the launcher's ``Peers`` on a worker host): beats for its ranks, ends them when
    the driver aborts or goes away, and sends their reports back (every value sealed with ``key``)."""

    def __init__(self, store: rendezvous.KeyValueStore, key: StoreKey, where: str, ranks: dict[int, str], run_dir: Path,
                 kept: bool, results: Callable[[int], dict[str, bytes]] | None = None):
        self.store, self.key, self.where, self.ranks = store, key, where, ranks
        self.run_dir, self.kept, self.results = run_dir, kept, results
        self.t_beat = 0.0
        self.beats = 0

    def open(self, cfg: RunConfig) -> None:
        pass

    def tick(self) -> bool:
        now = time.time()
        if now - self.t_beat < BEAT_S:
            return True
        self.t_beat = now
        who = f"worker of {', '.join(self.ranks.values())}"
        try:
            if self.store.check(["abort"]):
                why = get_sealed(self.store, self.key, "abort", who, cap=1 << 16).decode(errors="replace")
                raise RuntimeFailure(f"the driver at {self.where} ended the run: {why}")
            self.beats += 1
            for rank in self.ranks:
                set_sealed(self.store, self.key, f"beat/{rank}", str(self.beats).encode())
        except (RuntimeError, OSError):   # the store's connection: torch's DistError is a RuntimeError
            raise RuntimeFailure(f"{who}: the driver at {self.where} is gone "
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
            results: dict[str, bytes] = {}
            if doc.get("ok") is True and self.results is not None:
                try:
                    results = self.results(rank)
                except (OSError, RuntimeError, ValueError, HetsplitError) as exc:
                    doc = {"ok": False, "kind": "error", "rank": rank, "device": device, "t_fail": time.time(),
                           "error": f"device {device}: its results could not be read ({exc})", "log": doc["log"]}
            try:
                for name, data in results.items():       # before the report, which the driver waits for
                    put(self.store, self.key, f"result/{rank}/{name}", data)
                put(self.store, self.key, f"report/{rank}", json.dumps(doc).encode())
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
    model: Path | None = None      # a generation's checkpoint, this host's copy (checked against the driver's)

    def __post_init__(self) -> None:
        if not self.token or not self.devices or not 1 <= self.port <= 65535:
            raise UsageError("a worker needs the driver's port, the run token and its devices")
        check_timeout(self.timeout_s, "--timeout")


def submodel_cap() -> int:
    """The most bytes one fetched sub-model may have: ``HETSPLIT_MAX_INPUT_MB`` when set, else protobuf's
    2 GiB (a larger ONNX file cannot be read anyway)."""
    return max_input_bytes() if os.environ.get(MAX_INPUT_ENV) else ONNX_MAX_BYTES


def _write_fetched(store, key: StoreKey, name: str, folder: Path, file: str, cap: int, who: str) -> None:
    """Fetch ``name`` into ``folder/file``: a new file of this worker's (never following a link planted
    there), renamed into place once its bytes are authenticated."""
    tmp = folder / f".{file}.{os.getpid()}.part"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise RuntimeFailure(f"{who}: cannot write {tmp} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            fetch(store, key, name, cap, who, sink=f)
        try:
            os.replace(tmp, folder / file)
        except OSError as exc:
            raise RuntimeFailure(f"{who}: cannot write {folder / file} ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)


class Program(Protocol):
    """How a worker takes one kind of run from its driver (``program_named``): checks its job document and
    writes its own job file, fetches the files its ranks read, and names what they send back."""

    module: str             # what each rank runs (``python -m MODULE RUN_DIR RANK``)

    def read_job(self, store: rendezvous.KeyValueStore, key: StoreKey, split: Path, who: str
                 ) -> tuple[Launchable, Path]:
        """The driver's job document, checked; written as this worker's own file (its path)."""

    def steps(self, job: Launchable, ranks: list[int]) -> int:
        """Records the ranks keep per input."""

    def fetch_files(self, store: rendezvous.KeyValueStore, key: StoreKey, job: Launchable, ranks: list[int],
                    split: Path, who: str) -> None:
        """The files the ranks read, fetched into ``split`` and checked against the job."""

    def results(self, job: Launchable, run_dir: Path) -> Callable[[int], dict[str, bytes]] | None:
        """What a rank sends back beside its report (None: nothing)."""


class MappingProgram:
    """A mapping's worker (``runtime.worker``): the manifest, then the sub-models of its ranks."""

    module = Launcher.module

    def read_job(self, store, key: StoreKey, split: Path, who: str) -> tuple[Launchable, Path]:
        _write_fetched(store, key, "manifest", split, MANIFEST_FILE, max_input_bytes(), who)
        return load_manifest(split / MANIFEST_FILE), split / MANIFEST_FILE

    def steps(self, job: Launchable, ranks: list[int]) -> int:
        assert isinstance(job, Manifest)
        return steps_per_input(job, ranks)

    def fetch_files(self, store, key: StoreKey, job: Launchable, ranks: list[int], split: Path, who: str) -> None:
        assert isinstance(job, Manifest)
        files = [s.submodel for r in ranks for s in job.worker(r).segments if s.submodel]
        fetch_all(store, key, {f"file/{name}": name for name in files}, split, submodel_cap(), who)

    def results(self, job: Launchable, run_dir: Path) -> Callable[[int], dict[str, bytes]] | None:
        return None


def program_named(name: str, opts: JoinOptions, who: str) -> Program:
    """The worker side of the program ``name`` the driver runs."""
    if name == "mapping":
        if opts.model is not None:
            raise UsageError("--model is a generation's checkpoint; this run is a mapping, whose sub-models come from "
                             "the driver: leave out --model")
        return MappingProgram()
    if name == "generation":
        from hetsplit.runtime.llm_hosts import GenerationProgram

        return GenerationProgram(opts.model)
    raise RuntimeFailure(f"{who}: the driver runs a program {name!r:.40} this hetsplit does not know; install the same "
                         "hetsplit on every host")


def fetch_all(store, key: StoreKey, names: dict[str, str], folder: Path, cap: int, who: str) -> None:
    """Fetch each store value of ``names`` into ``folder`` under its file name, every size checked against
    ``cap`` and the folder's free space before any bytes are read."""
    need = sum(declared(store, key, name, cap, who) for name in names)   # sizes first
    free = shutil.disk_usage(folder).free
    if need > free:
        raise RuntimeFailure(f"{who}: the driver's files take {need:,} bytes; {folder} has {free:,} free")
    for name, file in names.items():
        _write_fetched(store, key, name, folder, file, cap, who)


def join_run(opts: JoinOptions, dog: rendezvous.Watchdog | None = None) -> dict[int, dict]:
    """Serve ``opts.devices`` in the run at ``opts.host:opts.port`` until it ends; their reports. With ``dog``,
    every store call is timed by it (a driver that stops answering mid-call ends the process)."""
    where = f"{opts.host}:{opts.port}"
    who = f"worker of {', '.join(opts.devices)}"
    base = rendezvous.join(opts.host, opts.port, opts.token, opts.timeout_s, who, dog)
    store: rendezvous.KeyValueStore = rendezvous.scoped(base, opts.token)
    if dog is not None:
        store = dog.watched(store)
    key = StoreKey.of(opts.token)
    with worker_scratch() as tmp:
        run_dir = Path(opts.run_dir or tmp)
        if dog is not None and opts.run_dir is None:
            dog.remove = tmp
        split = run_dir / "split"
        claimed: list[str] = []
        try:
            program, job, ranks, cfg = _take_run(store, key, opts, run_dir, split, who, where, claimed)
        except BaseException as exc:       # a failure before computing: free the claims, tell the driver
            _give_up(store, key, opts.devices, claimed, exc)
            raise
        watch = DriverWatch(store, key, where, ranks, run_dir, kept=opts.run_dir is not None,
                            results=program.results(job, run_dir))
        launcher = Launcher(job, cfg, run_dir, ranks=sorted(ranks), peers=watch)
        launcher.module = program.module
        return launcher.run()


def _take_run(store, key: StoreKey, opts: JoinOptions, run_dir: Path, split: Path, who: str, where: str,
              claimed: list[str]) -> tuple[Program, Launchable, dict[int, str], RunConfig]:
    """Fetch and check what the driver hands out, claim the devices and write the files their ranks read."""
    try:
        store.wait(["remote"], rendezvous._td(opts.timeout_s))
        program = program_named(get_sealed(store, key, "program", who, cap=64).decode(errors="replace"), opts, who)
        remote_doc = json.loads(get_sealed(store, key, "remote", who, cap=1 << 20))
        split.mkdir(parents=True, exist_ok=True)
        if split.is_symlink() or split.resolve().parent != run_dir.resolve():
            raise RuntimeFailure(f"{who}: {split} is a link out of the run folder; refused")
        job, job_file = program.read_job(store, key, split, who)
        remote = remote_ranks(remote_doc, job, who)
        unknown = [d for d in opts.devices if d not in remote]
        if unknown:
            raise UsageError(f"--device {', '.join(unknown)}: this run places only {sorted(remote)} on other hosts")
        ranks = {remote[d]: d for d in opts.devices}
        addr = opts.addr or local_addr(opts.host, opts.port)
        doc = json.loads(fetch(store, key, "config", max_input_bytes(), who))
        cfg = worker_config(doc, job, sorted(ranks), steps=program.steps(job, sorted(ranks)), who=who,
                            manifest_path=str(job_file), token=opts.token, master_addr=opts.host,
                            master_port=opts.port, addr=addr)
        for d in opts.devices:
            if store.add(f"claim/{d}", 1) > 1:
                store.add(f"claim/{d}", -1)
                raise rendezvous.Refused(f"{who}: device {d} already has a worker in the run at {where}")
            claimed.append(d)
        program.fetch_files(store, key, job, sorted(ranks), split, who)
    except (RuntimeError, OSError) as exc:
        raise RuntimeFailure(f"{who}: the driver at {where} did not hand out the run "
                             f"({rendezvous._first_line(exc)})") from None
    except (ValueError, RecursionError) as exc:     # JSON that does not parse
        raise RuntimeFailure(f"{who}: the driver at {where} hands out a run this hetsplit cannot read ({exc}); "
                             "install the same hetsplit on every host") from None
    return program, job, ranks, cfg


def _give_up(store, key: StoreKey, devices: list[str], claimed: list[str], exc: BaseException) -> None:
    """After a failure before computing: free this worker's claims and leave its error for the driver
    (which names it if no worker serves the device in time); a worker refused because another serves the
    device leaves nothing."""
    try:
        for d in claimed:
            store.add(f"claim/{d}", -1)
        if isinstance(exc, rendezvous.Refused):
            return
        why = str(exc) if isinstance(exc, HetsplitError) else f"{type(exc).__name__}: {exc}".rstrip(": ")
        remote = json.loads(get_sealed(store, key, "remote", "worker", cap=1 << 20))
        for d in devices:
            if isinstance(remote, dict) and type(remote.get(d)) is int:
                set_sealed(store, key, f"failed/{remote[d]}", why[:4000].encode())
    except (RuntimeError, OSError, HetsplitError, ValueError, RecursionError):
        pass
