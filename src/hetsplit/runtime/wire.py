"""Moving tensors between processes with torch.distributed point-to-point (gloo, NCCL between GPU ends).

``connect`` joins a run's rendezvous (rank 0 serves it and writes its port to ``port.txt``) and opens
the gloo group every process of the run is in. Only tensors cross the wire. Shapes and dtypes come from
the manifest, so a message is just the tensors of an edge, each under its own tag (the edge's first tag
plus its slot in the edge). At start-up both ends of every edge exchange a fixed-layout int64 tensor
``[MAGIC, n_tensors, nbytes, signature]`` and refuse to run if they disagree. Every wait has a timeout; failures become
``RuntimeFailure`` naming this device, the peer and the cause.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime import rendezvous
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import Edge

MAGIC = 0x48535031  # "HSP1"
HANDSHAKE_TAG = 1 << 20
READY_TAG = HANDSHAKE_TAG + 1


class LinkFailure(RuntimeFailure):
    """A transfer that failed; ``kind`` is 'stall' (timed out) or 'lost' (peer gone)."""

    def __init__(self, message: str, kind: str, peer: str):
        super().__init__(message)
        self.kind, self.peer = kind, peer


def host_tensor(a) -> torch.Tensor:
    """A CPU tensor sharing memory with a numpy array (or a GPU tensor copied to the host)."""
    if isinstance(a, torch.Tensor):
        return a.detach().contiguous().cpu()
    return torch.from_numpy(a if isinstance(a, np.ndarray) and a.flags.c_contiguous else np.ascontiguousarray(a))


class HostViews:
    """torch views of long-lived host buffers (a worker's pooled receive buffers), each made once: a
    tensor made per message (``torch.from_numpy``) and dropped after it costs ~10 µs of a message's
    critical path and shows in gloo's own post; arrays not registered get a fresh view. ``known``: per
    registered array's id, the array, its tensor, and the one-tensor list a post takes (made once too)."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[np.ndarray, torch.Tensor, list[torch.Tensor]]] = {}

    def add(self, a: np.ndarray) -> np.ndarray:
        """Register ``a`` (kept alive here, so its id stays its own) and return it."""
        t = torch.from_numpy(a)
        self.known[id(a)] = (a, t, [t])
        return a

    def tensor(self, a) -> torch.Tensor:
        """The tensor sharing ``a``'s memory: its registered view, else ``host_tensor(a)``."""
        view = self.known.get(id(a))
        return view[1] if view is not None and view[0] is a else host_tensor(a)

    def listed(self, a) -> list[torch.Tensor]:
        """``[tensor(a)]``, as a post takes it: a registered array's list, made once (the transport copies
        the list it is given, keeping none), else a fresh one."""
        view = self.known.get(id(a))
        return view[2] if view is not None and view[0] is a else [host_tensor(a)]


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def open_store(rank: int, world: int, host: str, port: int, timeout_s: float) -> dist.TCPStore:
    """A bare store for a group built by hand (tests, benches): rank 0 serves it, the others join. Runs
    meet through ``connect`` (their token, ``runtime.rendezvous``)."""
    try:
        return dist.TCPStore(host, port, world, rank == 0, _td(timeout_s), wait_for_workers=False)
    except (RuntimeError, OSError) as exc:
        raise RuntimeFailure(f"rank {rank}: cannot {'serve' if rank == 0 else 'reach'} a store at {host}:{port} "
                             f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None


def open_group(store: dist.Store, rank: int, world: int, addr: str, timeout_s: float) -> dist.ProcessGroup:
    """A gloo process group whose sockets bind to ``addr`` (this process's address on the network)."""
    opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # torch exposes gloo's options only so
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=addr)]
    opts._timeout = _td(timeout_s)
    return dist.ProcessGroupGloo(store, rank, world, opts)  # type: ignore[return-value]  # a Backend, used as a group


@dataclass
class Wire:
    """Point-to-point transfers of one process, with timeouts and errors that name the peer."""

    pg: dist.ProcessGroup
    me: str
    timeout_s: float
    nccl: Any = None               # runtime.nccl.NcclLinks between GPU devices, where there are any
    store: Any = None              # the run's part of the rendezvous store (subgroups and NCCL meet under it)
    base: Any = None               # the store itself (its server lives in the driver, or in the launcher)
    views: HostViews = field(default_factory=HostViews)   # tensors of the buffers reused across messages

    def __post_init__(self) -> None:
        self.work_timeout = _td(self.timeout_s)   # what each wait is given, made once: a wait per message end

    def on_gpu(self, edge: Edge) -> bool:
        """True when the edge moves CUDA tensors over NCCL (both ends are GPU devices)."""
        return self.nccl is not None and self.nccl.carries(edge.rank)

    def empty(self, edge: Edge) -> list:
        """Receive buffers for the edge's tensors: on this process's GPU for an NCCL edge, else numpy."""
        if self.on_gpu(edge):
            from hetsplit.runtime.nccl import cuda_empty

            return [cuda_empty(t) for t in edge.tensors]
        return [t.empty() for t in edge.tensors]

    def post(self, edge: Edge, arrays: list, sending: bool) -> list:
        """Post the edge's sends (or receives); a transport error becomes a LinkFailure naming the peer.
        (Each message's critical path runs through here: the gloo case is inlined.)"""
        try:
            if self.on_gpu(edge):
                return self.nccl.send(arrays, edge.rank) if sending else self.nccl.recv(arrays, edge.rank)
            post, tensor = (self.pg.send if sending else self.pg.recv), self.views.tensor
            return [post([tensor(a)], edge.rank, edge.tag + slot) for slot, a in enumerate(arrays)]
        except RuntimeError as exc:
            raise self.failure(edge.peer, sending, exc) from None

    def wait(self, works: list, edge: Edge, sending: bool) -> None:
        try:
            for w in works:
                w.wait(self.work_timeout)
        except RuntimeError as exc:
            raise self.failure(edge.peer, sending, exc) from None

    def failure(self, peer: str, sending: bool, exc: BaseException) -> LinkFailure:
        text = str(exc)
        low = text.lower()
        if "timed out" in low or "timeout" in low:
            what = (f"{peer} took no tensor" if sending else f"nothing arrived from {peer}")
            return LinkFailure(f"device {self.me}: {what} within {self.timeout_s:g} s: the link stalled or {peer} "
                               "hangs", "stall", peer)
        if "closed" in low or "reset" in low or "broken pipe" in low or "connection" in low:
            return LinkFailure(f"device {self.me}: lost the connection to {peer} (it died or closed the link)",
                               "lost", peer)
        first = text.splitlines()[0] if text else type(exc).__name__
        return LinkFailure(f"device {self.me}: transfer with {peer} failed: {first}", "lost", peer)

    def ready(self, names: Sequence[str]) -> None:
        """Wait until every process of the run is set up to stream (``names[r]``: rank r's device, rank 0
        the driver): each rank tells the driver, which then tells each to go. The first input's latency is
        then the plan's, not the start-up of the slowest worker: the driver sent it while workers still made
        their buffers and threads (40-70 ms under link emulation here, 1.3 s at an emulated CPU share of
        0.11). A rank that never comes ends the wait within the run's timeout, named."""
        flag = torch.zeros(1, dtype=torch.int64)
        hear: tuple[Callable[..., Any], bool] = (self.pg.recv, False)    # (post, sending)
        tell: tuple[Callable[..., Any], bool] = (self.pg.send, True)
        if self.pg.rank() == 0:     # the driver hears every worker, then tells each to go
            peers, steps = [Edge(n, r, (), READY_TAG) for r, n in enumerate(names) if r], (hear, tell)
        else:                       # a worker tells the driver it is here, then hears the go
            peers, steps = [Edge(names[0], 0, (), READY_TAG)], (tell, hear)
        for post, sending in steps:
            for e in peers:
                self.wait([post([flag], e.rank, READY_TAG)], e, sending)

    def handshake(self, recv: list[Edge], send: list[Edge]) -> None:
        """Check that both ends of every edge expect the same tensors (fixed-layout int64 tensors)."""
        out = [(e, torch.tensor([MAGIC, len(e.tensors), e.nbytes, e.signature()], dtype=torch.int64)) for e in send]
        inc = [(e, torch.zeros(4, dtype=torch.int64)) for e in recv]
        sends = [(e, self.pg.send([t], e.rank, HANDSHAKE_TAG)) for e, t in out]
        recvs = [(e, t, self.pg.recv([t], e.rank, HANDSHAKE_TAG)) for e, t in inc]
        for e, t, w in recvs:
            self.wait([w], e, sending=False)
            got = [int(x) for x in t.tolist()]
            want = [MAGIC, len(e.tensors), e.nbytes, e.signature()]
            if got != want:
                raise RuntimeFailure(
                    f"device {self.me}: {e.peer} sends {got[1]} tensors / {got[2]} bytes (signature {got[3]}) but the "
                    f"manifest here expects {want[1]} / {want[2]} (signature {want[3]}): the processes were given "
                    "different manifests; split again and copy the same directory to every host")
        for e, w in sends:
            self.wait([w], e, sending=True)


def connect(cfg: RunConfig, world: int, device: str, rank: int, run_dir: Path) -> Wire:
    """Join the run's rendezvous (the driver serves it and writes port.txt, unless the launcher does) with
    the run's token, and open the run's gloo group under the token's prefix."""
    who = "driver" if rank == 0 else f"device {device}"
    if rank == 0 and not cfg.launcher_serves:
        base = rendezvous.serve(cfg.master_port, cfg.token, cfg.startup_timeout_s, who)
        tmp = run_dir / "port.txt.tmp"
        tmp.write_text(str(base.port))
        tmp.rename(run_dir / "port.txt")
    else:
        base = rendezvous.join(cfg.master_addr, cfg.master_port, cfg.token, cfg.startup_timeout_s, who)
    store = rendezvous.scoped(base, cfg.token)
    try:
        pg = open_group(store, rank, world, cfg.addr(rank), cfg.startup_timeout_s)
    except RuntimeError as exc:
        raise RuntimeFailure(f"device {device}: could not connect to the other processes within "
                             f"{cfg.startup_timeout_s:g} s ({str(exc).splitlines()[0]})") from None
    wire = Wire(pg, device, cfg.timeout_s)
    wire.store, wire.base = store, base  # keep the store (and, on rank 0, its server) alive for the whole run
    return wire
