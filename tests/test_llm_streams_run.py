"""Several generations at once through one pipeline (``generate --streams B``, or a ``--prompt`` per
stream), by real processes on the tiny GGUF: each stream with its own KV caches on every stage, its
tokens the unsplit model's on its own prompt."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hetsplit.errors import PlanError, UsageError
from hetsplit.graph.llm.decoder import greedy
from hetsplit.graph.llm.load import model_tokenizer, read_model
from hetsplit.runtime.llm_pipeline import PipelineJob
from hetsplit.workflow.generate import GenerateOptions, generate, verify_steps
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


def unsplit(path, prompts: tuple[str, ...], tokens: int) -> tuple[list[list[int]], list[list[int]]]:
    """Each prompt's token ids and the unsplit model's greedy tokens for it, in this process."""
    model = read_model(path)
    ids = [model_tokenizer(model).encode(p) for p in prompts]
    return ids, [greedy(model, i, tokens)[0] for i in ids]


def test_two_streams_of_their_own_prompts_each_give_the_unsplit_models_tokens_for_theirs(three):
    prompts = ("the cat sat on", "in the")
    ids, want = unsplit(three, prompts, 5)
    assert len(ids[0]) != len(ids[1]) and want[0] != want[1]
    r = generate(three, local_cluster(2), GenerateOptions(prompts, tokens=5, stages=2, verify=True, timeout_s=30))
    assert r.measured.streams_tokens == want and r.tokens == want[0] and r.prompt_tokens == ids[0]
    assert [(s.prompt, s.prompt_tokens, s.tokens) for s in r.streams] == list(zip(prompts, ids, want))
    assert r.verify["ok"] and r.verify["streams"] == 2 and r.verify["max_abs_logit_diff"] <= 1e-5
    assert all(s.ttft_s > 0 for s in r.streams) and r.streams[0].ttft_s == r.measured.ttft_s
    assert r.plan.costs.options.prompt_tokens == max(map(len, ids)) and r.plan.predicted.streams == 2
    swapped = verify_steps(read_model(three), ids[::-1], r.measured)     # each stream checked on its own prompt
    assert not swapped["ok"] and swapped["differing_streams"] == [0, 1]


def test_streams_through_a_tensor_parallel_stage_and_the_command_reports_their_tokens_per_s(three, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat\n\non the mat sat\n")         # a prompt per line, the blank one left out
    out = subprocess.run([sys.executable, "-m", "hetsplit.cli.main", "generate", str(three), "--cluster", "local",
                          "--prompts-file", str(prompts), "--tokens", "4", "--rule", "equal-slices",
                          "--verify", "--json"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["verify"]["ok"] and doc["verify"]["streams"] == 2
    assert doc["measured"]["streams"] == 2 and doc["measured"]["streams_tokens_per_s"] > 0
    _, want = unsplit(three, ("the cat", "on the mat sat"), 4)
    assert doc["measured"]["streams_tokens"] == [s["tokens"] for s in doc["streams"]] == want
    assert [s["prompt"] for s in doc["streams"]] == ["the cat", "on the mat sat"] and doc["tokens"] == want[0]
    assert "shares" in doc["plan"]["stages"][0]


@pytest.mark.parametrize("args, says", [
    (["--prompt", "a", "--prompt", "b", "--streams", "3"], "--streams 3 with 2 prompts"),
    ([], "give the prompt"),
    (["--prompt", "a", "--prompts-file", "p.txt"], "give the prompt"),
    (["--prompts-file", "empty.txt"], "0 prompts"),
    (["--prompts-file", "many.txt"], "65 prompts"),
])
def test_prompts_and_streams_that_do_not_agree_are_refused_before_anything_runs(three, tmp_path, monkeypatch, capsys,
                                                                                args, says):
    from hetsplit.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "many.txt").write_text("hi\n" * 65)
    assert main(["generate", str(three), "--cluster", "local", *args]) == 2
    assert says in capsys.readouterr().err


def test_streams_are_bounded_and_recover_goes_on_with_one(three):
    for prompts in ([], [[1]] * 65, [[1], []]):
        with pytest.raises(PlanError, match="per stream"):
            PipelineJob(str(three), ["a"], [[0, 3]], 3, prompts, 4)
    with pytest.raises(UsageError, match="--recover"):
        generate(three, local_cluster(2), GenerateOptions("the cat", tokens=4, streams=2, recover=True))
    with pytest.raises(UsageError, match="--recover"):
        generate(three, local_cluster(2), GenerateOptions(("the cat", "a dog"), tokens=4, recover=True))
    assert GenerateOptions("a", streams=3).stream_prompts() == ("a",) * 3
    assert GenerateOptions(("a", "b")).stream_prompts() == ("a", "b") == GenerateOptions(("a", "b"), streams=2) \
        .stream_prompts()
    with pytest.raises(UsageError, match="1 to 64 prompts"):
        GenerateOptions(("a",) * 65).stream_prompts()


def test_token_times_are_stage_0s_from_its_first_step_and_between_one_streams_tokens():
    from hetsplit.runtime.llm_pipeline import token_times

    one = [{"started_at": 10.0, "token_at": 10.5}, {"token_at": 10.7}, {"token_at": 11.0}]
    ttfts, steps, together = token_times(one, 1)
    assert ttfts == pytest.approx([0.5]) and steps == pytest.approx([0.2, 0.3]) and together == pytest.approx(2 / 0.5)
    two = [{"started_at": 0.0, "token_at": 1.0}, {"token_at": 1.5}, {"token_at": 2.0}, {"token_at": 2.25},
           {"token_at": 3.0}, {"token_at": 3.5}]          # streams in turn: 0, 1, 0, 1, 0, 1
    ttfts, steps, together = token_times(two, 2)
    assert ttfts == [1.0, 1.5] and steps == [1.0, 1.0]
    assert together == pytest.approx(4 / (3.5 - 1.5))     # from the last stream's first token on
