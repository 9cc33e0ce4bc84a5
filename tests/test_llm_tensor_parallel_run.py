"""Tensor-parallel stages of ``hetsplit generate`` run by real processes (tiny GGUF of 3 blocks): every rank
one worker program, the tokens and logits the unsplit model's, a dead member named."""

from __future__ import annotations

import json

import pytest

from hetsplit.errors import PlanError, RuntimeFailure, UsageError
from hetsplit.estimate.llm import Stage, StageShare
from hetsplit.estimate.llm_shares import grains_of
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.graph.llm.shares import TensorShare
from hetsplit.workflow.generate import GenerateOptions, generate, read_generation_plan
from llm_tiny import write_tiny_gguf
from test_llm_generate import local_cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("tp-run") / "three.gguf", seed=3, blocks=3)


def uneven(model_path, devices: list[str], ffn_units: list[int], vocab_units: list[int]) -> tuple[StageShare, ...]:
    """Shares on the planner's grain: KV-head groups one each while they last, FFN and head rows by units."""
    cfg = read_gguf(model_path).config
    grains = grains_of(cfg)
    at = {"kv_heads": 0, "ffn": 0, "vocab": 0}
    out = []
    for k, device in enumerate(devices):
        sizes = {"kv_heads": 1 if k < cfg.kv_heads else 0, "ffn": ffn_units[k], "vocab": vocab_units[k]}
        ranges = {}
        for part, n in sizes.items():
            edges = grains[part]
            ranges[part] = (edges[at[part]], edges[at[part] + n])
            at[part] += n
        out.append(StageShare(device, TensorShare(ranges["kv_heads"], ranges["ffn"], ranges["vocab"])))
    return tuple(out)


def test_distributed_llamas_equal_slices_run_with_the_unsplit_models_tokens(three):
    r = generate(three, local_cluster(2), GenerateOptions("the cat sat on", tokens=6, rule="equal-slices",
                                                          verify=True, timeout_s=30))
    (stage,) = r.plan.stages
    assert stage.devices == ("cpu0", "cpu1") and stage.shares
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-4
    assert [s.device for s in r.measured.stages] == ["cpu0", "cpu1"]
    assert "cpu0+cpu1 syncs" in r.measured.hops_s and "cpu0+cpu1 syncs" in r.plan.predicted.hops_s
    assert r.measured.hops_s["cpu0+cpu1 syncs"][1] > 0


def test_a_pipeline_into_an_uneven_tensor_parallel_last_stage_gives_the_unsplit_models_tokens(three):
    """cpu0 computes block 0 alone, then cpu1 and cpu2 blocks 1-2 and the head with uneven shares: the hidden
    state goes to both, the token comes back from cpu1 (the leader) after it took cpu2's best logit."""
    last = Stage("cpu1", 1, 3, uneven(three, ["cpu1", "cpu2"], [20, 12], [9, 23]))
    r = generate(three, local_cluster(3), GenerateOptions("the cat sat on", tokens=6, verify=True, timeout_s=30,
                                                          plan=(Stage("cpu0", 0, 1), last)))
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-4
    assert list(r.measured.hops_s) == ["cpu0->cpu1+cpu2", "cpu1->cpu0", "cpu1+cpu2 syncs"]
    assert set(r.measured.hops_s) == set(r.plan.predicted.hops_s)
    assert r.measured.stages[0].sent_bytes == 2 * 64 * 4          # the hidden vector to each member


def test_a_dead_member_of_a_tensor_parallel_stage_ends_the_run_naming_its_device(three):
    stage = Stage("cpu0", 0, 3, uneven(three, ["cpu0", "cpu1"], [16, 16], [16, 16]))
    with pytest.raises(RuntimeFailure, match="cpu1"):
        generate(three, local_cluster(2), GenerateOptions("the cat", tokens=8, plan=(stage,), timeout_s=20,
                                                          faults={"1": {"kind": "die", "after": 2}}))


def test_a_tensor_parallel_plan_file_reads_back_and_a_bad_share_is_refused_before_anything_runs(three, tmp_path):
    stage = Stage("cpu0", 0, 3, uneven(three, ["cpu0", "cpu1"], [10, 22], [30, 2]))
    doc = {"format": "hetsplit.generation-plan/1", "stages": [
        {"device": "cpu0", "blocks": [0, 3],
         "shares": [{"device": m.device, **m.share.to_dict()} for m in stage.shares]}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    assert read_generation_plan(path) == (stage,)
    doc["stages"][0]["shares"][1]["ffn"] = [31, 96]                   # off the grain and not covering
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="ffn"):
        generate(three, local_cluster(2), GenerateOptions("the cat", tokens=2, plan=read_generation_plan(path)))
    doc["stages"][0]["shares"][1]["vocab"] = "all"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="vocab"):
        read_generation_plan(path)
