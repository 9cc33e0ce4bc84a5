"""Symmetry of a cluster: interchangeable *units* of devices (whole boards, or single devices).

A unit class is a list of units, each a list of device indices in position order (unit ``A``'s
position ``p`` corresponds to unit ``B``'s position ``p``), such that exchanging any two units of the
class position by position is an automorphism of the problem: it preserves every device's type,
memory and role (source, sink, allowed to run the first stage, allowed to run the last) and every
link (bandwidth, latency, energy per byte, both directions). Transpositions generate all
permutations, so any permutation of the units of a class preserves every cost; the DPs count units
per usage pattern instead of naming them (``search.states``).

Candidate units are the connected components of the pairs joined by one link value (a Jetson
board: the shared-memory link inside it), by any of the rarest link values (boards whose PEs are
joined by several kinds of link), or by the links that differ from the most common one;
every candidate grouping is checked as an automorphism, so a wrong guess only costs speed, never
exactness, and the grouping with the fewest DP states is kept. Devices not in a multi-unit
class of multi-device units become single-device units, grouped by the same check (plain classes
of interchangeable devices).
"""

from __future__ import annotations

import itertools
from collections import Counter
from math import comb

import numpy as np

from hetsplit.costs.problem import SplitProblem

MAX_UNIT_SIZE = 6  # position matchings tried per unit pair: at most 6! (boards have 2 PEs)
MAX_RADIX_STATES = 2**22  # a grouping whose mixed-radix state index would exceed this is not used


class Symmetry:
    """Automorphism checks on one problem's devices."""

    def __init__(self, problem: SplitProblem, first: set[int], last: set[int] | frozenset[int] = frozenset()):
        cl, n = problem.cluster, problem.num_devices
        special = {cl.source_index, cl.sink_index} - {None}
        self.color = [(int(problem.device_type[d]), float(problem.memory_bytes[d]), d in first, d in last,
                       d if d in special else -1) for d in range(n)]
        self.links = link_matrices(cl)
        self.n = n

    def exchange_ok(self, a: list[int], b: list[int]) -> bool:
        """Is exchanging devices a[i] <-> b[i] (disjoint lists) an automorphism?"""
        perm = np.arange(self.n)
        perm[a], perm[b] = b, a
        if any(self.color[x] != self.color[y] for x, y in zip(a, b)):
            return False
        return all(np.array_equal(m[np.ix_(perm, perm)], m) for m in self.links)

    def match(self, ref: list[int], unit: list[int]) -> list[int] | None:
        """``unit`` reordered so that exchanging it with ``ref`` position by position is an automorphism."""
        if len(ref) != len(unit) or len(unit) > MAX_UNIT_SIZE:
            return None
        for order in itertools.permutations(unit):
            if self.exchange_ok(ref, list(order)):
                return list(order)
        return None


def _group(sym: Symmetry, units: list[list[int]]) -> list[list[list[int]]]:
    """Units grouped into classes: a unit joins the first class whose reference it can replace."""
    classes: list[list[list[int]]] = []
    for u in units:
        for cls in classes:
            m = sym.match(cls[0], u)
            if m is not None:
                cls.append(m)
                break
        else:
            classes.append([u])
    return classes


def _components(n: int, edges: np.ndarray) -> list[list[int]]:
    """Connected components (of two or more devices) of a symmetric boolean adjacency matrix."""
    comp = list(range(n))

    def root(x: int) -> int:
        while comp[x] != x:
            comp[x] = comp[comp[x]]
            x = comp[x]
        return x

    for a, b in zip(*np.nonzero(edges)):
        comp[root(int(a))] = root(int(b))
    groups: dict[int, list[int]] = {}
    for d in range(n):
        groups.setdefault(root(d), []).append(d)
    return [g for g in groups.values() if len(g) > 1]


def candidate_partitions(problem: SplitProblem, max_values: int = 32) -> list[list[list[int]]]:
    """Candidate unit sets: the components of the pairs joined by one link value (for each of the
    most common values); of the pairs joined by any of the rarest values (links inside boards are
    rarer than links between them: a prefix by count); and of the links other than the most common."""
    cl, n = problem.cluster, problem.num_devices
    if n < 2:
        return []
    key = np.stack(link_matrices(cl), axis=-1)
    off = ~np.eye(n, dtype=bool)
    values = Counter(map(tuple, key[off].tolist())).most_common(max_values)
    hits = [(key == np.array(v)).all(axis=-1) & off for v, _ in values]
    hits = [h | h.T for h in hits]
    edge_sets = list(hits)
    if values:
        edge_sets.append(~hits[0] & off)
        counts = np.array([c for _, c in values])
        for c in np.unique(counts)[:-1]:
            edge_sets.append(np.logical_or.reduce([h for h, k in zip(hits, counts) if k <= c]))
    out: list[list[list[int]]] = []
    for edges in edge_sets:
        comps = _components(n, edges)
        if comps and comps not in out and not (len(comps) == 1 and len(comps[0]) == n):
            out.append(comps)
    return out


def _score(classes: list[list[list[int]]]) -> float:
    """Labels x states of a grouping (the size of a DP table row set): smaller is better; inf when
    the mixed-radix index the states are enumerated from (``search.states``) would be too large."""
    labels, states, radix = 0, 1, 1
    for c in classes:
        n, P = len(c), len(c[0])
        labels += P * 2 ** (P - 1)
        states *= comb(n + 2 ** P - 1, 2 ** P - 1)
        radix *= (n + 1) ** (2 ** P - 1)
    multi = any(len(c[0]) > 1 for c in classes)
    return float("inf") if multi and radix > MAX_RADIX_STATES else labels * states


def unit_classes(problem: SplitProblem, first: set[int], last: set[int],
                 units: bool = True) -> list[list[list[int]]]:
    """Classes of interchangeable units (see the module docstring); ``first``/``last``: the devices
    allowed to run the first/last stage; ``units=False``: single devices only.

    Of the candidate unit sets, the one whose grouping gives the fewest DP states wins (single
    devices if none does better).
    """
    sym = Symmetry(problem, first, last)

    def with_singles(multi: list[list[list[int]]]) -> list[list[list[int]]]:
        taken = {d for c in multi for u in c for d in u}
        return _group(sym, [[d] for d in range(problem.num_devices) if d not in taken]) + multi

    best = with_singles([])
    if units:
        for cands in candidate_partitions(problem):
            multi = [c for c in _group(sym, cands) if len(c) > 1]
            if multi:
                ucs = with_singles(multi)
                if _score(ucs) < _score(best):
                    best = ucs
    return best


def link_matrices(cl) -> tuple[np.ndarray, ...]:
    """Every D x D figure of a cluster's links that costs a message (``cluster.links``): devices are
    interchangeable only where all of them agree."""
    return (cl.bandwidth, cl.latency_s, cl.energy_per_byte, cl.message_cpu_s, cl.message_cpu_byte_s)
