"""How many threads torch computes with where hetsplit runs a model: one, in every rank's process.

A worker's torch only moves tensors, or drives a GPU's kernels from the interpreter (``runtime.gpu``):
one intra-op and one inter-op thread, so that devices sharing a machine keep their cores. Whatever
times torch for the runtime (the GPU profiler, ``costs.profiler.torch_onnx``) times it the same way: a
launch-bound model whose interpreter runs small ops on host tensors pays a pool of threads' wake-ups
per op, which the run does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

RANK_THREADS = 1


def limit_threads() -> None:
    """This process's torch at the ranks' thread counts (for good: inter-op threads are set once)."""
    import torch

    torch.set_num_threads(RANK_THREADS)
    try:
        torch.set_num_interop_threads(RANK_THREADS)
    except RuntimeError:       # inter-op work already ran in this process: its pool is fixed
        pass


@contextlib.contextmanager
def as_a_rank() -> Iterator[None]:
    """Torch at a rank's intra-op thread count inside the block, as it was after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(RANK_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)
