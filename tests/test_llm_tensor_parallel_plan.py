"""Tensor-parallel stages in the LLM planner: shares costed at their own shapes, balanced exactly, and the
planner exact over pipelines of groups (tiny GGUF of 3 blocks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hetsplit.errors import InfeasibleError, PlanError
from hetsplit.estimate.llm import DECODE, PREFILL, LlmCostOptions, Stage, StageShare, llm_costs, predict_pipeline
from hetsplit.estimate.llm_shares import balanced_counts, equal_shares
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.graph.llm.shares import TensorShare
from hetsplit.graph.llm.step_graph import Phase, step_graph
from hetsplit.search.llm_pipeline import candidate_groups, every_pipeline, plan_pipeline, stage_value
from llm_tiny import write_tiny_gguf
from test_llm_plan import cluster


@pytest.fixture(scope="module")
def three_blocks(tmp_path_factory):
    return read_gguf(write_tiny_gguf(tmp_path_factory.mktemp("tp") / "tiny3.gguf", blocks=3))


@pytest.mark.parametrize("seed", range(30))
def test_balanced_counts_are_the_least_maximum_of_every_split(seed):
    rng = np.random.default_rng(seed)
    members, total = int(rng.integers(1, 5)), int(rng.integers(0, 7))
    table = np.cumsum(rng.uniform(0, 1, (members, total + 1)) * (rng.uniform(size=(members, total + 1)) > 0.2), axis=1)
    counts, value = balanced_counts(table, total)
    assert sum(counts) == total and min(counts) >= 0
    assert value == pytest.approx(max(table[i, c] for i, c in enumerate(counts)))
    best = min(max(table[i, c] for i, c in enumerate(split))
               for split in itertools.product(range(total + 1), repeat=members) if sum(split) == total)
    assert value == pytest.approx(best)


def test_a_whole_share_is_the_unsplit_step_and_a_half_share_has_half_the_matrices(three_blocks):
    cfg, tensors = three_blocks.config, three_blocks.tensors
    whole = step_graph(cfg, tensors, Phase(4, 4))
    same = step_graph(cfg, tensors, Phase(4, 4), share=TensorShare((0, cfg.kv_heads), (0, cfg.ffn), (0, cfg.vocab)))
    assert whole.names == same.names and list(whole.macs) == list(same.macs)
    assert list(whole.param_bytes) == list(same.param_bytes)
    half = step_graph(cfg, tensors, Phase(4, 4), share=TensorShare((0, cfg.kv_heads // 2), (0, cfg.ffn // 2),
                                                                   (0, cfg.vocab // 2)))
    by = dict(zip(half.names, half.macs))
    full = dict(zip(whole.names, whole.macs))
    for role in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_down"):
        assert by[f"b0.{role}"] * 2 == full[f"b0.{role}"]
    none = step_graph(cfg, tensors, Phase(4, 4), share=TensorShare((0, 0), (0, cfg.ffn), (0, 0)))
    assert "b0.attention" not in none.names and "head" not in none.names and "b0.ffn_up" in none.names


def test_a_stage_of_shares_is_checked_and_costed_by_its_slowest_member_and_its_syncs(three_blocks):
    costs = llm_costs(three_blocks.config, three_blocks.tensors, cluster([1, 1], latency="0.01ms"),
                      LlmCostOptions(8, 8))
    cfg = three_blocks.config
    shares = equal_shares(costs.shares, 2)
    stage = Stage("d0", 0, 3, (StageShare("d0", shares[0]), StageShare("d1", shares[1])))
    pred = predict_pipeline(costs, [stage])
    alone = predict_pipeline(costs, [Stage("d0", 0, 3)])
    assert pred.compute_s["d0"][DECODE] < 0.75 * alone.compute_s["d0"][DECODE]      # half the matrices
    assert pred.hops_s["d0+d1 syncs"][DECODE] > 0
    assert pred.s_per_token == pytest.approx(max(pred.compute_s["d0"][DECODE], pred.compute_s["d1"][DECODE])
                                             + pred.hops_s["d0+d1 syncs"][DECODE] + pred.hops_s["d0->d0+d1"][DECODE],
                                             rel=0.05)
    assert pred.memory_bytes["d0"] < alone.memory_bytes["d0"]
    bad = [TensorShare((0, 1), (0, 10), (0, 100)), TensorShare((1, cfg.kv_heads), (20, cfg.ffn), (100, cfg.vocab))]
    with pytest.raises(PlanError, match="do not cover"):
        predict_pipeline(costs, [Stage("d0", 0, 3, (StageShare("d0", bad[0]), StageShare("d1", bad[1])))])
    with pytest.raises(PlanError, match="leader"):
        predict_pipeline(costs, [Stage("d1", 0, 3, stage.shares)])
    with pytest.raises(PlanError, match="two stages or shares"):
        predict_pipeline(costs, [Stage("d0", 0, 1, stage.shares), Stage("d1", 1, 3)])


def random_costs(model, seed: int):
    """Slow devices on fast links with tight memory: tensor-parallel stages are worth having; on odd seeds
    the message ends cost CPU and each device its own seconds per sync (``sync_s``)."""
    from dataclasses import replace

    from hetsplit.estimate.llm_shares import SYNC_PARAM

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    speeds = list(rng.uniform(0.002, 0.02, n))
    latency = ["0.001ms", "0.01ms", "0.2ms"][seed % 3]
    memory = [f"{int(model.stored_bytes() * rng.uniform(0.3, 1.2))}B" for _ in range(n)]
    c = cluster(speeds, memory, latency)
    if seed % 2:
        c = replace(c, devices=[replace(d, params={**d.params, SYNC_PARAM: float(rng.uniform(0, 3e-4))})
                                for d in c.devices]).with_message_cpu(float(rng.uniform(0, 1e-4)), 1e-10)
    return llm_costs(model.config, model.tensors, c, LlmCostOptions(12, 8))


def test_the_planner_with_tensor_parallel_stages_is_exact_against_brute_force(three_blocks):
    chosen = 0
    for seed in range(8):
        costs = random_costs(three_blocks, seed)
        for objective, phase in (("decode", DECODE), ("ttft", PREFILL)):
            groups = candidate_groups(costs, list(range(costs.cluster.num_devices)), phase, True)
            want = min((stage_value(costs, s, phase) for s in every_pipeline(costs, groups)), default=np.inf)
            if not np.isfinite(want):
                with pytest.raises(InfeasibleError):
                    plan_pipeline(costs, objective, tensor_parallel=True)
                continue
            got = plan_pipeline(costs, objective, tensor_parallel=True)
            assert got.value == pytest.approx(want, rel=1e-12)
            pred = predict_pipeline(costs, got.stages)
            assert pred.fits and (pred.s_per_token if phase == DECODE else pred.ttft_s) == pytest.approx(got.value)
            assert got.value <= plan_pipeline(costs, objective).value * (1 + 1e-12)   # never worse than pipelines
            chosen += any(s.shares for s in got.stages)
    assert chosen >= 4          # the instances exercise tensor-parallel stages, not only pipelines


def test_on_slow_links_the_planner_keeps_whole_blocks(three_blocks):
    costs = llm_costs(three_blocks.config, three_blocks.tensors, cluster([0.01, 0.01], latency="20ms"),
                      LlmCostOptions(8, 8))
    got = plan_pipeline(costs, tensor_parallel=True)
    assert not any(s.shares for s in got.stages)


def test_the_streams_planner_with_tensor_parallel_stages_is_exact_against_brute_force(three_blocks):
    from dataclasses import replace

    from hetsplit.search.llm_pipeline import plan_streams, streams_value

    chosen = 0
    for seed in range(6):
        base = random_costs(three_blocks, seed)
        streams = [2, 4, 16][seed % 3]
        costs = llm_costs(three_blocks.config, three_blocks.tensors, base.cluster,
                          replace(base.options, streams=streams))
        groups = candidate_groups(costs, list(range(costs.cluster.num_devices)), DECODE, True)
        want = min((streams_value(costs, s) for s in every_pipeline(costs, groups)), default=np.inf)
        if not np.isfinite(want):
            with pytest.raises(InfeasibleError):
                plan_streams(costs, tensor_parallel=True)
            continue
        got = plan_streams(costs, tensor_parallel=True)
        assert got.value == pytest.approx(want, rel=1e-12)
        pred = predict_pipeline(costs, got.stages)
        assert 1 / pred.streams_tokens_per_s == pytest.approx(want, rel=1e-12)
        chosen += any(s.shares for s in got.stages)
    assert chosen >= 2
