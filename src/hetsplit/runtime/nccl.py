"""NCCL between GPU devices (guarded: used only where CUDA and NCCL are present).

Each worker decides on its own host whether it computes on a GPU (``runtime.executor``) and says so
under ``hetsplit/gpu/<rank>`` in the rendezvous store; every worker reads the others' (``gpu_ranks``),
so all agree which ranks are GPUs even across hosts. Point-to-point messages whose both ends are GPU
ranks move CUDA tensors over a second process group, NCCL, made of the GPU ranks only (sub-ranks in
rank order, rendezvous under a prefix of the same store). Everything else stays on gloo through host
memory.

NCCL point-to-point has no tags: a pair's messages match in the order the two ends post them, and both
directions of a pair share one stream (PyTorch makes one communicator per pair, keyed by the two ranks,
when the group is made without a device, as here), where a receive posted ahead would hold up the sends
behind it. So a GPU pair moves its messages over NCCL only where that is safe by construction
(``nccl_pairs``, a pure function of the manifest and the run's rounds that every rank computes alike):
its messages go one way, and the receiver posts them in exactly the order the sender sends them. Rounds
can reorder a pair's messages (a consumer that also waits on a longer path through a third device lags
more than one fed directly); such a pair, and any pair with traffic both ways, moves over gloo instead.

``TORCH_NCCL_BLOCKING_WAIT`` makes ``Work.wait(timeout)`` block the host with the same timeout
semantics as gloo. Without a GPU this module is never engaged (no GPU
ranks), so the CPU path does not depend on it.
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Manifest, TensorSpec
from hetsplit.runtime.rounds import p2p_order, rounds, segment_lags

BLOCKING_WAIT_ENV = {"TORCH_NCCL_BLOCKING_WAIT": "1"}


def gpu_ranks(store: dist.Store, rank: int, world: int, on_gpu: bool) -> list[int]:
    """Publish whether worker ``rank`` computes on a GPU and read every worker's (ranks 1 .. world - 1;
    the driver never does); blocks until all have said, within the store's timeout."""
    store.set(f"hetsplit/gpu/{rank}", "1" if on_gpu else "0")
    return [r for r in range(1, world) if store.get(f"hetsplit/gpu/{r}") == b"1"]


def nccl_pairs(manifest: Manifest, gpus: list[int], inputs: int, latency_inputs: int) -> set[tuple[int, int]]:
    """The (sender, receiver) GPU rank pairs whose messages may move over NCCL (see the module doc): one
    way only, received in the order sent, over the run's ``inputs`` in its rounds."""
    p2p = [m for m in manifest.messages if m.src_rank in gpus and m.dst_rank in gpus]
    pairs = {(m.src_rank, m.dst_rank) for m in p2p}
    one_way = {(a, b) for a, b in pairs if (b, a) not in pairs}
    if not one_way:
        return set()
    lags = segment_lags(manifest)
    plans = {r: rounds([lags[r, s.index] for s in manifest.worker(r).segments], inputs, latency_inputs)
             for r in {r for pair in one_way for r in pair}}
    safe = set()
    for a, b in one_way:
        sent = (x for x in p2p_order(manifest, a, plans[a], True) if manifest.message(x[1]).dst_rank == b)
        got = (x for x in p2p_order(manifest, b, plans[b], False) if manifest.message(x[1]).src_rank == a)
        if all(x == y for x, y in itertools.zip_longest(sent, got)):   # streamed: a long run's orders are long
            safe.add((a, b))
    return safe


def nccl_usable() -> bool:
    return torch.cuda.is_available() and dist.is_nccl_available()


@dataclass
class NcclLinks:
    """The NCCL group of the GPU ranks and the sub-rank of each of them."""

    pg: dist.ProcessGroup
    sub: dict[int, int]          # global rank -> NCCL sub-rank
    peers: set[int]              # the global ranks this one exchanges messages with over NCCL (``nccl_pairs``)

    @classmethod
    def open(cls, store: dist.Store, rank: int, ranks: list[int], timeout_s: float, me: str,
             pairs: set[tuple[int, int]]) -> "NcclLinks":
        """This GPU rank's part of the NCCL group of all GPU ranks ``ranks`` (every one of them opens it),
        carrying its messages of the ``pairs`` it is in."""
        if not nccl_usable():
            raise RuntimeFailure(f"device {me}: GPU-to-GPU links need CUDA and NCCL, which this host lacks")
        local = ranks.index(rank)     # the worker chose its CUDA device before loading its executors
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = datetime.timedelta(seconds=timeout_s)
        pg = dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", store), local, len(ranks), opts)
        peers = {b if a == rank else a for a, b in pairs if rank in (a, b)}
        # torch types ProcessGroupNCCL as a Backend; torch.distributed takes it as a group
        return cls(pg, {r: i for i, r in enumerate(ranks)}, peers)  # type: ignore[arg-type]

    def carries(self, peer: int) -> bool:
        return peer in self.peers

    def send(self, tensors: list, peer: int) -> list:
        return [self.pg.send([_cuda(t)], self.sub[peer], 0) for t in tensors]

    def recv(self, buffers: list[torch.Tensor], peer: int) -> list:
        return [self.pg.recv([b], self.sub[peer], 0) for b in buffers]


def _cuda(a) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.contiguous().cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def cuda_empty(spec: TensorSpec) -> torch.Tensor:
    """A receive buffer on this process's GPU."""
    return torch.empty(spec.shape, dtype=torch.from_numpy(np.empty(0, spec.dtype)).dtype, device="cuda")


def use_gpu_of(rank: int) -> None:
    """Make worker ``rank``'s CUDA device current (workers sharing a host take its GPUs in turn)."""
    torch.cuda.set_device((rank - 1) % torch.cuda.device_count())
