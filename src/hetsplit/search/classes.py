"""Interchangeable-device classes: the tables every pipeline DP of hetsplit runs on.

Search space (shared with DONNA and PipeEdge): a plan is a sequence of stages of consecutive
layers, each on a distinct device; not every device has to take part.

Devices are collapsed into *classes* of interchangeable devices: same cost type, same memory, the
same link (bandwidth, latency, energy) to and from every other device, the same role (source,
sink, allowed to run the first stage). A class of n devices contributes a digit 0..n to a
mixed-radix *multiset index* S in 0..M-1 (M = prod(n_c + 1)); for all-different devices this is
the usual subset bitmask, for a typed cluster with uniform links it is PipeEdge's multiset of
types. Every table below is indexed by classes, never by devices.

The kernels (``reach`` for feasibility families, ``value_dp`` for lexicographic values) run over states (cut position k, class c of the stage starting at k, multiset S of
classes used so far, c included):

- ``reach``: boolean families, "which S can have a stage of class c start at cut k with every
  stage and transfer <= T"; a feasibility test for a bottleneck bound T (bool arrays, OR-reduced
  as uint64 words), used by the parametric (binary) search of ``exact``.
- ``value_dp``: a lexicographic (primary, secondary) minimum over the same states, under the
  same bound T. Primary and secondary are each ``energy`` (sum), ``latency`` (sum) or
  ``bottleneck`` (max). (energy, bottleneck) and (energy, latency) are decomposable because the
  primary is an additive sum of non-negative terms; (bottleneck, *) is exact in its primary only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError, InfeasibleError
from hetsplit.plan.evaluate import make_plan
from hetsplit.plan.types import Plan
from hetsplit.search.base import PipelineConstraints


@dataclass
class ClassModel:
    """Class-indexed cost tables of a SplitProblem under PipelineConstraints."""

    problem: SplitProblem
    members: list[list[int]]      # device indices of each class
    time: np.ndarray              # (L+1, L+1, C) stage compute seconds, inf if invalid/not fitting
    energy: np.ndarray            # (L+1, L+1, C) stage compute joules
    tr_time: np.ndarray           # (L+1, C, C) transfer seconds at cut k, inf if not allowed
    tr_energy: np.ndarray         # (L+1, C, C)
    src_time: np.ndarray          # (C,) input transfer to a first stage of class c (inf: not allowed)
    src_energy: np.ndarray
    snk_time: np.ndarray          # (C,) output transfer from a last stage of class c
    snk_energy: np.ndarray
    max_stages: int

    @property
    def num_layers(self) -> int:
        return self.time.shape[0] - 1

    @property
    def num_classes(self) -> int:
        return len(self.members)

    @cached_property
    def counts(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.int64)

    @cached_property
    def strides(self) -> np.ndarray:
        return np.concatenate([[1], np.cumprod(self.counts + 1)[:-1]]).astype(np.int64)

    @cached_property
    def num_multisets(self) -> int:
        return int(np.prod(self.counts + 1))

    @cached_property
    def num_stages(self) -> np.ndarray:
        """Digit sum of each multiset index (how many stages it stands for)."""
        m = np.arange(self.num_multisets)
        total = np.zeros(self.num_multisets, dtype=np.int64)
        for c in range(self.num_classes):
            total += (m // self.strides[c]) % (self.counts[c] + 1)
        return total

    @staticmethod
    def within(values, bound: float):
        """Finite and <= bound (inf marks what cannot happen, even under an infinite bound)."""
        return np.isfinite(values) & (values <= bound)

    def candidates(self) -> np.ndarray:
        """Sorted distinct finite values a plan's bottleneck can take."""
        vals = [self.time[np.isfinite(self.time)], self.tr_time[np.isfinite(self.tr_time)],
                self.src_time[np.isfinite(self.src_time)], self.snk_time[np.isfinite(self.snk_time)], [0.0]]
        return np.unique(np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in vals]))

    def lower_bound(self) -> float:
        """Largest single layer at its fastest class (every plan runs every layer somewhere)."""
        if self.num_layers == 0:
            return 0.0
        reps = [m[0] for m in self.members]
        per_layer = self.problem.costs.time_s[:, self.problem.device_type[reps]].min(axis=1)
        lb = float(per_layer.max())
        return lb if np.isfinite(lb) else 0.0


def build_classes(problem: SplitProblem, constraints: PipelineConstraints = PipelineConstraints(),
                  cut_bytes: np.ndarray | None = None) -> ClassModel:
    """Group interchangeable devices and tabulate stage and transfer costs per class.

    ``cut_bytes`` replaces the problem's cut sizes in transfers and stage memory (PipeEdge's
    last-output-only accounting); default: all bytes live across each cut.
    """
    cl = problem.cluster
    n_dev, L = problem.num_devices, problem.num_layers
    cb = problem.cut_bytes if cut_bytes is None else np.asarray(cut_bytes, dtype=np.float64)
    first = set(constraints.first_stage_indices(problem))
    src, snk = cl.source_index, cl.sink_index
    bw, lat, epb = cl.bandwidth, cl.latency_s, cl.energy_per_byte

    def swappable(a: int, b: int) -> bool:
        """Swapping devices a and b changes no cost (an automorphism; so this is an equivalence)."""
        if a in (src, snk) or b in (src, snk):
            return False
        if (problem.device_type[a] != problem.device_type[b] or problem.memory_bytes[a] != problem.memory_bytes[b]
                or (a in first) != (b in first)):
            return False
        rest = np.array([x for x in range(n_dev) if x not in (a, b)], dtype=np.int64)
        for m in (bw, lat, epb):
            if m[a, b] != m[b, a] or not (np.array_equal(m[a, rest], m[b, rest])
                                          and np.array_equal(m[rest, a], m[rest, b])):
                return False
        return True

    members: list[list[int]] = []
    for d in range(n_dev):
        for group in members:
            if swappable(group[0], d):
                group.append(d)
                break
        else:
            members.append([d])
    reps = np.array([m[0] for m in members], dtype=np.int64)
    C = len(members)

    i = np.arange(L + 1)[:, None, None]
    j = np.arange(L + 1)[None, :, None]
    t = problem.device_type[reps][None, None, :]
    valid = j > i
    with np.errstate(invalid="ignore"):
        time = np.where(valid, problem.costs.range_time(i, j, t), np.inf)
        energy = np.where(valid, problem.costs.range_energy(i, j, t), np.inf)
    if constraints.enforce_memory:
        mem = problem.costs.range_mem(i, j, t) + cb[i] + cb[j]
        fits = mem <= problem.memory_bytes[reps][None, None, :]
        time = np.where(fits, time, np.inf)
    energy = np.where(np.isfinite(time), energy, np.inf)

    # transfers between a class u and a class v at every cut k (same class: two of its devices)
    def pair_devices(cu: int, cv: int) -> tuple[int, int] | None:
        if cu != cv:
            return members[cu][0], members[cv][0]
        return (members[cu][0], members[cu][1]) if len(members[cu]) > 1 else None

    tr_time = np.full((L + 1, C, C), np.inf)
    tr_energy = np.full((L + 1, C, C), np.inf)
    for cu in range(C):
        for cv in range(C):
            pd = pair_devices(cu, cv)
            if pd is None:
                continue
            a, b = pd
            tr_time[:, cu, cv] = np.where(cb <= 0, 0.0, lat[a, b] + cb / bw[a, b])
            tr_energy[:, cu, cv] = cb * epb[a, b]
    src_time = np.zeros(C)
    src_energy = np.zeros(C)
    snk_time = np.zeros(C)
    snk_energy = np.zeros(C)
    for c, r in enumerate(reps):
        if src is not None:
            src_time[c] = 0.0 if (r == src or cb[0] <= 0) else lat[src, r] + cb[0] / bw[src, r]
            src_energy[c] = cb[0] * epb[src, r]
        if snk is not None:
            snk_time[c] = 0.0 if (r == snk or cb[L] <= 0) else lat[r, snk] + cb[L] / bw[r, snk]
            snk_energy[c] = cb[L] * epb[r, snk]
        if r not in first:
            src_time[c] = np.inf
    max_stages = min(constraints.max_stages or n_dev, n_dev, L)
    return ClassModel(problem, members, time, energy, tr_time, tr_energy, src_time, src_energy,
                      snk_time, snk_energy, max_stages)


def relaxed_min_bottleneck(cm: ClassModel) -> tuple[float, list[int], list[int]]:
    """Min bottleneck when a class may be used any number of times (a lower bound), and its path.

    O(L^2 C + L C^2); if the returned path uses no class more often than it has devices (and has
    at most ``max_stages`` stages) it is optimal for the real problem too.
    """
    L, C = cm.num_layers, cm.num_classes
    r = np.full((L + 1, C), np.inf)
    r[0] = np.where(np.isfinite(cm.src_time), cm.src_time, np.inf)
    arg_k = np.zeros((L + 1, C), dtype=np.int64)
    arg_u = np.zeros((L + 1, C), dtype=np.int64)
    end = np.full((L + 1, C), np.inf)
    for j in range(1, L + 1):
        cand = np.maximum(r[:j], cm.time[:j, j, :])          # (j, C)
        arg_k[j] = np.argmin(cand, axis=0)
        end[j] = cand[arg_k[j], np.arange(C)]
        if j < L:
            via = np.maximum(end[j][:, None], cm.tr_time[j])   # (u, v)
            arg_u[j] = np.argmin(via, axis=0)
            r[j] = via[arg_u[j], np.arange(C)]
    final = np.maximum(end[L], cm.snk_time)
    c = int(np.argmin(final))
    best = float(final[c])
    if not np.isfinite(best):
        return best, [], []
    bounds, classes, j = [L], [c], L
    while True:
        k = int(arg_k[j, c])
        if k == 0:
            break
        u = int(arg_u[k, c])
        bounds.append(k)
        classes.append(u)
        j, c = k, u
    bounds.append(0)
    return best, bounds[::-1], classes[::-1]


def path_is_valid(cm: ClassModel, classes: list[int]) -> bool:
    """No class used more often than it has devices, and at most max_stages stages."""
    used = np.bincount(np.asarray(classes, dtype=np.int64), minlength=cm.num_classes)
    return bool((used <= cm.counts).all() and len(classes) <= cm.max_stages)


def path_bottleneck(cm: ClassModel, bounds: list[int], classes: list[int]) -> float:
    """The bottleneck of a class path from the tables (equals the evaluator's, bit for bit)."""
    terms = [cm.src_time[classes[0]], cm.snk_time[classes[-1]]]
    for s, c in enumerate(classes):
        terms.append(cm.time[bounds[s], bounds[s + 1], c])
        if s:
            terms.append(cm.tr_time[bounds[s], classes[s - 1], c])
    return float(max(terms))


def check_layers_fit(cm: ClassModel) -> None:
    """Raise InfeasibleError naming the first layer that no stage on any device can hold or run."""
    p = cm.problem
    L = cm.num_layers
    if L == 0:
        return
    finite = np.isfinite(cm.time)                    # (k, j, c): stage k..j-1 runs and fits
    # layer l is covered by some stage k <= l < j
    ok_kj = finite.any(axis=2)
    covered = np.zeros(L, dtype=bool)
    for k in range(L):
        js = np.flatnonzero(ok_kj[k])
        if js.size:
            covered[k:js.max()] = True
    if covered.all():
        return
    l = int(np.flatnonzero(~covered)[0])
    name = p.graph.layers[l].name
    devs = np.arange(p.num_devices)
    runnable = np.isfinite(p.stage_time(l, l + 1, devs))
    if not runnable.any():
        raise InfeasibleError(f"layer {name!r} fits nowhere: no device type can run it "
                              f"(types: {p.cluster.types})")
    need = float(np.min(p.stage_mem(l, l + 1, devs[runnable])))
    raise InfeasibleError(f"layer {name!r} fits nowhere: needs {need:.6g} bytes, largest device has "
                          f"{float(p.memory_bytes.max()):.6g}")


def check_state_budget(cm: ClassModel, arrays: int, budget_bytes: float, algorithm: str) -> None:
    """Refuse (with the numbers) a value DP whose float tables would exceed ``budget_bytes``."""
    need = arrays * 8 * (cm.num_layers + 1) * cm.num_classes * cm.num_multisets
    if need > budget_bytes:
        raise HetsplitError(
            f"{algorithm}: {cm.num_classes} device classes ({cm.num_multisets} device multisets) x "
            f"{cm.num_layers + 1} cuts need {need / 2**30:.1f} GiB of DP tables (budget "
            f"{budget_bytes / 2**30:.1f} GiB); devices collapse into classes only when type, memory and links "
            "agree. Use --algo exact (bounded memory) or fewer distinct devices")


def infeasible_message(cm: ClassModel, bound: float | None = None) -> str:
    what = "" if bound is None else f" with a bottleneck <= {bound:.6g} s"
    return (f"no pipeline over the {cm.problem.num_devices} devices of {cm.problem.cluster.name!r} "
            f"(one stage per device, at most {cm.max_stages} stages{', first stage restricted' if np.isinf(cm.src_time).any() else ''})"
            f" fits memory{what}")


def class_path_devices(cm: ClassModel, classes: list[int]) -> list[int]:
    """Concrete devices for a path of classes (the k-th use of a class takes its k-th member)."""
    used: dict[int, int] = {}
    out = []
    for c in classes:
        n = used.get(c, 0)
        out.append(cm.members[c][n])
        used[c] = n + 1
    return out


def to_plan(cm: ClassModel, bounds: list[int], classes: list[int], algorithm: str, params: dict) -> Plan:
    """A Plan with the evaluator's metrics."""
    return make_plan(cm.problem, bounds, class_path_devices(cm, classes), algorithm, params)

