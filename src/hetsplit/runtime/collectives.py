"""The gathers and scatters of a sum combine, over gloo subgroups, moving exactly the TaskGraph's messages.

Each collective of the manifest has a gloo subgroup of its own, created by every member in collective
order (a group's creation waits for all its members, so one order everywhere cannot deadlock):

- ``gather``: the members' partial (or group) sums go straight to the root (gloo's gather sends
  each member's tensor to the root, as the TaskGraph's messages do; the root's own partial stays
  local and its slot is a dummy). The Sum itself runs in the root's sum segment, so a fused
  epilogue (bias, activation) comes after it;
- ``scatter``: the root sends the reduced result to each member that reads it (gloo's scatter
  sends one tensor per member straight from the root); a leader's copy task scatters it on to its
  group the same way.

gloo's own ``reduce`` (a ring reduce-scatter, then a gather) and ``broadcast`` (a binomial tree)
would move other bytes over other links than the plan's messages, and would sum outside the
segment that must apply the epilogue after the sum; gather and scatter move exactly the messages.
A rank is either the root or a member of a collective, never both, so one thread posts all its
operations on a subgroup, in input order, on every member alike.

Timeouts: a collective counts its timeout from when gloo starts it, which for a receive posted ahead
is up to ``depth`` inputs early, so ``timeout_s`` must exceed the time of a few inputs.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import GATHER, Collective, Edge, Manifest, TensorSpec
from hetsplit.runtime.wire import HostViews, Wire, open_group


def open_groups(manifest: Manifest, rank: int, wire: Wire, cfg: RunConfig) -> dict[int, dist.ProcessGroup]:
    """A gloo subgroup for every collective this rank joins, created in collective order."""
    me = manifest.worker(rank).device
    groups = {}
    for c in manifest.collectives:
        if rank not in c.ranks:
            continue
        store = dist.PrefixStore(f"hetsplit-collective-{c.id}/", wire.store)
        try:
            groups[c.id] = open_group(store, c.ranks.index(rank), len(c.ranks), cfg.addr(rank), cfg.startup_timeout_s)
        except RuntimeError as exc:
            raise RuntimeFailure(f"device {me}: could not form the {c.kind} group of layer {c.layer!r} with "
                                 f"{', '.join(m for m in c.members if m != me)} within {cfg.startup_timeout_s:g} s "
                                 f"({str(exc).splitlines()[0]})") from None
    return groups


class Collectives:
    """Posts the gathers and scatters of one rank (asynchronous ops on its subgroups)."""

    def __init__(self, manifest: Manifest, rank: int, groups: dict[int, dist.ProcessGroup], timeout_s: float,
                 views: HostViews):
        self.m, self.rank, self.groups = manifest, rank, groups
        self.views = views                  # tensors of pooled buffers, made once (``Wire.views``)
        self.timeout = datetime.timedelta(seconds=timeout_s)

    def peers(self, c: Collective) -> Edge:
        """A pseudo edge naming the other members (for the errors of Wire.wait)."""
        me = self.m.worker(self.rank).device
        return Edge(", ".join(x for x in c.members if x != me) if me == c.root else c.root, -1, ())

    def _opts(self, c: Collective, kind):
        o = kind()
        o.rootRank, o.timeout = c.members.index(c.root), self.timeout
        return o

    def post_recv(self, c: Collective, empty: Callable[[TensorSpec], np.ndarray] = TensorSpec.empty
                  ) -> tuple[list, dict[int, list[np.ndarray]]]:
        """Post this rank's receiving side (the root of a gather, or a member of a scatter) into buffers
        from ``empty``."""
        pg = self.groups[c.id]
        msgs = [self.m.message(mid) for mid in c.messages]
        if c.kind == GATHER:
            got: dict[int, list[np.ndarray]] = {m.id: [] for m in msgs}
            works = []
            for spec in (t.spec for t in msgs[0].tensors):
                bufs = [empty(spec) for _ in c.members]
                outs = [self.views.tensor(b) for b in bufs]
                works.append(pg.gather([outs], [torch.zeros(spec.shape, dtype=outs[0].dtype)], self._opts(
                    c, dist.GatherOptions)))
                for m in msgs:
                    got[m.id].append(bufs[c.members.index(m.src)])
            return works, got
        mine = next(m for m in msgs if m.dst_rank == self.rank)
        bufs = [empty(t.spec) for t in mine.tensors]
        works = [pg.scatter([self.views.tensor(b)], [], self._opts(c, dist.ScatterOptions)) for b in bufs]
        return works, {mine.id: bufs}

    def post_send(self, c: Collective, arrays: dict[int, list[Any]]) -> list:
        """Post this rank's sending side (a gather's member, a scatter's root); ``arrays`` per message id."""
        pg = self.groups[c.id]
        msgs = [self.m.message(mid) for mid in c.messages]
        works = []
        if c.kind == GATHER:
            mine = next(m for m in msgs if m.src_rank == self.rank)
            for a in arrays[mine.id]:
                works.append(pg.gather([], [self.views.tensor(a)], self._opts(c, dist.GatherOptions)))
            return works
        for slot, spec in enumerate(t.spec for t in msgs[0].tensors):
            by_member = {m.dst: self.views.tensor(arrays[m.id][slot]) for m in msgs}
            dummy = torch.zeros(spec.shape, dtype=next(iter(by_member.values())).dtype)
            ins = [by_member.get(x, dummy) for x in c.members]
            works.append(pg.scatter([torch.zeros_like(dummy)], [ins], self._opts(c, dist.ScatterOptions)))
        return works
