"""What every partitioner shares: one call shape, so they can be swapped and compared.

A partitioner is a class registered under an algorithm name with ``@register_partitioner``. It
is built from typed options and called as ``solve(problem) -> list[Plan]``; plans come back with
their metrics from the one evaluator (``hetsplit.estimate.evaluate``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.plan.types import Plan
from hetsplit.registry import Registry


@dataclass(frozen=True)
class PipelineConstraints:
    """Constraints every pipeline partitioner honours.

    first_stage_devices: device names allowed to run the first stage (DONNA's edge experiment
      forces the first layer onto an edge device); None allows any.
    last_stage_devices: device names allowed to run the last stage; None allows any.
    enforce_memory: drop stages that do not fit their device's memory.
    max_stages: at most this many stages (None: up to the number of devices).
    """

    first_stage_devices: tuple[str, ...] | None = None
    enforce_memory: bool = True
    max_stages: int | None = None
    last_stage_devices: tuple[str, ...] | None = None

    def first_stage_indices(self, problem: SplitProblem) -> list[int]:
        """Indices of the devices allowed to run the first stage."""
        return _indices(problem, self.first_stage_devices)

    def last_stage_indices(self, problem: SplitProblem) -> list[int]:
        """Indices of the devices allowed to run the last stage."""
        return _indices(problem, self.last_stage_devices)


def _indices(problem: SplitProblem, names: tuple[str, ...] | None) -> list[int]:
    """Device indices of ``names`` (every device when None); an unknown name raises ClusterError."""
    if names is None:
        return list(range(problem.num_devices))
    return [problem.cluster.index(n) for n in names]


class Partitioner(Protocol):
    """solve(problem) -> plans, each with metrics filled in."""

    name: str

    def solve(self, problem: SplitProblem) -> list[Plan]: ...


PartitionerFactory = Callable[..., Partitioner]
PARTITIONERS: Registry[PartitionerFactory] = Registry("algorithm", "hetsplit.search")  # the package registers its own
register_partitioner = PARTITIONERS.register
partitioner_names = PARTITIONERS.names


def partitioner_options(name: str) -> set[str]:
    """Names of the options the partitioner registered as ``name`` accepts."""
    import inspect

    factory = PARTITIONERS.get(name)
    return set(inspect.signature(factory).parameters) - {"name"} if factory else set()


def make_partitioner(name: str, **options: Any) -> Partitioner:
    """Build the partitioner registered as ``name`` with its typed options."""
    factory = PARTITIONERS.lookup(name)
    try:
        return factory(**options)
    except TypeError as exc:
        raise HetsplitError(f"algorithm {name!r}: bad options {sorted(options)} ({exc})") from None



def now() -> float:
    """The clock every ``Deadline`` reads unless given one (seconds; tests may replace it)."""
    return time.monotonic()


class TimeBudgetSpent(HetsplitError):
    """A search ran out of ``--time-budget`` before it had any plan it could return."""


@dataclass
class Deadline:
    """When a search must stop (``--time-budget``); ``budget_s`` None never expires.

    Iterative searches ask ``spent()`` and return their best plans so far, marked with ``mark_cut``;
    a DP that has nothing until it ends calls ``check()`` between its outer steps, which raises
    ``TimeBudgetSpent`` (exit 2) naming the algorithm, the budget and what to do. ``clock`` is
    injectable (tests)."""

    algorithm: str
    budget_s: float | None = None
    clock: Callable[[], float] = field(default=lambda: now())
    end: float | None = field(init=False, default=None)
    cut: bool = field(init=False, default=False)   # set by a search that stopped early on it

    def __post_init__(self) -> None:
        if self.budget_s is not None:
            self.end = self.clock() + self.budget_s

    def spent(self) -> bool:
        """The budget has run out."""
        return self.end is not None and self.clock() >= self.end

    def check(self, what: str = "its search",
              advice: str = "give a larger --time-budget, or a heuristic algorithm (donna, lblp, heft)") -> None:
        """Raise ``TimeBudgetSpent`` when the budget has run out (``advice``: what the user can do)."""
        if self.spent():
            raise TimeBudgetSpent(f"{self.algorithm}: --time-budget {self.budget_s:g} s ran out before {what} "
                                  f"finished, and it has no plan to give before then; {advice}")

    def mark_cut(self, plans: list[Plan], what: str) -> list[Plan]:
        """Mark ``plans`` as the best found when the budget ran out (``what``: what was not done)."""
        self.cut = True
        for plan in plans:
            plan.params["cut_by_time_budget"] = f"{what}; the result is not proven optimal"
        return plans


@dataclass
class SolveStats:
    """What a solver reports about its own run (for benchmarks and --json)."""

    seconds: float = 0.0
    states: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
