"""The zoo's TinyLlama decoded tensor-parallel for real on this machine, beside hetsplit's prediction.

The zoo model is written as a Hugging Face Llama folder (``zoo_checkpoint``:
``graph.zoo.llama_checkpoint``) and run by the one LLM program, as ``hetsplit generate`` runs any
checkpoint (``workflow.generate.generate``): one tensor-parallel stage of every block over ``workers``
``local-cpu`` processes of this machine (``cluster.local.local_cluster``), each an equal share of the
KV-head groups, FFN columns and LM-head rows (distributed-llama's equal slices, ``search.llm_rules``),
the partial sums added up twice per block by a star all-reduce through the stage's leader
(``runtime.llm_pipeline``); one worker is the same program with one rank, nothing sent. The prompt is
``prompt_tokens`` seeded random ids (one prefill pass), then greedy decode steps; every step's logits are
checked against the unsplit decoder (``verify``) and must be within ``atol`` with the same tokens.

- measured: stage 0's median time per generated token, each rank's compute and waits per decode step,
  the bytes it sends per token;
- predicted: the LLM estimator's time per token of the same plan (``estimate.llm.predict_pipeline``,
  this machine's ``local-cpu`` devices costed by the torch probe unless ``probe`` is off, the ``local``
  built-in's loopback link), each rank's compute;
- the 1-worker run of the same invocation is the speed-up's baseline (measured and predicted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsplit.errors import ModelError, RuntimeFailure, UsageError
from hetsplit.workflow.generate import GenerateOptions, GenerateResult

DEVICE = "local-cpu"


def worker_names(workers: int) -> list[str]:
    return [f"{DEVICE}{i}" for i in range(workers)]


def zoo_checkpoint(model: str, folder: str | Path) -> Path:
    """The seeded zoo Transformer ``model`` (a TinyLlama: the weights of its ONNX file) written as a Hugging
    Face Llama folder in ``folder``."""
    from hetsplit.graph.zoo.export import build_module
    from hetsplit.graph.zoo.llama_checkpoint import write_llama_checkpoint
    from hetsplit.graph.zoo.transformer import TinyLlama

    module, _, _ = build_module(model)
    if not isinstance(module, TinyLlama):
        raise ModelError(f"zoo model {model!r} is a {type(module).__name__}, not a TinyLlama decoder")
    return write_llama_checkpoint(module, folder, model)


@dataclass(frozen=True)
class TensorParallelRunOptions:
    """The generation (prompt ids drawn with ``seed``), the check (``atol`` on every step's logits), the
    estimate (``probe``: this machine's devices costed by the torch probe), the run (timeout, faults to
    rehearse: rank -> {kind, after}, where to keep it)."""

    prompt_tokens: int = 16
    new_tokens: int = 32
    atol: float = 1e-3
    seed: int = 0
    probe: bool = True
    timeout_s: float = 60.0
    faults: dict[str, dict] = field(default_factory=dict)
    run_dir: Path | None = None


@dataclass
class TensorParallelRunResult:
    """One run beside its prediction (times in seconds per generated token)."""

    workers: int
    run: GenerateResult
    baseline_s: float | None = None           # the 1-worker run's time per token, measured
    baseline_predicted_s: float | None = None  # and predicted
    cores: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def max_abs_err(self) -> float:
        assert self.run.verify is not None
        return float(self.run.verify["max_abs_logit_diff"])

    @property
    def measured_s(self) -> float:
        return self.run.measured.s_per_token

    @property
    def predicted_s(self) -> float:
        return self.run.plan.predicted.s_per_token

    @property
    def ratio(self) -> float:
        """Measured / predicted time per token."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else math.nan

    @property
    def speedup(self) -> float | None:
        return self.baseline_s / self.measured_s if self.baseline_s else None

    @property
    def predicted_speedup(self) -> float | None:
        return self.baseline_predicted_s / self.predicted_s if self.baseline_predicted_s else None

    def row(self) -> dict[str, Any]:
        return {"workers": self.workers, "max_abs_err": self.max_abs_err,
                "measured_ms": self.measured_s * 1e3, "predicted_ms": self.predicted_s * 1e3, "ratio": self.ratio,
                "baseline_ms": None if self.baseline_s is None else self.baseline_s * 1e3,
                "speedup": self.speedup, "predicted_speedup": self.predicted_speedup,
                "root_sent_bytes": self.run.measured.stages[0].sent_bytes}

    def to_dict(self) -> dict[str, Any]:
        return {**self.row(), "cores": self.cores, "baseline_s": self.baseline_s,
                "baseline_predicted_s": self.baseline_predicted_s, "notes": list(self.notes),
                "run": self.run.to_dict()}


def run_tensor_parallel(checkpoint: str | Path, workers: int,
                        options: TensorParallelRunOptions | None = None) -> TensorParallelRunResult:
    """Decode ``checkpoint`` (a ``zoo_checkpoint`` folder) as one tensor-parallel stage over ``workers``
    processes (one: the whole model on one), verified, beside the prediction; RuntimeFailure when a step's
    logits are off by more than ``atol`` or a token differs from the unsplit model's."""
    import numpy as np

    from hetsplit.cluster.examples import usable_cores
    from hetsplit.cluster.local import local_cluster
    from hetsplit.graph.llm.hf import read_hf
    from hetsplit.graph.zoo.llama_checkpoint import prompt_text
    from hetsplit.workflow.generate import generate

    opts = options or TensorParallelRunOptions()
    if workers < 1:
        raise UsageError(f"{workers} workers: run at least one")
    vocab = read_hf(checkpoint).config.vocab
    prompt = [int(t) for t in np.random.default_rng(opts.seed).integers(0, vocab, opts.prompt_tokens)]
    cluster = local_cluster(worker_names(workers), name=f"{workers}x{DEVICE}")
    run = generate(checkpoint, cluster, GenerateOptions(
        prompt_text(prompt), opts.new_tokens, stages=1 if workers == 1 else 0,
        rule="equal-slices" if workers > 1 else None, probe=opts.probe, verify=True, timeout_s=opts.timeout_s,
        faults=dict(opts.faults), run_dir=opts.run_dir))
    verify = run.verify or {}
    if run.prompt_tokens != prompt:
        raise RuntimeFailure(f"{checkpoint}: the prompt's words encode to {run.prompt_tokens[:8]}..., not its ids")
    if not verify.get("identical_tokens") or not verify.get("max_abs_logit_diff", math.inf) <= opts.atol:
        raise RuntimeFailure(f"{workers} workers: logits off by {verify.get('max_abs_logit_diff')} (atol "
                             f"{opts.atol}), first differing token at step {verify.get('first_differing_step')}")
    cores = usable_cores()
    notes = [f"{workers} worker processes share {cores} cores; the prediction gives each its own"] \
        if workers > cores else []
    result = TensorParallelRunResult(workers, run, cores=cores, notes=notes)
    if workers == 1:
        result.baseline_s, result.baseline_predicted_s = result.measured_s, result.predicted_s
    return result


def set_baseline(results: list[TensorParallelRunResult], baseline: TensorParallelRunResult) -> None:
    """Give every run the 1-worker ``baseline``'s measured and predicted time per token."""
    for r in results:
        r.baseline_s, r.baseline_predicted_s = baseline.measured_s, baseline.predicted_s


def format_table(results: list[TensorParallelRunResult]) -> str:
    """The runs as a table, then per rank compute (measured / predicted) and waits per token."""
    def num(x: float | None, spec: str) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    head = (f"{'workers':>7} {'max abs err':>11} {'measured ms/tok':>15} {'predicted ms/tok':>16} {'meas/pred':>9} "
            f"{'1-worker ms/tok':>15} {'speed-up':>8} {'pred. speed-up':>14} {'root B/tok':>10}")
    lines = [head, "-" * len(head)]
    for r in results:
        w = r.row()
        lines.append(f"{w['workers']:>7} {w['max_abs_err']:>11.2e} {w['measured_ms']:>15.2f} {w['predicted_ms']:>16.2f} "
                     f"{num(w['ratio'], '.2f'):>9} {num(w['baseline_ms'], '.2f'):>15} {num(w['speedup'], '.2f'):>8} "
                     f"{num(w['predicted_speedup'], '.2f'):>14} {w['root_sent_bytes']:>10}")
    lines.append("")
    lines.append("per rank, per decode token (median): compute ms measured (its thread's CPU) / predicted, "
                 "waits ms, bytes sent")
    for r in results:
        predicted = r.run.plan.predicted.compute_s
        ranks = ", ".join(f"{s.device} {s.compute_s * 1e3:.2f} ({s.cpu_s * 1e3:.2f}) / {predicted[s.device][1] * 1e3:.2f}"
                          f" {s.wait_s * 1e3:.2f} {s.sent_bytes}B" for s in r.run.measured.stages)
        lines.append(f"  {r.workers} worker(s): {ranks}")
    notes = sorted({n for r in results for n in r.notes})
    return "\n".join(lines + [f"note: {n}" for n in notes])
