"""Tensor-parallel Transformer plans (Bochem et al., seed 002): block detection, slicing, the
hierarchical all-reduce's messages counted by hand, uneven slices, errors, and a real run."""

from __future__ import annotations

import numpy as np
import pytest

from factories import cluster
from hetsplit.errors import ModelError, PlanError
from hetsplit.graph.transformer import find_blocks
from hetsplit.graph.transformer_shapes import TransformerShape, transformer_graph
from hetsplit.plan.check import check_plan, collectives
from hetsplit.plan.types import Plan
from hetsplit.search.tensor_parallel import even_slices, tensor_parallel_plan

E, F, HEADS, S = 64, 192, 8, 4
F32 = 4


def tiny(blocks: int = 2, gated: bool = True, pre_norm: bool = True, tokens: int = S, context: int = S):
    return transformer_graph(TransformerShape("tiny", E, F, HEADS, blocks, tokens, context, gated, pre_norm))


def chips(n: int) -> list[str]:
    return [f"d{k}" for k in range(n)]


def expand(g, n, tree=4):
    plan = tensor_parallel_plan(g, chips(n), tree)
    return plan, check_plan(g, cluster(["cpu"] * n), plan)


# ---- detection ------------------------------------------------------------------------------------

@pytest.mark.parametrize("gated,pre_norm", [(True, True), (False, False)])
def test_blocks_are_found_with_their_heads_and_ffn_width(gated, pre_norm):
    g = tiny(3, gated, pre_norm)
    blocks = find_blocks(g)
    assert len(blocks) == 3
    for b, block in enumerate(blocks):
        a = block.attention
        assert [g.names[i] for i in a.projections] == [f"b{b}.wq", f"b{b}.wk", f"b{b}.wv"]
        assert g.names[a.out] == f"b{b}.wo" and (a.heads, a.head_dim) == (HEADS, E // HEADS)
        assert [g.names[i] for i in a.heads_chain] == [f"b{b}.scores", f"b{b}.softmax", f"b{b}.context"]
        (ffn,) = block.ffns
        assert ffn.width == F
        assert [g.names[i] for i in ffn.up] == ([f"b{b}.w1", f"b{b}.w3"] if gated else [f"b{b}.up"])
        assert g.names[ffn.down] == (f"b{b}.w2" if gated else f"b{b}.down")


def test_a_graph_without_attention_is_refused_by_name():
    from devmodel_graphs import vgg8

    with pytest.raises(ModelError, match="no multi-head attention"):
        find_blocks(vgg8())


# ---- slicing ------------------------------------------------------------------------------------

def test_even_slices_differ_by_at_most_one_and_cover_the_axis():
    for total in (1, 7, 8, 2048):
        for parts in (1, 3, 8, 64):
            sl = even_slices(total, parts)
            sizes = [b - a for a, b in sl]
            assert sl[0][0] == 0 and sl[-1][1] == total and sum(sizes) == total
            assert max(sizes) - min(sizes) <= 1 and len(sl) == min(total, parts)
            assert all(sl[j][1] == sl[j + 1][0] for j in range(len(sl) - 1))
    with pytest.raises(PlanError):
        even_slices(0, 2)


@pytest.mark.parametrize("n", [2, 3, 4, 8, 12])
def test_heads_and_f_slices_sum_to_the_unsplit_model(n):
    """Per sliced layer: shard sizes sum to the heads / F, MACs and weights of the shards sum to
    the whole layer's (nothing duplicated, nothing lost); uneven when n does not divide them."""
    g = tiny()
    plan, tg = expand(g, n)
    for block in find_blocks(g):
        a = block.attention
        heads = plan.assign[g.names[a.heads_chain[0]]]
        assert sum(s.size for s in heads) == HEADS
        assert max(s.size for s in heads) - min(s.size for s in heads) <= 1
        (ffn,) = block.ffns
        f_shards = plan.assign[g.names[ffn.down]]
        assert sum(s.size for s in f_shards) == F and len(f_shards) == min(n, F)
        q = plan.assign[g.names[a.q]]
        assert [(s.start, s.stop) for s in q] == [(h.start * (E // HEADS), h.stop * (E // HEADS)) for h in heads]
    for i, layer in enumerate(g.layers):
        works = [t.work for t in tg.tasks if t.kind == "shard" and t.layers == (i,)]
        if works:
            assert sum(w.macs for w in works) == pytest.approx(layer.macs)
            assert sum(w.param_bytes for w in works) == pytest.approx(layer.param_bytes)
    devices_per_layer = {name: {s.device for s in place} for name, place in plan.assign.items()
                         if not isinstance(place, str)}
    assert all(len(d) == len(plan.assign[name]) for name, d in devices_per_layer.items())   # one shard per chip


def test_more_chips_than_heads_leaves_the_extra_chips_to_the_ffn():
    g = tiny(1)
    plan, _ = expand(g, 12)
    assert plan.params["heads_per_chip"] == [1] * HEADS
    assert plan.params["ffn_per_chip"] == [[16] * 12]
    assert len(plan.assign["b0.wq"]) == HEADS and len(plan.assign["b0.w2"]) == 12


def test_one_chip_is_the_unsplit_model():
    g = tiny()
    plan, tg = expand(g, 1)
    assert set(plan.assign.values()) == {"d0"} and not plan.combine
    assert tg.messages() == []


# ---- the all-reduce tree, counted by hand ------------------------------------------------------------

def test_all_reduce_tree_messages_and_bytes_by_hand_on_eight_chips():
    """8 chips in groups of 4, root d0. Per synchronization (attention, FFN):
    reduce: d1,d2,d3 -> d0 and d5,d6,d7 -> d4 (partials), d4 -> d0 (group sum): 7 messages;
    broadcast of the normed tensor: d0 -> d1,d2,d3 and d0 -> d4 -> d5,d6,d7: 7 messages.
    Each carries S x E fp32 values."""
    g = tiny(2)
    plan, tg = expand(g, 8)
    names = tg.cluster.names
    nbytes = S * E * F32
    msgs = tg.messages()
    assert all(m.nbytes == nbytes for m in msgs)
    block0 = [(m.payload, names[m.src], names[m.dst]) for m in msgs if m.payload.startswith(("b0.", "tokens"))]
    reduce_o = sorted((s, d) for p, s, d in block0 if p.startswith("b0.wo."))
    assert reduce_o == sorted([("d1", "d0"), ("d2", "d0"), ("d3", "d0"), ("d5", "d4"), ("d6", "d4"), ("d7", "d4"),
                               ("d4", "d0")])
    bcast_ffn_norm = sorted((s, d) for p, s, d in block0 if p.startswith("b0.ffn_norm.out"))
    assert bcast_ffn_norm == sorted([("d0", "d1"), ("d0", "d2"), ("d0", "d3"), ("d0", "d4"), ("d4", "d5"),
                                     ("d4", "d6"), ("d4", "d7")])
    # per block two reductions (wo, w2) and two broadcasts (attn_norm, ffn_norm), 7 messages each; the
    # model input arrives at the root and the output leaves from it: nothing else moves
    assert len(msgs) == 2 * 4 * 7
    colls = collectives(g, plan)
    assert len(colls) == 4 and all(c.groups() == [tuple(chips(8)[:4]), tuple(chips(8)[4:])] for c in colls)


def test_a_flat_all_reduce_sends_every_partial_to_the_root():
    g = tiny(1)
    _, tg = expand(g, 8, tree=0)
    names = tg.cluster.names
    reduce_o = {(names[m.src], names[m.dst]) for m in tg.messages() if m.payload.startswith("b0.wo.")}
    assert reduce_o == {(f"d{k}", "d0") for k in range(1, 8)}


def test_the_plan_round_trips_through_json_and_still_checks():
    g = tiny()
    plan, _ = expand(g, 5)
    again = Plan.from_dict(plan.to_dict())
    assert again.combine == plan.combine and again.assign == plan.assign
    check_plan(g, cluster(["cpu"] * 5), again)


def test_bad_broadcasts_are_named():
    g = tiny(1)
    plan, _ = expand(g, 4)
    from hetsplit.plan.types import Combine

    plan.combine["b0.ffn_norm"] = Combine("broadcast", "d2", 4)
    with pytest.raises(PlanError, match="starts where the layer runs"):
        check_plan(g, cluster(["cpu"] * 4), plan)
    plan.combine["b0.wo"] = Combine("broadcast", "d0", 4)
    with pytest.raises(PlanError, match="broadcast sends a whole layer"):
        check_plan(g, cluster(["cpu"] * 4), plan)


# ---- the partitioner and the evaluator -------------------------------------------------------------

def test_partitioner_on_siracusa_gives_evaluated_plans_and_refuses_too_many_chips():
    from hetsplit.search import make_partitioner
    from hetsplit.workflow import load_problem

    problem = load_problem("tinyllama-42m", "siracusa-4")
    (plan,) = make_partitioner("tensor-parallel").solve(problem)
    assert plan.algorithm == "tensor-parallel" and plan.params["chips"] == 4
    assert plan.metrics is not None and plan.metrics.latency_s > 0
    assert set(plan.metrics.compute_s_per_device) == {"chip0", "chip1", "chip2", "chip3"}
    (two,) = make_partitioner("tensor-parallel", chips=2).solve(problem)
    assert two.params["chips"] == 2
    with pytest.raises(PlanError, match="5 chips"):
        make_partitioner("tensor-parallel", chips=5).solve(problem)


def test_autoregressive_and_prompt_graphs_cost_what_their_shapes_say():
    ar = tiny(1, tokens=1, context=128)
    prompt = tiny(1, tokens=16, context=16)
    assert ar.layers[ar.index("b0.wq")].macs == E * E and prompt.layers[prompt.index("b0.wq")].macs == 16 * E * E
    scores = ar.layers[ar.index("b0.scores")]
    assert scores.macs == HEADS * 1 * (E // HEADS) * 128          # one query against a cache of 128
    assert scores.in_bytes == HEADS * (E // HEADS) * (1 + 128) * F32  # the cache is read from memory
    assert np.isclose(sum(layer.param_bytes for layer in ar.layers), sum(layer.param_bytes for layer in prompt.layers))


# ---- for real: an encoder exported from PyTorch (hand-written attention), split and run ----------------

@pytest.mark.timeout(180)
@pytest.mark.parametrize("n,tree", [(4, 2), (3, 4)])
def test_an_exported_encoder_runs_tensor_parallel_in_processes(tmp_path, n, tree):
    """Two post-norm blocks (4 heads, F 128) over n worker processes: 3 chips take uneven heads
    (2, 1, 1) and F slices; tree 2 relays the all-reduces and broadcasts through group leaders.
    Outputs match the unsplit model; every worker sends exactly the TaskGraph's bytes."""
    torch = pytest.importorskip("torch")
    from test_runtime_mapping import Block, assert_messages_match_the_taskgraph, assert_run, export

    from hetsplit.runtime import RunOptions, load_manifest, run_plan

    torch.manual_seed(0)
    g, path = export(torch.nn.Sequential(Block(), Block()), (1, 8, 64), tmp_path / "enc.onnx")
    assert len(find_blocks(g)) == 2
    cl = cluster(["cpu"] * n)
    plan = tensor_parallel_plan(g, chips(n), tree)
    if n == 3:
        assert plan.params["heads_per_chip"] == [2, 1, 1]
    report = run_plan(plan, g, path, RunOptions(inputs=3, timeout_s=30, run_dir=tmp_path / "run"),
                      split_dir=tmp_path / "split", cluster=cl)
    manifest = load_manifest(tmp_path / "split")
    assert_messages_match_the_taskgraph(manifest, g, plan, cl)
    assert assert_run(report, manifest, g, plan, cl, 3) < 1e-4
    if tree == 2:
        assert any(m.collective is not None and manifest.collectives[m.collective].kind == "scatter"
                   and m.src == "d2" for m in manifest.messages)   # a leader relays


@pytest.mark.timeout(180)
def test_plan_and_run_commands_run_a_tensor_parallel_plan(tmp_path, capsys):
    """What `hetsplit plan --algo tensor-parallel` writes (head and F shards, sum combines in trees of 2,
    broadcasts) runs through `hetsplit run PLAN MODEL` on the one worker program, outputs verified."""
    torch = pytest.importorskip("torch")
    import json

    from test_runtime_mapping import Block, export

    from hetsplit.cli.main import main
    from hetsplit.runtime.launch import processes_of

    torch.manual_seed(0)
    _, path = export(torch.nn.Sequential(Block(), Block()), (1, 8, 64), tmp_path / "enc.onnx")
    cpu = "{type: cpu, kind: cpu, memory: 8GiB, peak_macs: 1e10/s, mem_bandwidth: 10GB/s, power_active: 10W}"
    (tmp_path / "four.yaml").write_text("name: four\ndevices:\n" + "".join(
        f"  - {{name: c{i}, {cpu[1:]}\n" for i in range(4)) + "links:\n  default: {bandwidth: 1GB/s}\n")
    assert main(["plan", str(path), "--cluster", str(tmp_path / "four.yaml"), "--algo", "tensor-parallel",
                 "--tree", "2", "--no-baselines", "--out", str(tmp_path / "plans")]) == 0
    (plan,) = json.loads((tmp_path / "plans" / "plans.json").read_text())["plans"]
    assert {c["kind"] for c in plan["combine"].values()} >= {"sum", "broadcast"}
    capsys.readouterr()
    assert main(["run", str(tmp_path / "plans" / "plans.json"), str(path), "--cluster", str(tmp_path / "four.yaml"),
                 "-n", "3", "--timeout", "30", "--out", str(tmp_path / "run.json"),
                 "--run-dir", str(tmp_path / "run")]) == 0
    report = json.loads((tmp_path / "run.json").read_text())
    assert report["verify"]["ok"] and report["verify"]["outputs_checked"] == 3
    assert report["plan_kind"] == "mapping" and [d["device"] for d in report["devices"]] == ["c0", "c1", "c2", "c3"]
    assert {h["collective"] for h in report["hops"]} == {None, "gather", "scatter"}
    assert not processes_of(tmp_path / "run")


def test_packed_qkv_projections_are_refused_with_the_reason(tmp_path):
    torch = pytest.importorskip("torch")
    import warnings

    from hetsplit.graph.onnx_import import load_onnx

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(32, 4, batch_first=True)
            self.f = torch.nn.Linear(32, 32)

        def forward(self, x):
            return self.f(x + self.att(x, x, x, need_weights=False)[0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder().eval(), (torch.randn(1, 6, 32),), str(tmp_path / "mha.onnx"), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["y"])
    with pytest.raises(ModelError, match="packed projection"):
        find_blocks(load_onnx(tmp_path / "mha.onnx"))


# ---- autoregressive mode of an exported model ------------------------------------------------------------

def test_decode_step_of_the_zoo_tinyllama_matches_a_block_built_from_its_dimensions():
    """The zoo graph is one pass over 128 tokens; its decode step (one token, a cache of 128) costs
    each block layer exactly what the block built from E 512, F 2048, 8 heads costs."""
    from hetsplit.graph.load import load_model
    from hetsplit.graph.transformer import decode_step

    g = decode_step(load_model("tinyllama-42m"), 128)
    shape = transformer_graph(TransformerShape("ref", 512, 2048, 8, 1, tokens=1, context=128))
    pairs = {"wq/MatMul": "wq", "MatMul": "scores", "Softmax": "softmax", "MatMul_1": "context", "w1/MatMul": "w1",
             "w2/MatMul": "w2"}
    for ours, ref in pairs.items():
        a, b = g.layers[g.index(f"layers.3/{ours}")], shape.layers[shape.index(f"b0.{ref}")]
        assert (a.macs, a.in_bytes, a.out_bytes) == (b.macs, b.in_bytes, b.out_bytes), ours
    assert g.meta["mode"] == "autoregressive" and len(find_blocks(g)) == 8
    plan = tensor_parallel_plan(g, chips(8))
    check_plan(g, cluster(["cpu"] * 8), plan)
    assert max(m.nbytes for m in check_plan(g, cluster(["cpu"] * 8), plan).messages()
               if m.payload.startswith("layers.0/")) == 512 * F32    # one token's E values per message


def test_plan_command_plans_a_decode_step_tensor_parallel(capsys):
    from hetsplit.cli.main import main

    assert main(["plan", "tinyllama-42m", "--cluster", "siracusa-4", "--algo", "tensor-parallel", "--decode", "128",
                 "--no-baselines", "--json"]) == 0
    import json

    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert plan["algorithm"] == "tensor-parallel" and plan["params"]["chips"] == 4
    assert plan["combine"]["layers.0/wo/MatMul"] == {"kind": "sum", "on": "chip0", "tree": 4}
