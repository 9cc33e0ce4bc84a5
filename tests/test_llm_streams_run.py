"""Several generations at once through one pipeline (``generate --streams B``), by real processes on the
tiny GGUF: each stream with its own KV caches on every stage, its tokens the unsplit model's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hetsplit.errors import PlanError, UsageError
from hetsplit.runtime.llm_pipeline import PipelineJob
from hetsplit.workflow.generate import GenerateOptions, generate
from llm_tiny import write_tiny_gguf
from test_llm_generate import local_cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("streams") / "three.gguf", seed=3, blocks=3)


def test_three_streams_through_two_stages_each_give_the_unsplit_models_tokens(three):
    one = generate(three, local_cluster(2), GenerateOptions("the cat sat on", tokens=6, stages=2, verify=True))
    r = generate(three, local_cluster(2), GenerateOptions("the cat sat on", tokens=6, stages=2, verify=True,
                                                          streams=3, timeout_s=30))
    assert r.measured.streams_tokens == [one.tokens] * 3 and r.tokens == one.tokens
    assert r.verify["ok"] and r.verify["streams"] == 3 and r.verify["max_abs_logit_diff"] <= 1e-5
    assert r.measured.logits is not None and r.measured.logits.shape[0] == 3 * 6
    assert r.measured.streams_tokens_per_s > 0 and len(r.measured.steps_s) == 5
    assert r.plan.predicted.streams == 3 and r.plan.how.startswith("even")


def test_streams_through_a_tensor_parallel_stage_and_the_command_reports_their_tokens_per_s(three):
    out = subprocess.run([sys.executable, "-m", "hetsplit.cli.main", "generate", str(three), "--cluster", "local",
                          "--prompt", "the cat", "--tokens", "4", "--rule", "equal-slices", "--streams", "2",
                          "--verify", "--json"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["verify"]["ok"] and doc["verify"]["streams"] == 2
    assert doc["measured"]["streams"] == 2 and doc["measured"]["streams_tokens_per_s"] > 0
    assert doc["measured"]["streams_tokens"][0] == doc["measured"]["streams_tokens"][1] == doc["tokens"]
    assert "shares" in doc["plan"]["stages"][0]


def test_streams_are_bounded_and_recover_goes_on_with_one(three):
    with pytest.raises(PlanError, match="streams"):
        PipelineJob(str(three), ["a"], [[0, 3]], 3, [1, 2], 4, streams=0)
    with pytest.raises(UsageError, match="--recover"):
        generate(three, local_cluster(2), GenerateOptions("the cat", tokens=4, streams=2, recover=True))


def test_token_times_are_stage_0s_from_its_first_step_and_between_one_streams_tokens():
    from hetsplit.runtime.llm_pipeline import token_times

    one = [{"started_at": 10.0, "token_at": 10.5}, {"token_at": 10.7}, {"token_at": 11.0}]
    ttft, steps, together = token_times(one, 1)
    assert ttft == pytest.approx(0.5) and steps == pytest.approx([0.2, 0.3]) and together == pytest.approx(2 / 0.5)
    two = [{"started_at": 0.0, "token_at": 1.0}, {"token_at": 1.5}, {"token_at": 2.0}, {"token_at": 2.25},
           {"token_at": 3.0}, {"token_at": 3.5}]          # streams in turn: 0, 1, 0, 1, 0, 1
    ttft, steps, together = token_times(two, 2)
    assert ttft == 1.0 and steps == [1.0, 1.0]
    assert together == pytest.approx(4 / (3.5 - 1.5))     # from the last stream's first token on
