"""The onnxruntime executor of an LLM stage (``runtime.llm_ort``, graphs of ``graph.llm.onnx_blocks``): the
torch decoder's logits, whole, in stages, in tensor-parallel shares; run by real processes with
``generate --executor onnxruntime``; costed by a probe of its own."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from hetsplit.errors import PlanError
from hetsplit.estimate.llm import Stage
from hetsplit.graph.llm.decoder import Decoder, StageSpec
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.graph.llm.shares import TensorShare
from hetsplit.runtime.llm_ort import OrtDecoder, session_groups
from hetsplit.runtime.llm_pipeline import PipelineJob
from hetsplit.workflow.generate import GenerateOptions, generate
from llm_tiny import write_tiny_gguf
from test_llm_generate import local_cluster
from test_llm_tensor_parallel_run import uneven

PROMPT = torch.tensor([5, 17, 42, 99, 7])


def steps(dec, n: int = 4) -> torch.Tensor:
    """The prompt's logits at every position, then ``n`` decode steps' (each fed the step before's argmax)."""
    rows = [dec.forward(PROMPT, 0, every_position=True)]
    token, pos = int(rows[0][-1].argmax()), len(PROMPT)
    for _ in range(n):
        rows.append(dec.forward(torch.tensor([token]), pos))
        token, pos = int(rows[-1][-1].argmax()), pos + 1
    return torch.cat(rows)


@pytest.mark.parametrize("tied", [False, True])
def test_the_whole_model_on_onnxruntime_gives_the_torch_decoders_logits(tmp_path, tied):
    m = read_gguf(write_tiny_gguf(tmp_path / "m.gguf", tied=tied))
    want, got = steps(Decoder(m, StageSpec.whole(m.config), 16)), steps(OrtDecoder(m, StageSpec.whole(m.config), 16))
    assert got.shape == want.shape == (len(PROMPT) + 4, m.config.vocab)
    assert float((got - want).abs().max()) < 1e-4
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_stages_chained_and_blocks_in_sessions_of_their_own_give_the_same_logits(tmp_path, monkeypatch):
    m = read_gguf(write_tiny_gguf(tmp_path / "m.gguf", blocks=3))
    whole = Decoder(m, StageSpec.whole(m.config), 8).forward(PROMPT, 0)
    monkeypatch.setattr("hetsplit.runtime.llm_ort.SESSION_BYTES", 1)       # one session per block
    first, last = OrtDecoder(m, StageSpec(0, 1, True, False), 8), OrtDecoder(m, StageSpec(1, 3, False, True), 8)
    assert len(first.calls) == 1 and [c.blocks for c in last.calls] == [range(1, 2), range(2, 3)]
    assert float((last.forward(first.forward(PROMPT, 0), 0) - whole).abs().max()) < 1e-4


def test_session_groups_cut_blocks_at_the_byte_budget():
    assert session_groups(range(2, 9), 100, 250) == [range(2, 4), range(4, 6), range(6, 8), range(8, 9)]
    assert session_groups(range(0, 3), 500, 250) == [range(0, 1), range(1, 2), range(2, 3)]   # a block at least
    assert session_groups(range(0, 3), 10, 1 << 30) == [range(0, 3)]


def test_tensor_parallel_members_on_onnxruntime_sum_to_the_whole_models_logits(tmp_path):
    """Two members in threads, each block's partials summed between them; one member holds no KV-head
    group, the other no FFN column: their halves are zero, as the torch decoder's."""
    m = read_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    c = m.config
    shares = [TensorShare((0, c.kv_heads), (0, 0), (0, 100)), TensorShare((c.kv_heads, c.kv_heads), (0, c.ffn),
                                                                           (100, c.vocab))]
    members = [OrtDecoder(m, StageSpec.whole(c), 16, share=s) for s in shares]
    barrier, partials = threading.Barrier(2), [torch.empty(0), torch.empty(0)]

    def reducer(k: int):
        def reduce(partial: torch.Tensor) -> torch.Tensor:
            partials[k] = partial.clone()
            barrier.wait()
            total = partials[0] + partials[1]
            barrier.wait()
            return total
        return reduce

    out: list = [None, None]

    def member(k: int) -> None:
        out[k] = members[k].forward(PROMPT, 0, reduce=reducer(k))

    threads = [threading.Thread(target=member, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    want = Decoder(m, StageSpec.whole(c), 16).forward(PROMPT, 0)
    assert float((torch.cat(out, dim=1) - want).abs().max()) < 1e-4


def test_generate_on_onnxruntime_over_processes_gives_the_unsplit_models_tokens(tmp_path):
    """A stage alone, then a tensor-parallel last stage of uneven shares, every rank on onnxruntime."""
    three = write_tiny_gguf(tmp_path / "three.gguf", seed=3, blocks=3)
    last = Stage("cpu1", 1, 3, uneven(three, ["cpu1", "cpu2"], [20, 12], [9, 23]))
    r = generate(three, local_cluster(3), GenerateOptions("the cat sat on", tokens=6, verify=True, timeout_s=30,
                                                          plan=(Stage("cpu0", 0, 1), last), executor="onnxruntime"))
    assert r.plan.executor == "onnxruntime" and r.to_dict()["plan"]["executor"] == "onnxruntime"
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-4


def test_a_job_of_an_unknown_executor_and_an_llm_flag_on_another_model_are_refused(capsys):
    with pytest.raises(PlanError, match="executor 'tvm'"):
        PipelineJob("m.gguf", ["a"], [[0, 2]], 2, [[1]], 1, executor="tvm")
    from hetsplit.cli.main import main

    with pytest.raises(SystemExit):
        main(["generate", "x.gguf", "--cluster", "local", "--prompt", "a", "--executor", "tvm"])
    assert main(["plan", "resnet18", "--cluster", "local", "--executor", "onnxruntime"]) == 2
    assert "--executor: only for an LLM checkpoint" in capsys.readouterr().err


def test_the_onnxruntime_probe_times_its_own_executor(monkeypatch, tmp_path):
    """Its figures are the executor's: equal weights, which onnxruntime would share between nodes, are not
    what it streams (each tensor its own constant); and a plan made for it says so."""
    from hetsplit.costs.llm_probe import ProbeShape, probe_block_weights
    from hetsplit.runtime import llm_ort_probe

    m = read_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    w = probe_block_weights(m.config, 2)
    assert len({float(a.flat[0]) for a in w.values()}) == len(w)
    monkeypatch.setattr(llm_ort_probe, "STREAM_BYTES", 8 << 20)
    p = llm_ort_probe.probe_ort_cpu.__wrapped__(ProbeShape(m.config, 4, 8), repeat=3)
    assert all(np.isfinite(x) and x >= 0 for x in (p.call_s, p.prompt_call_s))
    assert p.bytes_per_s > 1e8 and p.macs_per_s > 1e7


def test_a_plan_for_onnxruntime_is_costed_by_the_onnxruntime_probe(monkeypatch, tmp_path):
    from hetsplit.costs import llm_probe, local_calibration
    from hetsplit.costs.llm_probe import StepProbe
    from hetsplit.errors import UsageError
    from hetsplit.runtime import llm_ort_probe
    from hetsplit.workflow.generate import PlanOptions, plan_generation

    m = read_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    asked: list[str] = []
    fast, slow = StepProbe(1e-6, 4e10, 8e10, 1e-6), StepProbe(1e-5, 1e9, 1e10, 1e-5)
    monkeypatch.setattr(llm_ort_probe, "probe_ort_cpu", lambda shape: asked.append("onnxruntime") or fast)
    monkeypatch.setattr(llm_probe, "probe_torch_cpu", lambda shape: asked.append("torch") or slow)
    monkeypatch.setattr("hetsplit.workflow.generate.probe_torch_cpu", llm_probe.probe_torch_cpu)
    monkeypatch.setattr("hetsplit.workflow.generate.host_messages", lambda *shape: None)
    monkeypatch.setenv(local_calibration.ENV, "on")          # the suite turns measuring this machine off
    cluster = local_cluster(2)
    on_ort = plan_generation(m, cluster, PlanOptions(8, 8, executor="onnxruntime"))
    on_torch = plan_generation(m, cluster, PlanOptions(8, 8))
    assert asked == ["onnxruntime", "torch"] and on_ort.executor == "onnxruntime" and on_torch.executor == "torch"
    assert on_ort.predicted.s_per_token < on_torch.predicted.s_per_token
    with pytest.raises(UsageError, match="--executor tvm"):
        plan_generation(m, cluster, PlanOptions(8, 8, executor="tvm"))
