"""A tiny TinyLlama decoded tensor-parallel for real: processes, gloo, per-rank KV caches.

Every run checks each step's logits against the unsplit model (the runtime fails above atol); here
the bytes each rank sends per token are also counted by hand for the tree, and each rank's
parameters add up to the model's without duplication. A killed or stalled worker ends the run with
its name, within the timeout.
"""

from __future__ import annotations

import time
import warnings

import pytest

from hetsplit.errors import PlanError, RuntimeFailure
from hetsplit.graph.onnx_import import load_onnx
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Combine
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.compile import plan_cluster
from hetsplit.runtime.tensor_parallel import (TensorParallelOptions, block_parameters, make_job, rank_weights,
                                              run_tensor_parallel_model)
from hetsplit.search.tensor_parallel import tensor_parallel_plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)

VOCAB, E, F, HEADS, LAYERS, SEQ = 100, 64, 128, 4, 2, 16
MSG = E * 4                  # one token's E fp32 values: every broadcast and partial sum
ATOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The zoo's TinyLlama at E 64, F 128, 4 heads, 2 layers, vocab 100, 16 positions, and its graph."""
    from hetsplit.graph.zoo.transformer import TinyLlama

    torch.manual_seed(0)
    module = TinyLlama(VOCAB, E, F, HEADS, LAYERS, SEQ).eval()
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, SEQ, dtype=torch.int64),), str(path), dynamo=False,
                          opset_version=17, input_names=["tokens"], output_names=["output"])
    return module, load_onnx(path, name="tiny-llama")


def run(tiny, workers: int, tree: int = 4):
    from hetsplit.experiments.tensor_parallel_run import run_tensor_parallel

    return run_tensor_parallel("tiny-llama", workers, prompt_tokens=4, new_tokens=5, tree=tree, atol=ATOL,
                               measure_baseline=False, loaded=tiny, timeout_s=20)


@pytest.mark.parametrize("workers,tree,by_hand", [
    # flat: d0 broadcasts to d1 (4 phases + the LM head's input), d1 sends 4 partial sums and its 50 logits
    (2, 4, [5 * MSG, 4 * MSG + 50 * 4]),
    # groups (d0 d1) (d2 d3): d0 -> d1, d2 and d2 -> d3 down; d1 -> d0, d3 -> d2, d2 -> d0 up; 25 logits each
    (4, 2, [4 * 2 * MSG + 2 * MSG, 4 * MSG + 100, 4 * 2 * MSG + MSG + 100, 4 * MSG + 100]),
])
def test_decode_matches_the_unsplit_model_and_sends_the_tree_bytes(tiny, workers, tree, by_hand):
    r = run(tiny, workers, tree)
    rep = r.report
    assert rep.max_abs_err < ATOL
    assert len(rep.generated) == 5 + 1 and len(rep.steps_s) == 1 + 5
    assert [k.sent_bytes for k in rep.ranks] == by_hand
    assert [k.sent_bytes for k in rep.ranks] == [r.prediction.sent_bytes[k.device] for k in rep.ranks]
    assert all(k.comm_s > 0 and k.compute_s > 0 for k in rep.ranks)
    assert r.predicted_s > 0 and r.measured_s > 0


def test_uneven_slices_hold_each_weight_once(tiny):
    """3 workers, 4 heads: heads 2/1/1, F 43/43/42, vocabulary 34/33/33; parameters per rank sum to the
    model's (the blocks; the embedding and norm on the root; the LM head's rows once)."""
    module, _ = tiny
    rep = run(tiny, 3).report
    assert rep.max_abs_err < ATOL
    hd = E // HEADS
    blocks = [LAYERS * (4 * h * hd * E + 3 * f * E) for h, f in zip([2, 1, 1], [43, 43, 42])]
    blocks[0] += LAYERS * 2 * E                          # the block norms run on the root
    assert [k.block_params for k in rep.ranks] == blocks
    assert sum(blocks) == block_parameters(module)
    assert [k.other_params for k in rep.ranks] == [VOCAB * E + E + 34 * E, 33 * E, 33 * E]


def test_each_rank_gets_only_its_slices_and_they_rebuild_the_weights(tiny):
    module, graph = tiny
    plan = tensor_parallel_plan(graph, ["a", "b", "c"])
    job = make_job(graph, plan, module, plan_cluster(plan).names, [1, 2], 3)
    ws = [rank_weights(module, job, r) for r in range(3)]
    blk = module.layers[1]
    assert torch.equal(torch.cat([w["layers.1.wq"] for w in ws]), blk.wq.weight)
    assert torch.equal(torch.cat([w["layers.1.wo"] for w in ws], 1), blk.wo.weight)
    assert torch.equal(torch.cat([w["layers.1.w2"] for w in ws], 1), blk.w2.weight)
    assert torch.equal(torch.cat([w["output"] for w in ws]), module.output.weight)
    assert all("tok_embeddings" not in w and "layers.0.ffn_norm" not in w for w in ws[1:])
    assert ws[1]["layers.0.wk"].data_ptr() != blk.wk.weight.data_ptr()


def test_a_plan_the_runtime_cannot_run_is_refused_by_name(tiny):
    """check_plan accepts a residual add on another device; the runtime adds the skip on the root."""
    module, graph = tiny
    plan = tensor_parallel_plan(graph, ["a", "b"])
    plan.assign["layers.1/Add_3"] = "b"
    plan.combine["layers.1/Add_3"] = Combine("broadcast", "b", 4)
    check_plan(graph, plan_cluster(plan), plan)
    with pytest.raises(PlanError, match="layers.1/Add_3.*not on the root 'a'"):
        make_job(graph, plan, module, ["a", "b"], [1], 1)


@pytest.mark.parametrize("kind,match", [("die", "died: killed by SIGKILL"), ("stall", "stalled or .* hangs")])
def test_a_dead_or_stalled_worker_ends_the_run_with_its_name(tiny, tmp_path, kind, match):
    module, graph = tiny
    plan = tensor_parallel_plan(graph, ["d0", "d1", "d2"])
    opts = TensorParallelOptions(prompt_tokens=4, new_tokens=5, atol=ATOL, timeout_s=3, run_dir=tmp_path / "run",
                                 faults={"2": {"kind": kind, "after": 2}})
    t0 = time.time()
    with pytest.raises(RuntimeFailure, match=match) as err:
        run_tensor_parallel_model(module, graph, plan, opts)
    assert time.time() - t0 < 30
    assert "d2" in str(err.value)
    assert processes_of(tmp_path / "run") == []
