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
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import Edge

MAGIC = 0x48535031  # "HSP1"
HANDSHAKE_TAG = 1 << 20


class LinkFailure(RuntimeFailure):
    """A transfer that failed; ``kind`` is 'stall' (timed out) or 'lost' (peer gone)."""

    def __init__(self, message: str, kind: str, peer: str):
        super().__init__(message)
        self.kind, self.peer = kind, peer


def host_tensor(a) -> torch.Tensor:
    """A CPU tensor sharing memory with a numpy array (or a GPU tensor copied to the host)."""
    if isinstance(a, torch.Tensor):
        return a.detach().contiguous().cpu()
    return torch.from_numpy(np.ascontiguousarray(a))


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def open_store(rank: int, world: int, host: str, port: int, timeout_s: float) -> dist.TCPStore:
    """The rendezvous store: rank 0 serves it (port 0: the OS picks a free one), the others join."""
    try:
        return dist.TCPStore(host, port, world, rank == 0, _td(timeout_s), wait_for_workers=False)
    except (RuntimeError, OSError) as exc:
        text = str(exc)
        if rank == 0 and ("in use" in text.lower() or "address already" in text.lower() or "errno: 98" in text.lower()):
            raise RuntimeFailure(f"driver: port {port} on {host} is in use; pass another --port or 0 to pick a "
                                 "free one")
        role = "serve" if rank == 0 else "reach"
        raise RuntimeFailure(f"rank {rank}: cannot {role} the rendezvous at {host}:{port} within {timeout_s:g} s "
                             f"({text.splitlines()[0] if text else type(exc).__name__})") from None


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def open_group(store: dist.Store, rank: int, world: int, addr: str, timeout_s: float) -> dist.ProcessGroup:
    """A gloo process group whose sockets bind to ``addr`` (this process's address on the network)."""
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=addr)]
    opts._timeout = _td(timeout_s)
    return dist.ProcessGroupGloo(store, rank, world, opts)


@dataclass
class Wire:
    """Point-to-point transfers of one process, with timeouts and errors that name the peer."""

    pg: dist.ProcessGroup
    me: str
    timeout_s: float
    nccl: Any = None               # runtime.nccl.NcclLinks between GPU devices, where there are any
    store: Any = None              # the rendezvous store (subgroups and NCCL meet under prefixes of it)

    def on_gpu(self, edge: Edge) -> bool:
        """True when the edge moves CUDA tensors over NCCL (both ends are GPU devices)."""
        return self.nccl is not None and self.nccl.carries(edge.rank)

    def empty(self, edge: Edge) -> list:
        """Receive buffers for the edge's tensors: on this process's GPU for an NCCL edge, else numpy."""
        if self.on_gpu(edge):
            from hetsplit.runtime.nccl import cuda_empty

            return [cuda_empty(t) for t in edge.tensors]
        return [t.empty() for t in edge.tensors]

    def post_send(self, edge: Edge, arrays: list) -> list:
        if self.on_gpu(edge):
            return self.nccl.send(arrays, edge.rank)
        return [self.pg.send([host_tensor(a)], edge.rank, edge.tag + slot) for slot, a in enumerate(arrays)]

    def post_recv(self, edge: Edge, arrays: list) -> list:
        if self.on_gpu(edge):
            return self.nccl.recv(arrays, edge.rank)
        return [self.pg.recv([torch.from_numpy(a)], edge.rank, edge.tag + slot) for slot, a in enumerate(arrays)]

    def post(self, edge: Edge, arrays: list, sending: bool) -> list:
        """Post the edge's sends (or receives); a transport error becomes a LinkFailure naming the peer."""
        try:
            return self.post_send(edge, arrays) if sending else self.post_recv(edge, arrays)
        except RuntimeError as exc:
            raise self.failure(edge.peer, sending, exc) from None

    def wait(self, works: list, edge: Edge, sending: bool) -> None:
        try:
            for w in works:
                w.wait(_td(self.timeout_s))
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
    """Join the rendezvous and open the run's gloo group (rank 0 serves it and writes port.txt)."""
    store = open_store(rank, world, cfg.master_addr, cfg.master_port, cfg.startup_timeout_s)
    if rank == 0:
        tmp = run_dir / "port.txt.tmp"
        tmp.write_text(str(store.port))
        tmp.rename(run_dir / "port.txt")
    try:
        pg = open_group(store, rank, world, cfg.addr(rank), cfg.startup_timeout_s)
    except RuntimeError as exc:
        raise RuntimeFailure(f"device {device}: could not connect to the other processes within "
                             f"{cfg.startup_timeout_s:g} s ({str(exc).splitlines()[0]})") from None
    wire = Wire(pg, device, cfg.timeout_s)
    wire.store = store  # keep the store (and, on rank 0, its server) alive for the whole run
    return wire
