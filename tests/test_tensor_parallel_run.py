"""The zoo's TinyLlama decoded tensor-parallel by the one LLM program, from the Hugging Face folder it is
written as (``experiments.tensor_parallel_run``): real processes, a star all-reduce through the leader.
What the runtime does on any checkpoint (uneven shares, pipelines into tensor-parallel stages, plan files)
is tested in ``test_llm_tensor_parallel_run``; here, the zoo path: the unsplit model's tokens and logits,
the bytes each rank sends counted by hand, a killed worker named within the timeout."""

from __future__ import annotations

import time

import pytest

from hetsplit.errors import RuntimeFailure
from hetsplit.experiments.tensor_parallel_run import TensorParallelRunOptions, run_tensor_parallel
from hetsplit.runtime.launch import processes_of

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)

VOCAB, E, F, HEADS, LAYERS, SEQ = 100, 64, 128, 4, 2, 16
F32, TOKEN, PICK = 4, 8, 16     # a hidden value; the token id (int64); a best logit and its index (float64)
ATOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The zoo's TinyLlama at E 64, F 128, 4 heads, 2 layers, vocab 100, 16 positions, as a HF folder."""
    from hetsplit.graph.zoo.llama_checkpoint import write_llama_checkpoint
    from hetsplit.graph.zoo.transformer import TinyLlama

    torch.manual_seed(0)
    return write_llama_checkpoint(TinyLlama(VOCAB, E, F, HEADS, LAYERS, SEQ).eval(), tmp_path_factory.mktemp("tp"))


def options(**kw) -> TensorParallelRunOptions:
    return TensorParallelRunOptions(**{"prompt_tokens": 4, "new_tokens": 5, "atol": ATOL, "probe": False,
                                       "timeout_s": 20, **kw})


def test_two_workers_give_the_unsplit_models_tokens_and_send_the_star_all_reduces_bytes(tiny):
    from hetsplit.graph.llm.decoder import greedy
    from hetsplit.graph.llm.hf import read_hf

    r = run_tensor_parallel(tiny, 2, options())
    v = r.run.verify
    assert v is not None and v["ok"] and v["identical_tokens"] and v["max_abs_logit_diff"] <= ATOL
    want, _ = greedy(read_hf(tiny), r.run.prompt_tokens, 5)
    assert r.run.tokens == want and len(r.run.prompt_tokens) == 4
    (stage,) = r.run.plan.stages
    assert [m.share.to_dict() for m in stage.shares] == [{"kv_heads": [0, 2], "ffn": [0, 64], "vocab": [0, 50]},
                                                         {"kv_heads": [2, 4], "ffn": [64, 128], "vocab": [50, 100]}]
    # per decode token, two syncs per block: the member sends its partial sum up, the leader the total down;
    # the member sends its best logit to the leader, the leader the token back to it
    assert [s.sent_bytes for s in r.run.measured.stages] == [2 * LAYERS * E * F32 + TOKEN,
                                                             2 * LAYERS * E * F32 + PICK]
    assert r.measured_s > 0 and r.predicted_s > 0 and r.baseline_s is None


@pytest.mark.parametrize("kind,match", [("die", "local-cpu1 .*died: killed by SIGKILL"),
                                        ("stall", "nothing arrived from local-cpu1 within 3 s")])
def test_a_killed_or_stalled_worker_ends_the_run_naming_its_device_within_the_timeout(tiny, tmp_path, kind, match):
    t0 = time.time()
    with pytest.raises(RuntimeFailure, match=match):
        run_tensor_parallel(tiny, 2, options(timeout_s=3, faults={"1": {"kind": kind, "after": 2}},
                                             run_dir=tmp_path / "run"))
    assert time.time() - t0 < 30
    assert processes_of(tmp_path / "run") == []
