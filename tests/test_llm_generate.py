"""hetsplit generate on the tiny GGUF: pipeline decode by real processes, verified against the unsplit model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.errors import RuntimeFailure
from hetsplit.workflow.generate import GenerateOptions, generate
from llm_tiny import write_tiny_gguf


def local_cluster(n: int):
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": "three-here", "devices": [
        {"name": "cpu", "count": n, "kind": "cpu", "type": "local-cpu", "memory": "1GiB",
         "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}}],
        "links": {"default": {"name": "loopback", "bandwidth": "1GB/s", "latency": "150us"}}})


def test_three_stages_give_the_unsplit_models_tokens_and_logits(tmp_path):
    streamed: list[str] = []
    three = write_tiny_gguf(tmp_path / "three.gguf", seed=3, blocks=3)
    r = generate(three, local_cluster(3), GenerateOptions("the cat sat on", tokens=6, stages=3, verify=True),
                 on_text=streamed.append)
    assert [s.device for s in r.plan.stages] == ["cpu0", "cpu1", "cpu2"]
    assert [s.blocks for s in r.measured.stages] == [[0, 1], [1, 2], [2, 3]]
    assert r.verify["ok"] and r.verify["identical_tokens"] and r.verify["max_abs_logit_diff"] <= 1e-5
    assert len(r.tokens) == 6 and "".join(streamed) == r.text
    assert r.measured.ttft_s > 0 and len(r.measured.steps_s) == 5
    assert r.measured.stages[0].sent_bytes == 64 * 4                       # one hidden vector per token
    assert list(r.measured.hops_s) == list(r.plan.predicted.hops_s) == ["cpu0->cpu1", "cpu1->cpu2", "cpu2->cpu0"]
    assert all(t > 0 for ts in r.measured.hops_s.values() for t in ts)


def test_a_dead_stage_ends_the_run_naming_its_device_and_its_log(tiny_gguf):
    with pytest.raises(RuntimeFailure, match="cpu1") as err:
        generate(tiny_gguf, local_cluster(2), GenerateOptions("the cat", tokens=8, stages=2, timeout_s=20,
                                                             faults={"1": {"kind": "die", "after": 2}}))
    log = Path(str(err.value).split("(log: ")[1].rstrip(")"))
    assert log.is_file()                                  # a failed run keeps its folder
    shutil.rmtree(log.parent)


def test_the_command_prints_one_json_object(tiny_gguf):
    out = subprocess.run([sys.executable, "-m", "hetsplit.cli.main", "generate", str(tiny_gguf), "--cluster",
                          "local", "--prompt", "the cat", "--tokens", "4", "--verify", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["verify"]["ok"] is True and doc["verify"]["max_abs_logit_diff"] <= 1e-5
    assert len(doc["tokens"]) == 4 and isinstance(doc["text"], str)
    for key in ("measured", "predicted"):
        assert doc[key]["ttft_s"] > 0 and doc[key]["s_per_token"] > 0
    assert doc["plan"]["stages"] and doc["plan"]["best_single"]["device"].startswith("local-cpu")
