"""Rounds: a worker runs its (input, segment) steps software-pipelined across inputs, so devices that
hand one input back and forth work on different inputs at once; checked on its own and in a real run."""

from __future__ import annotations

import json

import pytest

from factories import cluster
from hetsplit.plan.types import Plan
from hetsplit.runtime import RunOptions, load_manifest, run_plan
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.rounds import frees_after, lookahead, rounds, segment_lags
from hetsplit.runtime.toy import toy_model

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("lags, n, latency", [([0, 1, 2, 3], 7, 2), ([0, 0, 2], 5, 0), ([3], 6, 1),
                                              ([1, 4, 4, 9], 12, 3), ([0, 2], 2, 2), ([0], 1, 0)])
def test_every_step_once_in_program_order_each_round_on_its_lagged_input(lags, n, latency):
    plan = rounds(lags, n, latency)
    steps = [st for r in plan for st in r]
    assert sorted(steps) == [(i, j) for i in range(n) for j in range(len(lags))]
    where = {st: r for r, round_ in enumerate(plan) for st in round_}
    for i in range(n):
        order = [where[i, j] for j in range(len(lags))]
        assert order == sorted(order)                        # an input's segments in program order
    for r, round_ in enumerate(plan):
        assert [j for _, j in round_] == sorted(j for _, j in round_) and round_
        if r < min(latency, n):
            assert round_ == [(r, j) for j in range(len(lags))]   # unloaded inputs: one round each
        else:                                                     # then one round, lagged inputs
            assert len({i + lags[j] for i, j in round_}) == 1
    frees = frees_after(plan)
    for r, round_ in enumerate(plan):
        assert frees[r] >= r and all(where[i, j] <= frees[r] for i, _ in round_ for j in range(len(lags)))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.onnx"
    return toy_model(path), path


def ping_pong(graph) -> Plan:
    """Layers alternate between d0 and d1: each input crosses between them at every layer."""
    return Plan(graph.name, "", "hand", assign={name: f"d{k % 2}" for k, name in enumerate(graph.names)})


def test_lags_count_the_crossings(toy, tmp_path):
    from hetsplit.runtime import split_model

    graph, path = toy
    m = split_model(ping_pong(graph), graph, path, tmp_path / "split")
    lags = segment_lags(m)
    for w in m.stages:
        got = [lags[w.rank, s.index] for s in w.segments]
        assert got == sorted(got) and len(set(got)) == len(got)   # every segment one crossing further on
    assert max(lags.values()) == graph.num_layers - 1
    assert lookahead(m, lags, 2) == 3                               # a message crosses one round ahead


def test_a_worker_keeps_only_what_its_later_segments_read(toy, tmp_path):
    """Replaying each worker's program on names: every segment finds its inputs and the sources of its
    sends, though after each segment the worker drops what no later segment of its own reads or sends
    (with lags it holds many inputs at once); a ping-pong worker then holds at most two tensors."""
    from hetsplit.runtime import split_model
    from hetsplit.runtime.worker import still_read

    graph, path = toy
    m = split_model(ping_pong(graph), graph, path, tmp_path / "split")
    for w in m.stages:
        keep, local, held = still_read(m, w.rank), set(), []
        for seg in w.segments:
            local |= {t.spec.name for mid in seg.recv for t in m.message(mid).tensors}
            assert {t.name for t in seg.inputs} <= local
            local |= {t.name for t in seg.outputs}
            assert {t.source for mid in seg.send for t in m.message(mid).tensors} <= local
            local &= keep[seg.index]
            held.append(len(local))
        assert held[-1] == 0 and max(held) <= 2 < len(graph.names)


def test_a_ping_pong_mapping_runs_its_devices_on_different_inputs_at_once(toy, tmp_path):
    graph, path = toy
    n = 8
    report = run_plan(ping_pong(graph), graph, path,
                      RunOptions(inputs=n, latency_inputs=2, timeout_s=30, run_dir=tmp_path / "run"),
                      split_dir=tmp_path / "split", cluster=cluster(["cpu"] * 2))
    assert report.verify.ok and report.verify.outputs_checked == n and report.verify.max_abs_err < 1e-4
    assert not processes_of(tmp_path / "run")
    m = load_manifest(tmp_path / "split")
    w = m.worker(1)
    first, second = w.segments[0].send[0], w.segments[1].send[0]   # d0's first two hand-overs to d1
    sends = {e["id"]: e["start"] for e in json.loads((tmp_path / "run" / "rank1.json").read_text())["send"]}
    # input by input, d0 would hand over input i's second time before input i+1's first; in rounds it
    # hands over input i+2's first (two crossings behind) before input i's second
    assert all(sends[first][i + 2] <= sends[second][i] for i in range(2, n - 2))
    assert all(sends[second][i] <= sends[first][i + 1] for i in range(2))    # the unloaded inputs: one at a time
