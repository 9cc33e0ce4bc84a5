"""The worker's side of a run across hosts: ``hetsplit worker --join HOST:PORT --device D`` (``join_run``).

The worker joins the driver's rendezvous with the run's token (``runtime.rendezvous``: another run's
worker is refused), reads which program the driver runs (``program_named``: a mapping's worker,
``MappingProgram``, or a generation's, ``runtime.llm_hosts.GenerationProgram``), which fetches and checks
its job and files, claims its devices, runs their ranks under a launcher of its own whose peers are the
driver (``DriverWatch``: a beat every ``hosts.BEAT_S``, the run ended when the driver aborts or goes
away) and sends back each rank's report and results.

A worker trusts only what it checked: every value is authenticated with a key derived from the token
and sized before its bytes are read (``runtime.store_auth``); it takes from the driver only the checked
settings of ``runtime.peer_config``; every file it fetches has a plain name and is written as a new file
of its own in its run folder (``_write_fetched``). A worker that fails before it computes gives back its
devices' claims and leaves its error for the driver (``_give_up``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from hetsplit.errors import HetsplitError, RuntimeFailure, UsageError
from hetsplit.jsonfile import MAX_INPUT_ENV, ONNX_MAX_BYTES, max_input_bytes
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.hosts import BEAT_S, RUN_ID, local_addr
from hetsplit.runtime.launch import Launchable, Launcher
from hetsplit.runtime.manifest import MANIFEST_FILE, Manifest, load_manifest
from hetsplit.runtime.peer_config import remote_ranks, steps_per_input, worker_config
from hetsplit.runtime.scratch import worker_scratch
from hetsplit.runtime.store_auth import StoreKey, declared, fetch, get_sealed, put, set_sealed
from hetsplit.storeprobe import check_timeout


class DriverGone(RuntimeFailure):
    """The driver's rendezvous cannot be joined: nothing answers there, or it serves another run now."""


class AlreadyServed(rendezvous.Refused):
    """The run at the rendezvous is one this worker has served, or passed over, already (``--stay``)."""


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
    stay: bool = False             # serve the driver's next runs too, until it is gone (``serve_runs``)

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


def serve_runs(opts: JoinOptions, dog: rendezvous.Watchdog | None = None,
               said: Callable[[str], None] = lambda _: None) -> int:
    """Serve ``opts.devices`` in the runs of the driver at ``opts.host:opts.port``, each once, until it is
    gone (nothing answers there within ``opts.timeout_s``, or another run's token does); how many runs this
    worker computed in. A run that fails, or does not place these devices, is told to ``said`` and the
    worker waits for the next. Without ``opts.stay``, the first run only, its failure raised."""
    served: set[str] = set()
    runs = 0
    devices = ", ".join(opts.devices)
    while True:
        try:
            docs = join_run(opts, dog, served)
            runs += 1
            said(f"worker: {', '.join(d.get('device', '?') for d in docs.values())} finished; the driver reports "
                 "the measurements")
        except AlreadyServed:
            time.sleep(4 * BEAT_S)        # the run served last is still on: wait for the driver's next
            continue
        except DriverGone as exc:
            if not opts.stay or not served:
                raise
            said(f"worker: {devices}: no new run from the driver ({exc}); stopped, {runs} run(s) finished here")
            return runs
        except HetsplitError as exc:
            if not opts.stay:
                raise
            said(f"worker: {devices}: the run ended: {exc}; waiting for the driver's next run (--stay)")
        if not opts.stay:
            return runs


def join_run(opts: JoinOptions, dog: rendezvous.Watchdog | None = None,
             served: set[str] | None = None) -> dict[int, dict]:
    """Serve ``opts.devices`` in the run at ``opts.host:opts.port`` until it ends; their reports. With ``dog``,
    every store call is timed by it (a driver that stops answering mid-call ends the process). ``served``:
    the ids of the runs this worker took already (``AlreadyServed`` for one of them); the new one's is added.
    ``DriverGone`` when the rendezvous cannot be joined."""
    where = f"{opts.host}:{opts.port}"
    who = f"worker of {', '.join(opts.devices)}"
    try:
        base = rendezvous.join(opts.host, opts.port, opts.token, opts.timeout_s, who, dog)
    except RuntimeFailure as exc:
        raise DriverGone(str(exc)) from None
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
            program, job, ranks, cfg = _take_run(store, key, opts, run_dir, split, who, where, claimed, served)
        except AlreadyServed:
            raise
        except BaseException as exc:       # a failure before computing: free the claims, tell the driver
            _give_up(store, key, opts.devices, claimed, exc)
            raise
        watch = DriverWatch(store, key, where, ranks, run_dir, kept=opts.run_dir is not None,
                            results=program.results(job, run_dir))
        launcher = Launcher(job, cfg, run_dir, ranks=sorted(ranks), peers=watch)
        launcher.module = program.module
        return launcher.run()


def _take_run(store, key: StoreKey, opts: JoinOptions, run_dir: Path, split: Path, who: str, where: str,
              claimed: list[str], served: set[str] | None = None) -> tuple[Program, Launchable, dict[int, str], RunConfig]:
    """Fetch and check what the driver hands out, claim the devices and write the files their ranks read
    (a run whose id is in ``served``: ``AlreadyServed``, nothing claimed)."""
    try:
        store.wait(["remote"], rendezvous._td(opts.timeout_s))
        run_id = get_sealed(store, key, RUN_ID, who, cap=64).decode(errors="replace")
        if served is not None:
            if run_id in served:
                raise AlreadyServed(f"{who}: the run at {where} was served already")
            served.add(run_id)
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
