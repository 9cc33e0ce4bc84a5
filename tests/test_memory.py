"""Plans on Siracusa chips through the one estimator (estimate/memory.py): the L3 regimes, the prefetch
loads, the critical-path breakdown, the all-reduce bytes and the energy formula of Bochem et al., by hand."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from devmodel_graphs import chain, gemm

from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Cluster
from hetsplit.costs.build import build_problem
from hetsplit.costs.models.mcu import PREFETCHED, RESIDENT, STREAMED, McuModel, McuParams
from hetsplit.costs.problem import ModelScope, SplitProblem
from hetsplit.estimate import SimOptions, SimResult, estimate, estimate_plan, simulate
from hetsplit.estimate.mapping import MappingEvaluator
from hetsplit.estimate.memory import MemoryEffects, PlanMemory, plan_memory
from hetsplit.graph.segments import block_starts, segments
from hetsplit.graph.transformer_shapes import TransformerShape, transformer_graph
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Combine, Metrics, Plan, Shard, Stage
from hetsplit.search import make_partitioner
from hetsplit.search.tensor_parallel import tensor_parallel_plan
from hetsplit.workflow import load_cluster_spec, load_problem

E, F, S_AR, CTX, S_PROMPT = 512, 2048, 1, 128, 16
BLOCK_WEIGHTS = 4 * E * E + 3 * E * F              # int8 bytes of one TinyLlama block (no biases)
MODEL_BLOCKS = 8
PARAMS = McuParams.from_params(load_preset("siracusa").params, "siracusa")


def tinyllama(tokens: int = S_AR, heads: int = 8, blocks: int = 1):
    return transformer_graph(TransformerShape("tl", E, F, heads, blocks, tokens, CTX if tokens == 1 else tokens))


def with_params(cluster: Cluster, **over) -> Cluster:
    return replace(cluster, devices=[replace(d, params={**d.params, **over}) for d in cluster.devices])


@dataclass
class Costed:
    problem: SplitProblem
    metrics: Metrics
    sim: SimResult
    memory: PlanMemory

    @property
    def regime(self) -> str:
        return self.memory.regime


def cost_plan(problem: SplitProblem, plan: Plan) -> Costed:
    tg = check_plan(problem.graph, problem.cluster, plan)
    return Costed(problem, estimate_plan(problem, plan), simulate(problem, tg, SimOptions(inputs=1)),
                  plan_memory(problem, tg))


def cost(graph, n: int, cluster: Cluster | None = None, model_blocks: int = MODEL_BLOCKS) -> Costed:
    problem = build_problem(graph, cluster or load_cluster_spec(f"siracusa-{n}"), scope=ModelScope(model_blocks))
    return cost_plan(problem, tensor_parallel_plan(problem.graph, problem.cluster.names[:n]))


@pytest.mark.parametrize("tokens,n", [(S_AR, 1), (S_AR, 4), (S_AR, 8), (S_PROMPT, 8), (S_AR, 16)])
def test_the_breakdown_follows_the_critical_path_and_sums_to_the_latency(tokens, n):
    c = cost(tinyllama(tokens, heads=64 if n > 8 else 8), n)
    parts = c.sim.breakdown()
    assert sum(parts.values()) == pytest.approx(c.sim.unloaded_latency_s, rel=1e-12)
    assert c.sim.unloaded_latency_s == pytest.approx(c.metrics.latency_s, rel=1e-9)   # one engine, two readings
    assert all(v >= 0 for v in parts.values()) and set(parts) <= {"compute", "l2", "l3", "transfer"}
    path = c.sim.critical_path
    assert path[0].start == 0 and path[-1].end == pytest.approx(c.metrics.latency_s, rel=1e-12)
    assert all(b.start == a.end for a, b in zip(path, path[1:]))                       # each starts as one ends


def test_a_post_norm_block_on_three_uneven_chips_also_sums():
    g = transformer_graph(TransformerShape("bert", 512, 512, 4, 1, 268, 268, gated=False, pre_norm=False))
    c = cost(g, 3, load_cluster_spec("siracusa-4"), model_blocks=24)
    assert sum(c.sim.breakdown().values()) == pytest.approx(c.metrics.latency_s, rel=1e-9)
    assert {ch.device for ch in c.memory.chips} == {"chip0", "chip1", "chip2"}
    w = sorted(ch.weight_bytes for ch in c.memory.chips)    # heads 2, 1, 1 and F 171, 171, 170 per chip
    assert w[-1] > w[0] and sum(w) == 6 * 512 * 512                # every weight once, none twice


@pytest.mark.parametrize("tokens", [S_AR, S_PROMPT])
def test_all_reduce_bytes_of_one_block_on_eight_chips_by_hand(tokens):
    # two all-reduces per block (attention, FFN); each: 6 partials to the two group leaders, 1 leader to
    # the root, and the root's norm output back down the same tree (4 sends from the root, 3 from the
    # other leader): 14 messages of S x E int8 values (the deployment's element size, not the graph's 4)
    c = cost(tinyllama(tokens), 8)
    tg = check_plan(c.problem.graph, c.problem.cluster, tensor_parallel_plan(c.problem.graph, c.problem.cluster.names))
    messages = tg.messages()
    per_message = tokens * E * 1
    assert len(messages) == 2 * 14 and all(m.nbytes == per_message for m in messages)
    assert c.metrics.comm_energy_j == pytest.approx(28 * per_message * 100e-12)
    # the root's one MIPI port: 3 partials + 1 group sum in, 4 sends down, per all-reduce
    assert c.sim.busy_s["chip0 port"] == pytest.approx(2 * 8 * per_message / 0.5e9)


def test_regimes_switch_where_the_weight_share_crosses_the_l2_budget():
    budget = PARAMS.weight_budget
    g = tinyllama(heads=64)
    for n in (1, 2, 4, 8, 16, 32, 64):
        block, model = BLOCK_WEIGHTS / n, MODEL_BLOCKS * BLOCK_WEIGHTS / n
        expect = RESIDENT if model <= budget else PREFETCHED if 2 * block <= budget else STREAMED
        c = cost(g, n)
        assert c.regime == expect, n
        assert max(ch.segment_weight_bytes for ch in c.memory.chips) == pytest.approx(block)
        assert max(ch.model_weight_bytes for ch in c.memory.chips) == pytest.approx(model)
    assert [cost(g, n).regime for n in (4, 8, 16, 32)] == [STREAMED, PREFETCHED, PREFETCHED, RESIDENT]
    # move the budget to exactly twice a 4-chip block share: double buffering starts there, not a byte before
    cl = load_cluster_spec("siracusa-4")
    reserved = PARAMS.l2_reserved_bytes
    at = 2 * BLOCK_WEIGHTS / 4 + reserved
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=at)).regime == PREFETCHED
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=at - 1)).regime == STREAMED
    whole = MODEL_BLOCKS * BLOCK_WEIGHTS / 4 + reserved
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=whole)).regime == RESIDENT
    assert cost(tinyllama(), 4, with_params(cl, l2_bytes=whole), model_blocks=9).regime == PREFETCHED


def test_prefetched_chips_load_each_block_once_resident_chips_never():
    pre, res = cost(tinyllama(), 8), cost(tinyllama(heads=64), 32)
    assert sum(ch.l3_bytes for ch in pre.memory.chips) == BLOCK_WEIGHTS
    assert len(pre.memory.extras) == 8 * 7 and pre.memory.extras.part == "l3"   # each chip: its 7 weight shards
    assert sum(ch.l3_bytes for ch in res.memory.chips) == 0 and res.sim.breakdown().get("l3", 0.0) == 0
    assert len(res.memory.extras) == 0
    one = cost(tinyllama(), 1)                     # streamed: the weights and every activation pass L3
    assert one.memory.chips[0].l3_bytes > BLOCK_WEIGHTS
    assert one.sim.breakdown()["l3"] > one.sim.breakdown()["compute"]


def test_a_block_of_a_prefetched_model_takes_its_chips_weight_load():
    # one block of eight on 8 chips: each chip loads its share of the next block (524 288 B at 1 GB/s)
    # while it runs this one, and its own work is shorter: the load is the block's time, and the rate
    c = cost(tinyllama(), 8)
    share = BLOCK_WEIGHTS / 8
    assert c.metrics.latency_s == pytest.approx(share / PARAMS.l3_bandwidth, rel=1e-12)
    assert c.sim.breakdown() == pytest.approx({"l3": share / PARAMS.l3_bandwidth})
    assert c.metrics.bottleneck_s == pytest.approx(share / PARAMS.l3_bandwidth, rel=1e-12)
    assert c.metrics.bottleneck.startswith("memory chip")
    streamed = simulate(c.problem, check_plan(c.problem.graph, c.problem.cluster,
                                              tensor_parallel_plan(c.problem.graph, c.problem.cluster.names)),
                        SimOptions(inputs=40, keep_timeline=False))
    assert streamed.throughput == pytest.approx(c.metrics.throughput, rel=1e-9)


def test_prefetch_loads_of_three_blocks_on_one_chip_by_hand():
    # 3 small blocks on one chip whose L2 holds two blocks, not three: prefetched. Block 1 loads at
    # once, block 2 once block 0's last weight task is done, block 0 again (the next input's) once
    # block 1's is done, with nothing waiting for it
    g = transformer_graph(TransformerShape("small", 64, 128, 4, 3, 1, 16))
    block = 4 * 64 * 64 + 3 * 64 * 128
    cl = with_params(load_cluster_spec("siracusa-1"), l2_bytes=2.5 * block + 1024, l2_reserved_bytes=1024)
    c = cost(g, 1, cl, model_blocks=3)
    assert c.regime == PREFETCHED
    tg = check_plan(c.problem.graph, cl, tensor_parallel_plan(c.problem.graph, cl.names))
    seg = segments(c.problem.graph).of_layer
    weights = {s: [t for t, task in enumerate(tg.tasks) if seg[task.layers[0]] == s and
                   c.problem.graph.layers[task.layers[0]].param_bytes] for s in range(3)}
    x = c.memory.extras
    assert list(x.before) == weights[1] + weights[2] + [-1] * len(weights[0])
    assert list(x.after) == [-1] * len(weights[1]) + [weights[0][-1]] * len(weights[2]) + \
        [weights[1][-1]] * len(weights[0])
    assert x.duration_s.sum() == pytest.approx(3 * block / PARAMS.l3_bandwidth)
    assert c.sim.unloaded_latency_s == pytest.approx(c.metrics.latency_s, rel=1e-9)
    # nothing streams: the L3 traffic is the three loads, and their energy is the tasks' (P T_comp + L2 + L3)
    assert c.memory.chips[0].l3_bytes == 3 * block
    m = McuModel(PARAMS)
    parts = [m.on_chip_parts(layer) for layer in c.problem.graph.layers]
    assert c.metrics.energy_j == pytest.approx(sum(PARAMS.power_active * t + b * PARAMS.l2_energy_per_byte
                                                   for t, b in parts) + 3 * block * PARAMS.l3_energy_per_byte)


def test_super_linear_once_a_block_share_is_double_buffered():
    t = {n: cost(tinyllama(), n).metrics.latency_s for n in (1, 4, 8)}
    assert t[1] / t[4] == pytest.approx(4, rel=0.1)
    assert t[1] / t[8] > 16


def test_time_drops_sharply_once_a_block_fits_on_chip():
    times, regimes = {}, {}
    for n in (1, 4, 8, 32):
        c = cost(tinyllama(heads=64), n)
        times[n], regimes[n] = c.metrics.latency_s, c.regime
    assert regimes == {1: STREAMED, 4: STREAMED, 8: PREFETCHED, 32: RESIDENT}
    assert times[1] / times[4] == pytest.approx(4, rel=0.1)   # linear while weights stream from L3
    assert times[1] / times[8] > 12                            # super-linear once a block fits (paper: 26.1x)
    assert times[4] / times[8] > 4                             # the drop: 2x the chips, > 4x faster


def test_a_chips_share_decides_its_regime():
    # two 1 MiB layers: one chip holds 2 MiB (> 1.75 MiB budget, 2 x 1 MiB too: streamed); split by columns
    # over two chips, each holds 1 MiB of the two and keeps it resident: no L3 at all
    g = chain("two", [gemm("w1", 1024, 1024), gemm("w2", 1024, 1024)])
    one = cost_plan(build_problem(g, load_cluster_spec("siracusa-1")),
                    Plan("two", "siracusa-1", "manual", assign={"w1": "chip0", "w2": "chip0"}))
    two_problem = build_problem(g, load_cluster_spec("siracusa-2"))
    halves = [Shard("chip0", "out", 0, 512), Shard("chip1", "out", 512, 1024)]
    split = cost_plan(two_problem, Plan("two", "siracusa-2", "manual", assign={
        "w1": halves, "w2": [Shard("chip0", "in", 0, 512), Shard("chip1", "in", 512, 1024)]},
        combine={"w2": Combine("sum", "chip0")}))
    assert one.regime == STREAMED and split.regime == RESIDENT
    assert all(ch.l3_bytes == 0 for ch in split.memory.chips)
    assert one.metrics.compute_s_per_device["chip0"] / max(split.metrics.compute_s_per_device.values()) > 3


def test_energy_and_latency_of_a_two_chip_pipeline_by_hand():
    p = PARAMS
    g = chain("two", [gemm("a", 64, 32), gemm("b", 32, 16)])
    problem = build_problem(g, load_cluster_spec("siracusa-2"))
    plan = Plan("two", "siracusa-2", "manual", stages=[Stage("chip0", ["a"]), Stage("chip1", ["b"])])
    c = cost_plan(problem, plan)
    overhead = p.kernel_overhead_cycles / p.clock_hz
    comp = [64 * 32 / (p.gemv_macs_per_cycle * p.clock_hz) + overhead,
            32 * 16 / (p.gemv_macs_per_cycle * p.clock_hz) + overhead]
    l2 = [(64 * 32 + 32) + 64 + 32, (32 * 16 + 16) + 32 + 16]        # int8 weights + bias, input, output
    assert all(b / p.l2_l1_bandwidth < t for b, t in zip(l2, comp))  # DMA hidden behind compute
    msg = 32                                                         # a's output, int8, over MIPI
    assert c.regime == RESIDENT and c.metrics.comm_energy_j == pytest.approx(msg * 100e-12)
    assert c.metrics.latency_s == pytest.approx(comp[0] + msg / 0.5e9 + comp[1])
    assert c.sim.breakdown() == pytest.approx({"compute": sum(comp), "transfer": msg / 0.5e9, "l2": 0.0, "l3": 0.0})
    energy = p.power_active * sum(comp) + p.l2_energy_per_byte * sum(l2) + 100e-12 * msg
    assert c.metrics.energy_j == pytest.approx(energy)
    assert c.metrics.edp == pytest.approx(energy * c.metrics.latency_s)


def test_the_embedding_lookup_costs_the_rows_it_reads():
    problem = load_problem("tinyllama-42m", "siracusa-8", decode_context=128)
    layer = problem.graph.layers[0]
    table = 32000 * 512                                  # int8, as the chips keep it
    m = McuModel(PARAMS)
    assert layer.onnx_ops[0] == "Gather" and m.held(layer) == layer.param_bytes >= table
    rows = 512 + (layer.param_bytes - table)             # one token's row, and the norm's weights beside it
    assert m.read(layer) == rows and m.is_lookup(layer) and m.dense(layer) == 0
    (plan,) = make_partitioner("tensor-parallel").solve(problem)
    tg = check_plan(problem.graph, problem.cluster, plan)
    own = plan_memory(problem, tg)
    t = next(i for i, task in enumerate(tg.tasks) if task.layers == (0,))
    compute, moved = m.on_chip_parts(layer)
    assert moved == rows + m.activations(layer)
    assert own.costs.time_s[t, 0] == pytest.approx(compute + max(0.0, moved / PARAMS.l2_l1_bandwidth - compute)
                                                   + rows / (PARAMS.l3_bandwidth * PARAMS.l3_stream_efficiency))
    assert own.costs.energy_j[t, 0] == pytest.approx(PARAMS.power_active * compute + rows * 100e-12 + moved * 2e-12)
    root = next(ch for ch in own.chips if ch.device == "chip0")
    assert root.lookup_bytes == layer.param_bytes                       # the table stays in L3
    assert root.model_weight_bytes == pytest.approx(next(ch for ch in own.chips if ch.device == "chip1")
                                                    .model_weight_bytes, rel=0.01)   # and does not crowd L2
    assert own.costs.time_s[t, 0] < 1e-4                                # not 16 MB from L3 (~36 ms)


def test_pipeline_stages_across_blocks_are_split_and_costed_alike():
    problem = load_problem("tinyllama-42m", "siracusa-8", decode_context=128)
    g = problem.graph
    starts = block_starts(g)
    cuts = [0, starts[2] + 3, starts[5], g.num_layers]           # a stage ends inside block 2
    plan = Plan(g.name, "siracusa-8", "manual", stages=[Stage(f"chip{s}", g.names[a:b])
                                                        for s, (a, b) in enumerate(zip(cuts, cuts[1:]))])
    tg = check_plan(g, problem.cluster, plan)
    effects = MemoryEffects.of(problem)
    split, parent = effects.split(tg)
    assert tg.num_tasks == 3 and split.num_tasks == 3 + 3 + 4     # segments 0-2, 2-4, 5-7 and the head
    assert sorted(set(parent.tolist())) == [0, 1, 2] and len(split.messages()) == len(tg.messages())
    closed = estimate(problem, [plan], "closed")
    sim = simulate(problem, tg, SimOptions(inputs=1))
    assert sim.unloaded_latency_s == pytest.approx(float(closed.latency_s[0]), rel=1e-9)
    assert sim.energy_j == pytest.approx(float(closed.energy_j[0]), rel=1e-9)
    assert make_partitioner("exact").solve(problem)[0].params["optimized"].startswith("the per-layer cost table")


def test_a_batch_of_assignments_costs_each_as_alone():
    problem = build_problem(tinyllama(heads=64), load_cluster_spec("siracusa-8"), scope=ModelScope(MODEL_BLOCKS))
    tg = check_plan(problem.graph, problem.cluster, tensor_parallel_plan(problem.graph, problem.cluster.names))
    rng = np.random.default_rng(0)
    rows = np.vstack([tg.device] + [rng.permutation(8)[tg.device] for _ in range(3)])
    batch = MappingEvaluator(problem, tg).evaluate(rows)
    for r, row in enumerate(rows):
        alone = MappingEvaluator(problem, replace(tg, tasks=[replace(t, device=int(d))
                                                             for t, d in zip(tg.tasks, row)])).evaluate()
        for key in ("latency_s", "energy_j", "bottleneck_s"):
            assert getattr(batch, key)[r] == pytest.approx(getattr(alone, key)[0], rel=1e-12), (r, key)


def test_blocks_and_the_head_are_segments():
    pre = tinyllama(blocks=3)
    assert [pre.layers[i].name for i in block_starts(pre)] == ["b0.attn_norm", "b1.attn_norm", "b2.attn_norm"]
    post = transformer_graph(TransformerShape("bert", 64, 64, 4, 2, 4, 4, gated=False, pre_norm=False))
    assert [post.layers[i].name for i in block_starts(post)] == ["b0.wq", "b0.ffn_norm"]
    assert segments(chain("fc", [gemm("a", 4, 4), gemm("b", 4, 4)])).of_layer == (0, 1)   # layer by layer
    zoo = load_problem("tinyllama-42m", "siracusa-8", decode_context=128).graph
    seg = segments(zoo)
    assert seg.blocks == 8 and seg.count == 9 and seg.of_layer[-1] == 8 and seg.of_layer[-2] == 7
    assert zoo.layers[-1].name == "output/MatMul" and seg.of_layer[0] == 0


def test_clusters_without_an_mcu_have_no_memory_model():
    problem = load_problem("alexnet", "jetson-xavier-nx-4")
    plan = Plan("alexnet", problem.cluster.name, "manual", stages=[Stage(problem.cluster.names[0], problem.graph.names)])
    assert MemoryEffects.of(problem) is None
    assert plan_memory(problem, check_plan(problem.graph, problem.cluster, plan)) is None
    assert problem.graph.layers[0].attrs["elem_bytes"] == 4                # deployed as exported


def test_a_cluster_of_int8_chips_deploys_the_model_at_one_byte_per_element():
    fp32 = load_problem("tinyllama-42m", "jetson-xavier-nx-4", decode_context=128).graph
    int8 = load_problem("tinyllama-42m", "siracusa-8", decode_context=128).graph
    assert int8.meta["element_bytes"] == 1 and [x.macs for x in int8.layers] == [x.macs for x in fp32.layers]
    tokens = next(t for t in int8.tensors if t.producer < 0)
    assert tokens.dtype == "int64" and tokens.nbytes == 8                        # token ids keep their size
    assert int8.layers[0].in_bytes == fp32.layers[0].in_bytes == 8
    assert [x.param_bytes * 4 for x in int8.layers] == [x.param_bytes for x in fp32.layers]
    assert np.array_equal(int8.cut_bytes[1:] * 4, fp32.cut_bytes[1:])
    assert int8.layers[0].attrs["lookup_bytes"] * 4 == fp32.layers[0].attrs["lookup_bytes"] == 512 * 4


def test_a_scope_needs_blocks_to_scale():
    from hetsplit.errors import ModelError

    problem = build_problem(chain("fc", [gemm("a", 4, 4)]), load_cluster_spec("siracusa-1"), scope=ModelScope(8))
    with pytest.raises(ModelError, match="no Transformer blocks"):
        MemoryEffects.of(problem)


def test_a_shard_of_a_lookup_reads_its_share_of_the_rows():
    from hetsplit.graph.shard import shard_layer

    layer = gemm("emb", 64, 100)
    layer = replace(layer, attrs={**layer.attrs, "param_bytes_read": 1000, "lookup_bytes": 400})
    half = shard_layer(layer, "out", 0, 50, 100)
    assert half.attrs["param_bytes_read"] == 1000 * half.param_bytes // layer.param_bytes
    assert half.attrs["lookup_bytes"] == 400 * half.param_bytes // layer.param_bytes
