"""Runs across hosts, the driver's side: its host serves the rendezvous, every other host runs ``hetsplit
worker`` (its side: ``runtime.join``).

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

Lifetimes: a worker's run ends when its driver's does (the driver posts an abort, or the store goes
away: the launcher serving it ended or its host died); the driver ends the run, naming the device, when a
worker reports a failure, stops beating (its host died) or never joins within the startup timeout. A
worker started with ``--stay`` then joins the driver's next run at the same address and token (a
generation that goes on without a lost device, ``hetsplit generate --recover``), each run once (its
``RUN_ID``), until the driver is gone.
Per-hop transfer times compare timestamps taken on two hosts: they need the hosts' clocks in sync
(NTP); throughput and latency are the driver's own.
"""

from __future__ import annotations

import json
import socket
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hetsplit.errors import HetsplitError, RuntimeFailure, UsageError
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launchable
from hetsplit.runtime.manifest import Manifest
from hetsplit.runtime.peer_config import published, steps_per_input
from hetsplit.runtime.store_auth import StoreKey, Unauthenticated, fetch, get_sealed, put, put_file, set_sealed
from hetsplit.storeprobe import TOKEN_ENV

if TYPE_CHECKING:
    import torch.distributed as dist

BEAT_S = 0.25            # how often a worker says it is alive (and checks the driver is)
WANT = "want-files"       # a worker asks for the handout's files (published on request)
RUN_ID = "run-id"         # each run's own random id: a worker that stays (``--stay``) serves a run once
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


def worker_argv(addr: str, port: int, device: str, timeout_s: float, stay: bool = False) -> list[str]:
    """The worker command of ``device`` (``stay``: it serves the driver's next runs too, ``--stay``)."""
    return ["hetsplit", "worker", "--join", f"{addr}:{port}", "--device", device, "--timeout", f"{timeout_s:g}",
            *(["--stay"] if stay else [])]


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
                 announce: Callable[[list[WorkerCommand]], None] | None = None, stay: bool = False):
        self.job, self.hostmap, self.handout, self.announce = job, hostmap, handout, announce
        self.stay = stay            # the workers are told to serve this driver's next runs too (``--recover``)
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
        set_sealed(store, self.key, RUN_ID, rendezvous.new_token().encode())   # a worker that stays serves each once
        set_sealed(store, self.key, "remote",
                   json.dumps({self.job.worker(r).device: r for r in self.remote}).encode())
        self.t_open = time.time()
        self.beats = {r: (0, self.t_open) for r in self.remote}
        self.t_tick = 0.0
        self.commands = {r: WorkerCommand(self.job.worker(r).device, host,
                                          worker_argv(addr, cfg.master_port, self.job.worker(r).device,
                                                      cfg.timeout_s, self.stay), cfg.token)
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
