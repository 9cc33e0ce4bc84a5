"""A plan's run order (``Plan.order``): validated against its TaskGraph and turned into chain pairs.

A device named in ``order`` lists every one of its tasks once, in the order it runs them; the
consecutive pairs become ``TaskGraph.chain`` (the first finishes before the second starts). An order
that contradicts the tasks' dependencies (a task listed before one it needs) would deadlock: it is
refused naming the device and the two tasks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from hetsplit.errors import PlanError
from hetsplit.plan.tasks import TaskGraph


def apply_order(tg: TaskGraph, order: dict[str, list[str]]) -> TaskGraph:
    """``tg`` with the chain pairs of ``order`` (validated); ``tg`` itself when there is no order."""
    if not order:
        return tg
    names = tg.cluster.names
    pairs: list[tuple[int, int]] = []
    for dev, listed in order.items():
        if dev not in names:
            raise PlanError(f"order names device {dev!r}, which is not in cluster {tg.cluster.name!r}")
        d = names.index(dev)
        mine = {t.name: k for k, t in enumerate(tg.tasks) if t.device == d}
        unknown = [n for n in listed if n not in mine]
        if unknown:
            raise PlanError(f"order[{dev!r}] names {unknown[:3]}, which {dev!r} does not run; its tasks are "
                            f"{sorted(mine)[:8]}{' ...' if len(mine) > 8 else ''}")
        twice = sorted({n for n in listed if listed.count(n) > 1})
        if twice:
            raise PlanError(f"order[{dev!r}] lists {twice[:3]} more than once; list each task once")
        missing = [n for n in mine if n not in listed]
        if missing:
            raise PlanError(f"order[{dev!r}] leaves out {missing[:3]}; a device's order lists all its tasks "
                            f"({len(mine)})")
        idx = [mine[n] for n in listed]
        pairs += list(zip(idx, idx[1:]))
    chain = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    _refuse_cycles(tg, chain)
    return replace(tg, chain=chain)


def _refuse_cycles(tg: TaskGraph, chain: np.ndarray) -> None:
    """Raise PlanError when the dependencies and the chain pairs form a cycle (the order deadlocks)."""
    succ: list[list[int]] = [[] for _ in range(tg.num_tasks)]
    for a, b in zip(tg.edge_src, tg.edge_dst):
        if a >= 0 and b >= 0:
            succ[int(a)].append(int(b))
    for a, b in chain:
        succ[int(a)].append(int(b))
    indeg = np.zeros(tg.num_tasks, dtype=np.int64)
    for out in succ:
        for b in out:
            indeg[b] += 1
    queue = deque(np.flatnonzero(indeg == 0).tolist())
    seen = 0
    while queue:
        a = queue.popleft()
        seen += 1
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                queue.append(b)
    if seen == tg.num_tasks:
        return
    stuck = indeg > 0
    for a, b in chain:
        if stuck[a] and stuck[b] and _reaches(succ, int(b), int(a)):
            dev = tg.cluster.names[tg.tasks[int(a)].device]
            raise PlanError(f"order[{dev!r}] runs {tg.tasks[int(a)].name!r} before {tg.tasks[int(b)].name!r}, but "
                            f"{tg.tasks[int(a)].name!r} needs what {tg.tasks[int(b)].name!r} makes (directly or "
                            "through other tasks): the device would wait forever; swap them")
    raise PlanError("the plan's order and its dependencies form a cycle")  # not reached: a cycle has a chain pair


def _reaches(succ: list[list[int]], start: int, goal: int) -> bool:
    todo, seen = [start], {start}
    while todo:
        a = todo.pop()
        if a == goal:
            return True
        for b in succ[a]:
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return False
