"""Interchangeable-device classes: the tables every pipeline DP of hetsplit runs on.

Search space (shared with DONNA and PipeEdge): a plan is a sequence of stages of consecutive
layers, each on a distinct device; not every device has to take part.

Devices are collapsed into classes of interchangeable *units* (``search.units``): single devices
with the same cost type, memory, links and role, or whole multi-device units (boards) that can be
permuted as blocks. States count units per usage pattern (``search.states``): for single-device
units a mixed-radix multiset index S in 0..M-1 (M = prod(n_c + 1)), the subset bitmask for
all-different devices, PipeEdge's multiset of types for a typed cluster with uniform links. A
stage is described by a *label* (with single-device units: its class) and entered by a *move*
(which also says whether it stays on the current unit). Every table below is indexed by labels
and moves, never by devices.

The kernels (``reach`` for feasibility families, ``value_dp`` for lexicographic values) run over
states (cut position k, label c of the stage starting at k, usage state S so far, c included):

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

import numpy as np

from hetsplit.cluster.links import message_energy, message_time
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError, InfeasibleError
from hetsplit.estimate.evaluate import make_plan
from hetsplit.estimate.memory import table_objective
from hetsplit.plan.types import Plan
from hetsplit.search.base import PipelineConstraints
from hetsplit.search.states import StateSpace
from hetsplit.search.units import unit_classes


@dataclass
class ClassModel:
    """Label-indexed cost tables of a SplitProblem under PipelineConstraints (``search.states``)."""

    problem: SplitProblem
    members: list[list[int]]      # devices each label may stand for (a plain class: its devices)
    label_device: np.ndarray      # (C,) the device whose costs a label uses (unit 0 of its class)
    time: np.ndarray              # (L+1, L+1, C) stage seconds (``SplitProblem.stage_time``), inf if invalid/not fitting
    energy: np.ndarray            # (L+1, L+1, C) stage compute joules
    tr_time: np.ndarray           # (L+1, C, Mv) transfer seconds at cut k from label u by move m, inf if not allowed
    tr_energy: np.ndarray         # (L+1, C, Mv)
    src_time: np.ndarray          # (C,) input transfer to a first stage of label c (inf: not allowed)
    src_energy: np.ndarray
    snk_time: np.ndarray          # (C,) output transfer from a last stage of label c (inf: not allowed)
    snk_energy: np.ndarray
    max_stages: int
    space: StateSpace
    units: list[list[list[int]]]  # unit classes: units, each its devices in position order

    @property
    def num_layers(self) -> int:
        return self.time.shape[0] - 1

    @property
    def num_classes(self) -> int:
        """Number of labels (with single-device units: device classes)."""
        return len(self.members)

    @property
    def counts(self) -> np.ndarray:
        """Units per unit class (with single-device units: devices per class)."""
        return self.space.sizes

    @property
    def strides(self) -> np.ndarray:
        return self.space.strides

    @property
    def num_multisets(self) -> int:
        return self.space.M

    @property
    def num_stages(self) -> np.ndarray:
        """Stages (used devices) each state stands for."""
        return self.space.num_stages

    @property
    def move_label(self) -> np.ndarray:
        return self.space.move_label

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
        """Over the layers, the largest fastest stage that holds the layer (every plan runs each layer
        in some stage). Read from the stage table itself: a stage time is a difference of prefix
        sums and can lie an ulp below its single layer's time, so a bound from the raw layer times
        could exceed the table's own optimum."""
        L = self.num_layers
        if L == 0:
            return 0.0
        fastest = self.time.min(axis=2)                              # (i, j): the fastest class
        upto = np.minimum.accumulate(fastest, axis=0)                # [l, j]: min over starts i <= l
        holds = np.arange(L + 1)[None, :] > np.arange(L + 1)[:, None]  # [l, j]: j > l
        per_layer = np.where(holds, upto, np.inf)[:L].min(axis=1)
        lb = float(per_layer.max())
        return lb if np.isfinite(lb) else 0.0

    def realize(self, moves: list[int]) -> list[int] | None:
        """Devices for a path of moves (first: the label of the first stage), or None if impossible.

        A move to pattern rho at position q takes the current unit when its reserve is 0 and the
        current unit is of the same class with pattern rho - {q}, else the first other unit of that
        class with pattern rho - {q} (any such unit gives the same costs, by symmetry).
        """
        pattern = [np.zeros(len(c), dtype=np.int64) for c in self.units]
        cur: tuple[int, int] | None = None
        out = []
        for s, m in enumerate(moves):
            U, sig, r = self.space.sigma(int(m))
            q = self.space.labels[self.move_label[m]][2]
            if s and r == 0 and cur is not None and cur[0] == U and pattern[U][cur[1]] == sig:
                unit = cur[1]
            else:
                free = [i for i in np.flatnonzero(pattern[U] == sig) if cur is None or (U, i) != cur]
                if not free or (s == 0 and (r or sig)):
                    return None
                unit = int(free[0])
            pattern[U][unit] |= 1 << q
            cur = (U, unit)
            out.append(self.units[U][unit][q])
        return out if len(out) <= self.max_stages else None


def build_classes(problem: SplitProblem, constraints: PipelineConstraints = PipelineConstraints(),
                  cut_bytes: np.ndarray | None = None, units: bool = True) -> ClassModel:
    """Group interchangeable devices (or whole units) and tabulate stage and transfer costs per label.

    ``cut_bytes`` replaces the problem's cut sizes in transfers and stage memory (PipeEdge's
    last-output-only accounting); default: all bytes live across each cut. ``units=False`` groups
    single devices only (PipeEdge's multiset of device types).
    """
    cl = problem.cluster
    n_dev, L = problem.num_devices, problem.num_layers
    cb = problem.cut_bytes if cut_bytes is None else np.asarray(cut_bytes, dtype=np.float64)
    first = set(constraints.first_stage_indices(problem))
    last = set(constraints.last_stage_indices(problem))
    src, snk = cl.source_index, cl.sink_index
    lk = cl.links
    ucs = unit_classes(problem, first, last, units)
    max_stages = min(constraints.max_stages or n_dev, n_dev, L)
    space = StateSpace([len(c) for c in ucs], [len(c[0]) for c in ucs], max_stages)
    members = [[u[q] for u in ucs[U]] for U, _, q in space.labels]
    reps = np.array([ucs[U][0][q] for U, _, q in space.labels], dtype=np.int64)
    C, Mv = space.num_labels, space.num_moves

    i = np.arange(L + 1)[:, None, None]
    j = np.arange(L + 1)[None, :, None]
    t = problem.device_type[reps][None, None, :]
    valid = j > i
    with np.errstate(invalid="ignore"):
        # a stage is one segment: its layers plus what the segment costs on its type (per type, so
        # the same for every device a label stands for)
        time = np.where(valid, problem.stage_time(i, j, reps[None, None, :]), np.inf)
        energy = np.where(valid, problem.costs.range_energy(i, j, t), np.inf)
    if constraints.enforce_memory:
        mem = problem.costs.range_mem(i, j, t) + cb[i] + cb[j]
        fits = mem <= problem.memory_bytes[reps][None, None, :]
        time = np.where(fits, time, np.inf)
    energy = np.where(np.isfinite(time), energy, np.inf)

    def pair_devices(u: int, m: int) -> tuple[int, int] | None:
        """Devices standing for a transfer from label u by move m (None: the move cannot follow u)."""
        Uu, pat_u, p = space.labels[u]
        U, sig, r = space.sigma(m)
        q = space.labels[space.move_label[m]][2]
        same_pattern = Uu == U and pat_u == sig
        if r == 0 and same_pattern:
            return ucs[U][0][p], ucs[U][0][q]          # the same unit: its inner link
        if r == 1 and not same_pattern:
            return None
        if Uu != U:
            return ucs[Uu][0][p], ucs[U][0][q]
        return (ucs[U][0][p], ucs[U][1][q]) if len(ucs[U]) > 1 else None

    tr_time = np.full((L + 1, C, Mv), np.inf)
    tr_energy = np.full((L + 1, C, Mv), np.inf)
    for u in range(C):
        for m in range(Mv):
            pd = pair_devices(u, m)
            if pd is None:
                continue
            a, b = pd
            tr_time[:, u, m] = message_time(lk.latency_s[a, b], lk.per_byte_s[a, b], cb)
            tr_energy[:, u, m] = message_energy(lk.joule_per_byte[a, b], cb)
    src_time = np.zeros(C)
    src_energy = np.zeros(C)
    snk_time = np.zeros(C)
    snk_energy = np.zeros(C)
    for c, r in enumerate(reps):
        if src is not None:
            src_time[c] = lk.time(src, r, cb[0])
            src_energy[c] = lk.energy(src, r, cb[0])
        if snk is not None:
            snk_time[c] = lk.time(r, snk, cb[L])
            snk_energy[c] = lk.energy(r, snk, cb[L])
        if r not in first or space.initial(c) < 0:
            src_time[c] = np.inf
        if r not in last:
            snk_time[c] = np.inf
    return ClassModel(problem, members, reps, time, energy, tr_time, tr_energy, src_time, src_energy,
                      snk_time, snk_energy, max_stages, space, ucs)


def relaxed_min_bottleneck(cm: ClassModel) -> tuple[float, list[int], list[int]]:
    """Min bottleneck when a label may be used any number of times (a lower bound), and its path.

    O(L^2 C + L C Mv); returns (bound, cut bounds, moves). If the path can be realized on real
    devices (``ClassModel.realize``) it is optimal for the real problem too.
    """
    L, C = cm.num_layers, cm.num_classes
    Mv = cm.space.num_moves
    r = np.full((L + 1, C), np.inf)
    r[0] = np.where(np.isfinite(cm.src_time), cm.src_time, np.inf)
    arg_k = np.zeros((L + 1, C), dtype=np.int64)
    arg_u = np.zeros((L + 1, C), dtype=np.int64)
    arg_m = np.zeros((L + 1, C), dtype=np.int64)
    end = np.full((L + 1, C), np.inf)
    cols = np.arange(Mv)
    for j in range(1, L + 1):
        cand = np.maximum(r[:j], cm.time[:j, j, :])          # (j, C)
        arg_k[j] = np.argmin(cand, axis=0)
        end[j] = cand[arg_k[j], np.arange(C)]
        if j < L:
            via = np.maximum(end[j][:, None], cm.tr_time[j])   # (u, m)
            u_best = np.argmin(via, axis=0)
            val = via[u_best, cols]
            for m in range(Mv):
                v = int(cm.move_label[m])
                if val[m] < r[j, v]:
                    r[j, v], arg_u[j, v], arg_m[j, v] = val[m], u_best[m], m
    final = np.maximum(end[L], cm.snk_time)
    c = int(np.argmin(final))
    best = float(final[c])
    if not np.isfinite(best):
        return best, [], []
    bounds, moves, j = [L], [], L
    while True:
        k = int(arg_k[j, c])
        if k == 0:
            moves.append(c)
            break
        moves.append(int(arg_m[k, c]))
        u = int(arg_u[k, c])
        bounds.append(k)
        j, c = k, u
    bounds.append(0)
    return best, bounds[::-1], moves[::-1]


def path_is_valid(cm: ClassModel, moves: list[int]) -> bool:
    """The path can be placed on distinct real devices, in at most max_stages stages."""
    return cm.realize(moves) is not None


def path_bottleneck(cm: ClassModel, bounds: list[int], moves: list[int]) -> float:
    """The bottleneck of a path of moves from the tables (equals the evaluator's, bit for bit)."""
    labels = cm.move_label[np.asarray(moves, dtype=np.int64)]
    terms = [cm.src_time[labels[0]], cm.snk_time[labels[-1]]]
    for s, c in enumerate(labels):
        terms.append(cm.time[bounds[s], bounds[s + 1], c])
        if s:
            terms.append(cm.tr_time[bounds[s], labels[s - 1], moves[s]])
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
    raise InfeasibleError(p.why_unplaceable(l) or f"layer {p.graph.layers[l].name!r} fits in no stage of any device")


def check_state_budget(cm: ClassModel, arrays: int, budget_bytes: float, algorithm: str) -> None:
    """Refuse (with the numbers) a value DP whose float tables would exceed ``budget_bytes``."""
    need = arrays * 8 * (cm.num_layers + 1) * cm.num_classes * cm.num_multisets
    if need > budget_bytes:
        raise HetsplitError(
            f"{algorithm}: {cm.num_classes} device labels ({cm.num_multisets} usage states) x "
            f"{cm.num_layers + 1} cuts need {need / 2**30:.1f} GiB of DP tables (budget "
            f"{budget_bytes / 2**30:.1f} GiB); devices (or whole boards) collapse into classes only when "
            "type, memory, role and links agree. Use --algo exact (bounded memory) or fewer distinct devices")


def infeasible_message(cm: ClassModel, bound: float | None = None) -> str:
    what = "" if bound is None else f" with a bottleneck <= {bound:.6g} s"
    restricted = "".join(f", {end} stage restricted" for end, t in (("first", cm.src_time), ("last", cm.snk_time))
                         if np.isinf(t).any())
    return (f"no pipeline over the {cm.problem.num_devices} devices of {cm.problem.cluster.name!r} "
            f"(one stage per device, at most {cm.max_stages} stages{restricted}) fits memory{what}")


def to_plan(cm: ClassModel, bounds: list[int], moves: list[int], algorithm: str, params: dict) -> Plan:
    """A Plan with the evaluator's metrics, on the devices the path of moves stands for."""
    devices = cm.realize(moves)
    if devices is None:
        raise AssertionError(f"a DP path cannot be placed on devices: moves {moves}")
    return make_plan(cm.problem, bounds, devices, algorithm, {**params, **table_objective(cm.problem)})
