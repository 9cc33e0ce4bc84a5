"""The thesis's claims can fail: on hand-made explorations and tables where every check holds, moving each check's
input past its band turns its verdict; a check made constant is caught; parameter counts are sanity checks."""

from __future__ import annotations

import numpy as np
import pytest

from claims_mutation import assert_every_check_turns, constant
from hetsplit.experiments.hybrid import HybridConfig, HybridResults, RunRecord
from hetsplit.experiments.hybrid_claims import check_claims
from hetsplit.experiments.thesis_tables import MemoryRun, ThesisTables
from hetsplit.plan.types import Metrics
from hetsplit.search.explore import THESIS_OBJECTIVES

G = 10


def record(setting: str, label: str, first: tuple[float, float, float], final: tuple[float, float, float]) -> RunRecord:
    best = np.vstack([np.array(first, float)] * (G - 1) + [np.array(final, float)])
    return RunRecord("alexnet", setting, label, THESIS_OBJECTIVES, best, best[-1:], [], 1.0, 10, 10.0, 12,
                     hypervolume=np.ones(G))


def metrics(latency_s: float, memory_mb: float, energy_j: float) -> Metrics:
    return Metrics(1 / latency_s, latency_s, "", latency_s, energy_j, {"nx0-cpu": energy_j}, {"nx0-cpu": latency_s},
                   {"nx0-cpu": memory_mb * 1e6}, True, energy_j * latency_s)


def base_results() -> HybridResults:
    runs = [record("cpu", "naive", (5, 5, 5), (3, 3, 3)), record("cpu", "advanced p=2", (4, 4, 4), (1.0, 1.5, 1.0)),
            record("cpu", "advanced p=4", (4.5, 4.5, 4.5), (1.2, 1.0, 1.2)),
            record("cpu", "spe", (4, 4, 4), (0.95, 3.0, 0.95)),
            record("cpu+gpu", "naive", (5, 5, 5), (3, 3, 3)), record("cpu+gpu", "advanced p=2", (4, 4, 4), (1.1, 1.6, 1.1)),
            record("cpu+gpu", "advanced p=4", (4.5, 4.5, 4.5), (1.3, 1.1, 1.3))]
    tables = ThesisTables(unpartitioned={"alexnet": metrics(0.030, 150.0, 0.35)}, graph_params={"alexnet": 61.1e6},
                          table4=metrics(0.027, 75.0, 1.1),
                          memory_runs={"alexnet": [MemoryRun("unpartitioned", 150e6, 150e6), MemoryRun("naive", 50e6, 41e6),
                                                   MemoryRun("advanced p=2", 60e6, 60e6)]})
    cfg = HybridConfig(models=("alexnet",), splits=(2, 4), generations=G, measured_picks="each")
    return HybridResults(cfg, runs, [], tables)


def final(setting: str, label: str, values: tuple[float, float, float]):
    def mutate(r: HybridResults) -> None:
        r.run_of("alexnet", setting, label).best[-1] = values
    return mutate


def first(setting: str, label: str, values: tuple[float, float, float]):
    def mutate(r: HybridResults) -> None:
        r.run_of("alexnet", setting, label).best[:-1] = values
    return mutate


def field(what, name: str, value):
    def mutate(r: HybridResults) -> None:
        setattr(what(r), name, value)
    return mutate


def measured(label: str, nbytes: float):
    def mutate(r: HybridResults) -> None:
        next(m for m in r.tables.memory_runs["alexnet"] if m.label == label).measured_bytes = nbytes
    return mutate


UNSPLIT = lambda r: r.tables.unpartitioned["alexnet"]   # noqa: E731
TABLE4 = lambda r: r.tables.table4                      # noqa: E731
MUTATIONS = {
    "advanced-faster": [lambda r: [first("cpu", k, (6, 6, 6))(r) for k in ("advanced p=2", "advanced p=4")],
                        final("cpu+gpu", "naive", (0.5, 0.5, 0.5))],
    "alexnet-cpu-ranks": [final("cpu", "advanced p=4", (0.9, 1.0, 1.2)), final("cpu", "advanced p=2", (1.0, 0.9, 1.0))],
    "vertical-vs-hybrid": [final("cpu", "spe", (0.5, 3.0, 0.5)), final("cpu", "spe", (0.95, 1.6, 0.95))],
    "gpus-do-not-help": [final("cpu+gpu", "advanced p=2", (0.5, 0.5, 1.1))],
    "advanced-better-mostly": [lambda r: [final(s, "naive", (0.1, 0.1, 0.1))(r) for s in ("cpu", "cpu+gpu")]],
    "t2-alexnet-params": [lambda r: r.tables.graph_params.update(alexnet=120e6)],
    "t2-alexnet-size": [lambda r: r.tables.graph_params.update(alexnet=30e6)],
    "t2-alexnet-latency": [field(UNSPLIT, "latency_s", 0.06)],
    "t2-alexnet-memory-model": [field(UNSPLIT, "memory_per_device_bytes", {"nx0-cpu": 400e6})],
    "t2-alexnet-memory-run": [measured("unpartitioned", 400e6)],
    "t4-latency": [field(TABLE4, "latency_s", 0.071)],
    "t4-memory": [field(TABLE4, "memory_per_device_bytes", {"nx0-cpu": 45e6})],
    "t4-energy": [field(TABLE4, "energy_per_device_j", {"nx0-cpu": 0.3})],
    "t7-alexnet-memory": [lambda r: [measured(k, 100e6)(r) for k in ("naive", "advanced p=2")]],
    "t7-alexnet-memory-lower": [lambda r: [measured(k, 200e6)(r) for k in ("naive", "advanced p=2")]],
    "alexnet-lowest-memory": [measured("advanced p=2", 30e6)],
}


def test_every_thesis_check_turns_when_its_input_leaves_the_band():
    assert_every_check_turns(check_claims, base_results(), MUTATIONS)


@pytest.mark.parametrize("key", ["t2-alexnet-latency", "vertical-vs-hybrid", "t7-alexnet-memory"])
def test_a_thesis_check_made_constant_is_caught(key):
    with pytest.raises(AssertionError, match=key):
        assert_every_check_turns(constant(check_claims, key), base_results(), MUTATIONS)


def test_model_definitions_are_sanity_checks_counted_apart():
    cs = check_claims(base_results())
    assert {c.key for c in cs.of("sanity")} == {"t2-alexnet-params", "t2-alexnet-size"}
    assert cs.summary().startswith("held-out results: 7 of 7 hold; derived: 0 of 0 hold; sanity: 2 of 2 hold; ")
