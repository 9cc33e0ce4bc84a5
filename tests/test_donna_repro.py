"""``hetsplit reproduce donna`` on a small slice (VGG-8, one medium): files, claims, hull logic."""

import json
import warnings

import numpy as np
import pytest

from hetsplit.cli.main import main
from hetsplit.estimate.evaluate import make_plan
from hetsplit.experiments.donna import Scenario
from hetsplit.search import make_partitioner

from factories import chain_graph, cluster, problem


def test_unsupported_front_points_are_those_off_the_convex_hull():
    # the non-convex case of test_pareto_exact: (1, 10), (3, 8), (5, 3.5), (10, 1); (3, 8) is off the hull
    g = chain_graph([1, 1], input_bytes=1)
    t = np.array([[0.5, 5.0, 3.0], [0.5, 5.0, 3.0]])
    e = np.array([[5.0, 0.5, 3.0], [5.0, 0.5, 3.0]])
    p = problem(g, cluster(["fast", "frugal", "mid"], bandwidth=1e12), t, e, np.array([1.0, 1.0]))
    front = make_partitioner("pareto").solve(p)
    s = Scenario("toy", "set", "medium", [make_plan(p, [0, 2], [0], "donna", {"alpha": 1.0})], front)
    assert [(q.metrics.bottleneck_s, q.metrics.energy_j) for q in s.unsupported()] == [(3.0, 8.0)]


@pytest.mark.slow
def test_reproduce_cli_on_a_slice(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rc = main(["reproduce", "donna", "--models", "vgg8", "--media", "hb-wcc", "--out", str(tmp_path)])
    assert rc == 0
    assert (tmp_path / "fig2_vgg8.png").stat().st_size > 0
    assert (tmp_path / "fig4.png").exists()
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["scenarios"]) == 4 and all(len(s["donna"]) == 6 for s in data["scenarios"])
    md = (tmp_path / "claims.md").read_text()
    assert "alpha = 0 assigns all layers" in md and "| vgg8 {2cpu-1gpu-1cim} hb-wcc |" in md
    out = capsys.readouterr().out
    claims = data["claims"]
    assert out.startswith(claims["summary"]) and md.index(claims["summary"]) < md.index("| claim | label |")
    labels = {c["key"]: c["label"] for c in claims["claims"]}
    assert labels["alpha0-one-device"] == "held-out" and labels["diverse-sets-spread"] == "direction"
    assert "fitted" not in labels.values() and claims["band"] == 0.25   # no DONNA figure set a parameter
    assert claims["summary"].startswith("held-out results: ")
    assert json.loads((tmp_path / "claims.json").read_text()) == claims   # claims.json beside claims.md
    # the slice has no ResNet-152: its numbers are inconclusive, never dropped
    assert labels["fig3-speedup"] == labels["resnet152-alpha08-energy"] == "inconclusive"
    # DONNA's alpha = 1 plans never beat the exact front's fastest plan
    for s in data["scenarios"]:
        assert min(p["bottleneck_s"] for p in s["donna"]) >= s["front"][0]["bottleneck_s"] * (1 - 1e-9)
