"""The fast paths of the exploration give exactly what the plain ones give: the compiled hybrid
evaluation equals the batch evaluator on the template's numpy arrays, the shard tables equal
slices costed one by one, and seeded explorations give the fronts stored in tests/fixtures/explore_fronts.json
(written by the array NSGA-II, search/nsga2.py; ``python tests/test_explore_speed.py`` rewrites them,
to be done on purpose only, when the engine's random choices change)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hetsplit.estimate.batch import BatchMetrics
from hetsplit.search.encodings import make_encoding
from hetsplit.search.explore import ExploreOptions, explore
from hetsplit.estimate.task_costs import task_costs
from hetsplit.graph.shard import shard_layer
from hetsplit.plan.tasks import Task, TaskGraphBuilder
from hetsplit.plan.types import DIRECT
from hetsplit.search.hybrid_template import SlotTemplate
from hetsplit.workflow import load_problem

FRONTS = Path(__file__).parent / "fixtures" / "explore_fronts.json"


@pytest.mark.parametrize("encoding,splits", [("naive", 2), ("advanced", 2), ("advanced", 3)])
@pytest.mark.parametrize("latency", [True, False])
def test_compiled_hybrid_evaluation_equals_the_evaluator_on_the_template_arrays(encoding, splits, latency):
    problem = load_problem("resnet8", "jetson-xavier-nx-4")
    enc = make_encoding(problem, encoding, splits)
    rng = np.random.default_rng(3)
    x = rng.integers(0, enc.upper + 1, size=(150, enc.n_var))
    x[::3] = np.where(rng.random(x[::3].shape) < 0.6, 0, x[::3])     # many unused slots and shared devices
    a = enc.assignment(x)
    fast = enc.template.evaluate(a, latency=latency)
    plain = enc.template.evaluator.evaluate(*enc.template.arrays(a), latency=latency)
    for field in BatchMetrics.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(fast, field), getattr(plain, field), err_msg=field)


ENCODINGS = ["naive", "advanced", "spe", "ne"]


def _seeded(encoding: str):
    return explore(load_problem("resnet18", "jetson-xavier-nx-4"),
                   ExploreOptions(encoding=encoding, pop_size=24, generations=4, seed=7))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_seeded_exploration_gives_the_stored_front(encoding):
    """Same seed, same front, chromosomes and per-generation bests as stored."""
    ref = json.loads(FRONTS.read_text())[f"resnet18/jetson-xavier-nx-4/{encoding}"]
    r = _seeded(encoding)
    assert r.front.tolist() == ref["front"]
    assert r.front_x.tolist() == ref["front_x"]
    assert [g.best.tolist() for g in r.history] == ref["best"]


if __name__ == "__main__":
    FRONTS.write_text(json.dumps({f"resnet18/jetson-xavier-nx-4/{e}": {
        "front": r.front.tolist(), "front_x": r.front_x.tolist(), "best": [g.best.tolist() for g in r.history]}
        for e in ENCODINGS for r in [_seeded(e)]}))


@pytest.mark.parametrize("model,slots", [("resnet18", 2), ("densenet121", 4)])
def test_shard_tables_shared_by_alike_layers_equal_those_costed_one_by_one(model, slots, monkeypatch):
    problem = load_problem(model, "jetson-xavier-nx-4")
    fast = SlotTemplate(problem, slots)
    keys = {fast._cost_key(int(i)) for i in fast.split}
    assert len(keys) < len(fast.split)                       # some layers do share their tables
    monkeypatch.setattr(SlotTemplate, "_cost_key", lambda self, i: i)
    plain = SlotTemplate(problem, slots)
    for name in ("shard_time", "shard_energy", "shard_mem", "shard_lo", "shard_hi"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(plain, name), err_msg=name)
    # each slice costed at its own offset (the tables cost one slice per width)
    b, where = TaskGraphBuilder(problem.graph, problem.cluster, DIRECT), []
    for s, i in enumerate(fast.split):
        layer, ch = problem.graph.layers[int(i)], int(fast.channels[s])
        for c in range(fast.shard_lo.shape[1]):
            lo, hi = int(fast.shard_lo[s, c]), int(fast.shard_hi[s, c])
            if lo > 0:
                where.append((s, c, b.task(Task(f"{layer.name}#{lo}:{hi}", "shard", (int(i),), 0,
                                                shard_layer(layer, "out", lo, hi, ch), "out", lo, hi, ch))))
    assert where
    costs = task_costs(problem, b.build())
    s_, c_, t_ = (np.array(v) for v in zip(*where))
    for table, col in ((fast.shard_time, costs.time_s), (fast.shard_energy, costs.energy_j),
                       (fast.shard_mem, costs.mem_bytes)):
        np.testing.assert_array_equal(table[s_, c_], col[t_])
