"""TinyLlama decoded tensor-parallel for real on this machine, beside hetsplit's prediction.

``run_tensor_parallel(model, workers)`` builds Bochem et al.'s tensor-parallel plan of the model's
graph over ``workers`` devices named ``local-cpu0 ..`` (``search.tensor_parallel``: heads and F
sliced, two tree all-reduces per block, the LM head by vocabulary columns), runs it with one process
per device (``runtime.tensor_parallel``: a prefill pass, then greedy decode steps with a per-rank KV
cache; every step's logits checked against the unsplit model) and puts the measured time per token
beside the prediction:

- predicted: the ``closed`` fidelity's latency (``estimate.estimate_plan``) of the *same* plan on the decode step of
  the model's graph (``graph.transformer.decode_step``: one token against a KV cache of
  ``context`` positions, the cache length at the median measured step). It covers every layer of the
  graph: the embedding with the first norm, the 8 blocks, the final norm and the LM head (whose
  costs per block equal ``transformer_shapes.transformer_graph`` of TinyLlama's dimensions, a test
  of ``test_tensor_parallel``), on a cluster of ``workers`` ``local-cpu`` devices with the ``local``
  built-in's roofline figures and loopback link (``cluster.local.local_cluster``): a device model, as
  a profile measures the prompt pass it was taken on, not a decode step;
- measured: the root's wall time per decode step (median after warm-up), each rank's compute and
  communication (time inside its transfers, waiting for the others included), bytes sent per token:
  checked equal to the decode step's TaskGraph messages per device (``check_plan``);
- the 1-worker run (the same runtime in one process, nothing sent) is the baseline of the speed-up.

``transformer_shapes.transformer_graph`` builds the same blocks from the dimensions alone; the decode
step of the exported graph is used instead because it also holds the embedding, the final norm and
the LM head under the plan's own layer names, so the plan that ran is the plan evaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from hetsplit.errors import HetsplitError
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Plan
from hetsplit.runtime.tensor_parallel import TensorParallelOptions, TensorParallelReport

DEVICE = "local-cpu"


def worker_names(workers: int) -> list[str]:
    return [f"{DEVICE}{i}" for i in range(workers)]


@dataclass
class DecodePrediction:
    """The evaluator on one decode step of the plan (SI units), and its messages per device."""

    context: int
    latency_s: float
    compute_s: dict[str, float]
    sent_bytes: dict[str, float]          # per device: the TaskGraph's messages it sends


def predict_decode(graph: Graph, plan: Plan, context: int) -> DecodePrediction:
    """``plan`` (made on ``graph``) evaluated on the decode step of ``graph`` with a cache of ``context``
    positions, its devices ``local-cpu`` processes of this machine."""
    from hetsplit.cluster.local import local_cluster
    from hetsplit.costs import build_problem
    from hetsplit.estimate import estimate_plan
    from hetsplit.graph.transformer import decode_step
    from hetsplit.plan.check import check_plan

    step = decode_step(graph, context)
    same = replace(plan, model=step.name, metrics=None)
    cluster = local_cluster(plan.devices, name=f"{len(plan.devices)}x{DEVICE}")
    problem = build_problem(step, cluster)
    metrics = estimate_plan(problem, same, "closed")
    sent = {d: 0.0 for d in cluster.names}
    for m in check_plan(step, cluster, same).messages():
        sent[cluster.names[m.src]] += m.nbytes
    return DecodePrediction(context, float(metrics.latency_s), dict(metrics.compute_s_per_device), sent)


@dataclass
class TensorParallelRunResult:
    """One run beside its prediction (times in seconds per generated token)."""

    workers: int
    tree: int
    report: TensorParallelReport
    prediction: DecodePrediction
    baseline_s: float | None = None       # the 1-worker run's time per token
    baseline_predicted_s: float | None = None
    cores: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def measured_s(self) -> float:
        return self.report.s_per_token

    @property
    def predicted_s(self) -> float:
        return self.prediction.latency_s

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
        return {"workers": self.workers, "max_abs_err": self.report.max_abs_err,
                "measured_ms": self.measured_s * 1e3, "predicted_ms": self.predicted_s * 1e3, "ratio": self.ratio,
                "baseline_ms": None if self.baseline_s is None else self.baseline_s * 1e3,
                "speedup": self.speedup, "predicted_speedup": self.predicted_speedup,
                "root_sent_bytes": self.report.ranks[0].sent_bytes}

    def to_dict(self) -> dict[str, Any]:
        return {**self.row(), "tree": self.tree, "cores": self.cores, "context": self.prediction.context,
                "predicted_compute_s": self.prediction.compute_s, "plan_sent_bytes": self.prediction.sent_bytes,
                "baseline_s": self.baseline_s, "notes": list(self.notes), "run": self.report.to_dict()}


def check_bytes(report: TensorParallelReport, prediction: DecodePrediction) -> None:
    """Each rank's bytes per decode token must be its messages in the plan's TaskGraph."""
    bad = [f"{r.device}: sent {r.sent_bytes}, the plan {prediction.sent_bytes.get(r.device, 0):g}"
           for r in report.ranks if r.sent_bytes != prediction.sent_bytes.get(r.device, 0)]
    if bad:
        raise HetsplitError("bytes per token differ from the plan's messages: " + "; ".join(bad))


def zoo_model(model: str) -> tuple[nn.Module, Graph]:
    """The seeded torch module of a zoo Transformer (the weights of its ONNX file) and its Graph."""
    from hetsplit.graph.load import load_model
    from hetsplit.graph.zoo.export import build_module

    module, _, _ = build_module(model)
    return module, load_model(model)


def run_tensor_parallel(model: str = "tinyllama-42m", workers: int = 2, prompt_tokens: int = 16,
                        new_tokens: int = 32, tree: int = 4, warmup: int = 2, atol: float = 1e-3,
                        baseline_s: float | None = None, measure_baseline: bool = True,
                        loaded: tuple[nn.Module, Graph] | None = None, timeout_s: float = 60.0,
                        seed: int = 0) -> TensorParallelRunResult:
    """Run ``model`` tensor-parallel on ``workers`` processes, verified, beside the prediction.

    ``loaded``: the module and graph (default: the zoo's); ``baseline_s``: the 1-worker time per token
    measured elsewhere, else measured now (``measure_baseline``) when ``workers`` > 1."""
    from hetsplit.cluster.examples import usable_cores
    from hetsplit.runtime.tensor_parallel import run_tensor_parallel_model
    from hetsplit.search.tensor_parallel import tensor_parallel_plan

    module, graph = loaded or zoo_model(model)
    plan = tensor_parallel_plan(graph, worker_names(workers), tree)
    context = prompt_tokens + (warmup + new_tokens) // 2 + 1
    opts = TensorParallelOptions(prompt_tokens, new_tokens, warmup, seed, atol, timeout_s)
    report = run_tensor_parallel_model(module.eval(), graph, plan, opts)
    prediction = predict_decode(graph, plan, context)
    check_bytes(report, prediction)
    if workers > 1 and baseline_s is None and measure_baseline:
        baseline_s = run_tensor_parallel(model, 1, prompt_tokens, new_tokens, tree, warmup, atol,
                                         loaded=(module, graph), timeout_s=timeout_s, seed=seed).measured_s
    base_pred = predict_decode(graph, tensor_parallel_plan(graph, worker_names(1), tree), context).latency_s
    cores = usable_cores()
    notes = []
    if workers > cores:
        notes.append(f"{workers} worker processes share {cores} cores; the prediction gives each its own")
    return TensorParallelRunResult(workers, tree, report, prediction, baseline_s if workers > 1 else report.s_per_token,
                                   base_pred, cores, notes)


def format_table(results: list[TensorParallelRunResult]) -> str:
    """The runs as a table, then per rank compute / communication per token."""
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
    lines.append("per rank, per token (median): compute / communication ms, bytes sent (= the plan's messages)")
    for r in results:
        ranks = ", ".join(f"{k.device} {k.compute_s * 1e3:.2f}/{k.comm_s * 1e3:.2f} {k.sent_bytes}B"
                          for k in r.report.ranks)
        lines.append(f"  {r.workers} worker(s): {ranks}")
    notes = sorted({n for r in results for n in r.notes})
    return "\n".join(lines + [f"note: {n}" for n in notes])
