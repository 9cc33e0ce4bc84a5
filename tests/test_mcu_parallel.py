"""Tensor-parallel plans on Siracusa chips: the breakdown, the all-reduce bytes, the L3 regimes and the
energy formula of Bochem et al. checked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from devmodel_graphs import chain, gemm

from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Cluster
from hetsplit.estimate.mcu_parallel import block_starts, layer_blocks, parallel_costs
from hetsplit.costs.models.mcu import PREFETCHED, RESIDENT, STREAMED, McuParams
from hetsplit.graph.transformer_shapes import TransformerShape, transformer_graph
from hetsplit.plan.types import Plan, Stage
from hetsplit.search.tensor_parallel import tensor_parallel_plan
from hetsplit.workflow import load_cluster_spec

E, F, S_AR, CTX, S_PROMPT = 512, 2048, 1, 128, 16
BLOCK_WEIGHTS = 4 * E * E + 3 * E * F              # int8 bytes of one TinyLlama block (no biases)
MODEL_BLOCKS = 8


def tinyllama(tokens: int = S_AR, heads: int = 8, blocks: int = 1):
    return transformer_graph(TransformerShape("tl", E, F, heads, blocks, tokens, CTX if tokens == 1 else tokens))


def with_params(cluster: Cluster, **over) -> Cluster:
    return replace(cluster, devices=[replace(d, params={**d.params, **over}) for d in cluster.devices])


def cost(graph, n: int, cluster: Cluster | None = None, model_blocks: int = MODEL_BLOCKS):
    cluster = cluster or load_cluster_spec(f"siracusa-{n}")
    return parallel_costs(graph, cluster, tensor_parallel_plan(graph, cluster.names[:n]), model_blocks)


@pytest.mark.parametrize("tokens,n", [(S_AR, 1), (S_AR, 4), (S_AR, 8), (S_PROMPT, 8), (S_AR, 16)])
def test_the_breakdown_sums_to_the_latency(tokens, n):
    c = cost(tinyllama(tokens, heads=64 if n > 8 else 8), n)
    assert sum(c.breakdown().values()) == pytest.approx(c.latency_s, rel=1e-12)
    assert all(v >= 0 for v in c.breakdown().values())
    assert c.latency_s >= max(ch.finish_s for ch in c.chips) * (1 - 1e-12)


def test_a_post_norm_block_on_three_uneven_chips_also_sums():
    g = transformer_graph(TransformerShape("bert", 512, 512, 4, 1, 268, 268, gated=False, pre_norm=False))
    c = cost(g, 3, load_cluster_spec("siracusa-4"), model_blocks=24)
    assert sum(c.breakdown().values()) == pytest.approx(c.latency_s, rel=1e-12)
    assert {ch.name for ch in c.chips} == {"chip0", "chip1", "chip2"}
    w = sorted(ch.weight_bytes for ch in c.chips)           # heads 2, 1, 1 and F 171, 171, 170 per chip
    assert w[-1] > w[0] and sum(w) == 6 * 512 * 512                # every weight once, none twice


@pytest.mark.parametrize("tokens", [S_AR, S_PROMPT])
def test_all_reduce_bytes_of_one_block_on_eight_chips_by_hand(tokens):
    # two all-reduces per block (attention, FFN); each: 6 partials to the two group leaders, 1 leader to
    # the root, and the root's norm output back down the same tree (4 sends from the root, 3 from the
    # other leader): 14 messages of S x E int8 values
    c = cost(tinyllama(tokens), 8)
    per_message = tokens * E * 1
    assert c.messages == 2 * 14
    assert c.c2c_bytes == 28 * per_message
    assert c.c2c_energy_j == pytest.approx(28 * per_message * 100e-12)
    root = next(ch for ch in c.chips if ch.name == "chip0")
    # the root's MIPI port: 3 partials + 1 group sum in, 4 sends down, per all-reduce
    assert root.port_s == pytest.approx(2 * 8 * per_message / 0.5e9)


def test_regimes_switch_where_the_weight_share_crosses_the_l2_budget():
    budget = McuParams.from_params(load_preset("siracusa").params, "siracusa").weight_budget
    g = tinyllama(heads=64)
    for n in (1, 2, 4, 8, 16, 32, 64):
        block, model = BLOCK_WEIGHTS / n, MODEL_BLOCKS * BLOCK_WEIGHTS / n
        expect = RESIDENT if model <= budget else PREFETCHED if 2 * block <= budget else STREAMED
        c = cost(g, n)
        assert c.regime == expect, n
        assert max(ch.block_weight_bytes for ch in c.chips) == pytest.approx(block)
    assert [cost(g, n).regime for n in (4, 8, 16, 32)] == [STREAMED, PREFETCHED, PREFETCHED, RESIDENT]
    # move the budget to exactly twice a 4-chip block share: double buffering starts there, not a byte before
    cl = load_cluster_spec("siracusa-4")
    reserved = load_preset("siracusa").params["l2_reserved_bytes"]
    at = 2 * BLOCK_WEIGHTS / 4 + reserved
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=at)).regime == PREFETCHED
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=at - 1)).regime == STREAMED
    whole = MODEL_BLOCKS * BLOCK_WEIGHTS / 4 + reserved
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=whole)).regime == RESIDENT


def test_prefetched_chips_load_each_block_once_resident_chips_never():
    pre, res = cost(tinyllama(), 8), cost(tinyllama(heads=64), 32)
    assert sum(ch.l3_bytes for ch in pre.chips) == BLOCK_WEIGHTS
    assert sum(ch.l3_bytes for ch in res.chips) == 0 and res.breakdown()["l3"] == 0
    one = cost(tinyllama(), 1)                     # streamed: the weights and every activation pass L3
    assert one.chips[0].l3_bytes > BLOCK_WEIGHTS and one.breakdown()["l3"] > one.breakdown()["compute"]


def test_super_linear_once_a_block_share_is_double_buffered():
    t = {n: cost(tinyllama(), n).latency_s for n in (1, 4, 8)}
    assert t[1] / t[4] == pytest.approx(4, rel=0.1)
    assert t[1] / t[8] > 16


def test_energy_and_latency_of_a_two_chip_pipeline_by_hand():
    p = McuParams.from_params(load_preset("siracusa").params, "siracusa")
    g = chain("two", [gemm("a", 64, 32), gemm("b", 32, 16)])
    cluster = load_cluster_spec("siracusa-2")
    plan = Plan("two", "siracusa-2", "manual", stages=[Stage("chip0", ["a"]), Stage("chip1", ["b"])])
    c = parallel_costs(g, cluster, plan)
    overhead = p.kernel_overhead_cycles / p.clock_hz
    comp = [64 * 32 / (p.gemv_macs_per_cycle * p.clock_hz) + overhead,
            32 * 16 / (p.gemv_macs_per_cycle * p.clock_hz) + overhead]
    l2 = [(64 * 32 + 32) + 64 + 32, (32 * 16 + 16) + 32 + 16]        # int8 weights + bias, input, output
    assert all(b / p.l2_l1_bandwidth < t for b, t in zip(l2, comp))  # DMA hidden behind compute
    msg = 32                                                         # a's output, int8, over MIPI
    assert c.regime == RESIDENT and c.messages == 1 and c.c2c_bytes == msg
    assert c.latency_s == pytest.approx(comp[0] + msg / 0.5e9 + comp[1])
    assert c.breakdown() == pytest.approx({"compute": sum(comp), "c2c": msg / 0.5e9, "l2": 0.0, "l3": 0.0})
    energy = p.power_active * sum(comp) + p.l2_energy_per_byte * sum(l2) + 100e-12 * msg
    assert c.energy_j == pytest.approx(energy)
    assert c.edp == pytest.approx(energy * c.latency_s)


def test_blocks_start_at_their_norm_or_at_the_previous_blocks_last_norm():
    pre = tinyllama(blocks=3)
    assert [pre.layers[i].name for i in block_starts(pre)] == ["b0.attn_norm", "b1.attn_norm", "b2.attn_norm"]
    post = transformer_graph(TransformerShape("bert", 64, 64, 4, 2, 4, 4, gated=False, pre_norm=False))
    assert [post.layers[i].name for i in block_starts(post)] == ["b0.wq", "b0.ffn_norm"]
    assert layer_blocks(chain("fc", [gemm("a", 4, 4)])) == [-1]


def test_a_device_that_is_not_an_mcu_is_named():
    from hetsplit.errors import ClusterError

    g = chain("two", [gemm("a", 64, 32)])
    cluster = load_cluster_spec("jetson-xavier-nx-4")
    plan = Plan("two", cluster.name, "manual", stages=[Stage(cluster.names[0], ["a"])])
    with pytest.raises(ClusterError, match="mcu"):
        parallel_costs(g, cluster, plan)


def test_kernel_overhead_may_be_zero_but_not_negative():
    from hetsplit.errors import ClusterError

    assert McuParams.from_params({"kernel_overhead_cycles": 0}, "mcu0").kernel_overhead_cycles == 0
    with pytest.raises(ClusterError, match="kernel_overhead_cycles"):
        McuParams.from_params({"kernel_overhead_cycles": -1}, "mcu0")
