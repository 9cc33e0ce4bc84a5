"""NCCL between GPU devices (guarded: used only where CUDA and NCCL are present).

Edges whose both ends are GPU devices move CUDA tensors over a second process group, NCCL, made
of the GPU ranks only (sub-ranks in rank order, rendezvous under a prefix of the same store).
Everything else stays on gloo through host memory. ``TORCH_NCCL_BLOCKING_WAIT`` makes
``Work.wait(timeout)`` block the host with the same timeout semantics as gloo. Without a GPU
this module is never engaged (no GPU ranks), so the CPU path does not depend on it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Manifest, TensorSpec

BLOCKING_WAIT_ENV = {"TORCH_NCCL_BLOCKING_WAIT": "1"}


def gpu_ranks(manifest: Manifest, kinds: dict[str, str]) -> list[int]:
    """Ranks whose device runs on a GPU (the driver never does)."""
    return [w.rank for w in manifest.stages if kinds.get(w.device) == "gpu"]


def nccl_usable() -> bool:
    return torch.cuda.is_available() and dist.is_nccl_available()


@dataclass
class NcclLinks:
    """The NCCL group of the GPU ranks and the sub-rank of each of them."""

    pg: dist.ProcessGroup
    sub: dict[int, int]          # global rank -> NCCL sub-rank

    @classmethod
    def open(cls, store: dist.Store, rank: int, ranks: list[int], timeout_s: float, me: str) -> "NcclLinks":
        if not nccl_usable():
            raise RuntimeFailure(f"device {me}: GPU-to-GPU links need CUDA and NCCL, which this host lacks")
        local = ranks.index(rank)
        torch.cuda.set_device(local % torch.cuda.device_count())
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = datetime.timedelta(seconds=timeout_s)
        pg = dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", store), local, len(ranks), opts)
        return cls(pg, {r: i for i, r in enumerate(ranks)})

    def carries(self, peer: int) -> bool:
        return peer in self.sub

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
