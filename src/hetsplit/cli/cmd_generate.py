"""hetsplit generate MODEL.gguf: plan a pipeline of whole blocks over a cluster, run it as processes here,
stream the greedy text, report TTFT and ms per token measured beside predicted."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetsplit.cli.common import add_command, int_range
from hetsplit.errors import UsageError
from hetsplit.search.llm_rules import RULES

if TYPE_CHECKING:
    from hetsplit.estimate.llm import PipelinePrediction, Stage


def register(sub) -> None:
    p = add_command(sub, "generate", "generate text with a GGUF LLM split into pipeline stages over a cluster "
                                     "(planned, run as processes here, measured beside predicted)",
                    ["hetsplit generate SmolLM2-135M-Instruct.Q4_1.gguf --cluster local --prompt 'The capital of "
                     "France is' --tokens 16",
                     "hetsplit generate model.gguf --cluster home.yaml --prompt 'Hi' --emulate-devices --emulate-links",
                     "hetsplit generate model.gguf --cluster local --stages 2 --tokens 32 --verify --json",
                     "hetsplit generate model.gguf --cluster local --prompt 'Hi' --prompt 'The sky is'  # 2 streams",
                     "hetsplit generate model.gguf --cluster home.yaml --prompt 'Hi' --hosts desktop-gpu=10.0.0.2  # "
                     "prints the worker command to run there"])
    p.add_argument("model", help="a GGUF file of the Llama family, or a Hugging Face Llama folder (config.json, *.safetensors, tokenizer.json)")
    p.add_argument("--cluster", "-c", default="local", help="built-in cluster name or YAML (default: local)")
    p.add_argument("--prompt", "-p", action="append", default=[], help="the prompt text; repeat it for a stream "
                   "per prompt, generated at once (the text shown is the first's; --json: every stream's)")
    p.add_argument("--prompts-file", default=None, metavar="FILE",
                   help="the prompts, one per line (blank lines left out): a stream each, instead of --prompt")
    p.add_argument("--tokens", "-n", type=int_range(1, 4096), default=32, help="tokens to generate (default 32)")
    p.add_argument("--objective", choices=("decode", "ttft"), default="decode",
                   help="what the planner minimizes: decode (time per token; default) or ttft")
    p.add_argument("--stages", type=int_range(0, 64), default=0, metavar="K",
                   help="cut the blocks evenly over the cluster's first K devices instead of planning (0: plan)")
    p.add_argument("--plan", default=None, metavar="FILE",
                   help="run the stages of this hetsplit.generation-plan/1 file (hetsplit plan MODEL.gguf --out DIR "
                        "writes one) instead of planning")
    p.add_argument("--rule", choices=RULES, default=None,
                   help="split by another tool's rule instead of planning, to run it beside hetsplit's plan: "
                        "memory-proportional is exo's default and llama.cpp RPC's (blocks in proportion to memory)")
    p.add_argument("--streams", type=int_range(1, 64), default=0, metavar="B",
                   help="generate B streams at once, each with its own KV caches, in turn on every stage (planned "
                        "for their tokens/s together): B copies of one prompt, or one per prompt given (default: "
                        "as many as prompts); the text shown is stream 0's")
    p.add_argument("--no-tensor-parallel", action="store_true",
                   help="plan pipelines of whole blocks only (by default a stage may be split over several devices, "
                        "each with its share of the heads, FFN columns and head rows)")
    p.add_argument("--no-probe", action="store_true",
                   help="cost local-cpu devices by their device model, not by a torch probe of this machine")
    p.add_argument("--emulate-links", action="store_true",
                   help="shape every link between the stages' processes to the cluster's (network namespaces and "
                        "tc, as `hetsplit run --emulate-links`; needs root)")
    p.add_argument("--emulate-devices", action="store_true",
                   help="run each stage at its device's speed (each process paced to its CPU share: it sleeps "
                        "after its work in proportion to its CPU; all slowed by one dilation D, figures reported / D)")
    p.add_argument("--verify", action="store_true",
                   help="compare every step's logits with the unsplit model's and the greedy tokens for identity")
    p.add_argument("--recover", action="store_true",
                   help="when a device's worker fails, re-plan without it, rebuild the KV cache from the prompt and "
                        "the tokens so far, and go on (default: end naming the device)")
    p.add_argument("--cpu-only", action="store_true",
                   help="run every stage on the CPU (by default a gpu device's stage runs on its host's CUDA GPU)")
    add_executor_option(p)
    p.add_argument("--hosts", default=None, metavar="DEV=HOST,...",
                   help="run these devices on other hosts: generate prints the `hetsplit worker` command for each "
                        "(the first stage's leader stays here, streaming the text)")
    p.add_argument("--port", type=int_range(0, 65535), default=0, help="with --hosts: the rendezvous port (default 0: "
                                                                       "a free one)")
    p.add_argument("--ssh", action="store_true", help="with --hosts: run each host's worker command over ssh")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="longest wait for a peer (default 60 s)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the text is not streamed)")
    p.set_defaults(func=run)


def add_executor_option(p) -> None:
    from hetsplit.graph.llm import EXECUTORS

    p.add_argument("--executor", choices=EXECUTORS, default="torch",
                   help="an LLM: what computes the stages on CPUs, torch or onnxruntime (one thread each; costed "
                        "by a probe of the same executor here); a GPU's stage runs on torch CUDA either way")


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms"


def run(args) -> int:
    from hetsplit.workflow import load_cluster_spec
    from hetsplit.cli.common import progress
    from hetsplit.cli.run_print import hooks
    from hetsplit.workflow.generate import GenerateOptions, generate, read_generation_plan, read_prompts

    cluster = load_cluster_spec(args.cluster)
    if sum(bool(x) for x in (args.plan, args.stages, args.rule)) > 1:
        raise UsageError("--plan, --stages and --rule: give one (a plan to run, an even cut, or another tool's rule)")
    if bool(args.prompt) == bool(args.prompts_file):
        raise UsageError("give the prompt: --prompt TEXT (repeat it for a stream per prompt) or --prompts-file FILE")
    prompts = tuple(args.prompt) if args.prompt else read_prompts(args.prompts_file)
    opts = GenerateOptions(prompts, args.tokens, args.objective, args.stages, not args.no_probe, args.verify,
                           args.emulate_links, args.emulate_devices, args.timeout, recover=args.recover,
                           plan=read_generation_plan(args.plan) if args.plan else None, rule=args.rule,
                           tensor_parallel=not args.no_tensor_parallel, streams=args.streams, cpu_only=args.cpu_only,
                           hosts=args.hosts, port=args.port, ssh=args.ssh, executor=args.executor)

    prompt_shown = [args.json]

    def stream(text: str) -> None:
        if not prompt_shown[0]:
            sys.stdout.write(prompts[0])
            prompt_shown[0] = True
        sys.stdout.write(text)
        sys.stdout.flush()

    if not args.hosts:          # with --hosts, after the worker commands (stderr), as the text begins
        stream("")
    result = generate(args.model, cluster, opts, on_text=None if args.json else stream,
                      announce=hooks(progress).announce)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=1)
        print()
        return 0 if result.verify is None or result.verify["ok"] else 1
    stream("")              # the prompt, had no text come
    print()
    if any(one.prompt != result.streams[0].prompt for one in result.streams):
        for b, one in enumerate(result.streams[1:], 1):
            print(f"\nstream {b} (TTFT {_ms(one.ttft_s / result.measured.dilation)}): {one.prompt}{one.text}")
    if (rec := result.recovery) is not None:
        print(f"\nrecovered: {rec.device} failed after {rec.tokens_before} tokens ({rec.error}); the plan "
              f"({rec.plan.how}) was " + _stages(rec.plan.stages)
              + "; the KV cache rebuilt from the prompt and those tokens, measured below from there")
    plan, m = result.plan, result.measured
    print(f"\nplan ({plan.how}): " + _stages(plan.stages))
    _print_emulation(m)
    d = m.dilation       # device emulation: measured / D is the cluster's time
    head = "measured" if m.device_emulation is None else "measured / D"
    print(f"{'':14}{head:>14}{'predicted':>14}")
    print(f"{'TTFT':14}{_ms(m.ttft_s / d):>14}{_ms(plan.predicted.ttft_s):>14}")
    streams = max(1, len(m.streams_tokens))
    per_token = plan.predicted.stream_s_per_token
    print(f"{'per token':14}{_ms(m.s_per_token / d):>14}{_ms(per_token):>14}")
    print(f"{'tokens/s':14}{d / m.s_per_token:>14.1f}{1 / per_token:>14.1f}")
    if streams > 1:
        print(f"{f'x{streams} tok/s':14}{m.streams_tokens_per_s * d:>14.1f}"
              f"{plan.predicted.streams_tokens_per_s:>14.1f}   (every stream's decode tokens per second, together)")
    for s in m.stages:
        pred = plan.predicted.compute_s[s.device]
        print(f"  {s.device}: compute per token {_ms(s.compute_s / d)} (predicted {_ms(pred[1])}), waiting "
              f"{_ms(s.wait_s / d)}; prefill {_ms(s.prefill_compute_s / d)} (predicted {_ms(pred[0])})")
    for hop, (pre, dec) in m.hops_s.items():
        want = plan.predicted.hops_s[hop]
        print(f"  {hop}: per token {_ms(dec / d)} (predicted {_ms(want[1])}); prefill {_ms(pre / d)} "
              f"(predicted {_ms(want[0])})")
    if plan.single is not None and plan.single_predicted is not None:
        print(f"best single device: {plan.single.stages[0].device}, predicted "
              f"{_ms(plan.single_predicted.s_per_token)} per token, TTFT {_ms(plan.single_predicted.ttft_s)}")
    if result.verify is not None:
        v = result.verify
        print(f"verify: {'ok' if v['ok'] else 'FAILED'}: greedy tokens "
              f"{'identical' if v['identical_tokens'] else 'differ from step ' + str(v['first_differing_step'])}, "
              f"max |logit difference| {v['max_abs_logit_diff']:.3g}")
        return 0 if v["ok"] else 1
    return 0


def _print_emulation(m) -> None:
    """How the run's links and devices were shaped, when they were."""
    if m.emulation is not None:
        print(f"links emulated: {m.emulation.namespaces} network namespaces, delay by {m.emulation.delay}")
    if (dev := m.device_emulation) is not None:
        shares = ", ".join(f"{n} {s:.3g}" for n, s in dev.shares.items())
        how = "paced" if dev.paced else "cgroup CPU quota"
        print(f"devices emulated: CPU share of one core {shares} ({how}); dilation D = {dev.dilation:.3g} "
              f"(figures below are measured / D); host costs: {dev.host}")


PLAN_PROMPT, PLAN_TOKENS = 32, 96        # what ``hetsplit plan MODEL.gguf`` plans for by default


@dataclass(frozen=True)
class LlmPlanRequest:
    """What ``hetsplit plan MODEL.gguf`` plans for: ``streams`` generations at once, each of a prompt of
    ``prompt_tokens`` and ``new_tokens`` new tokens, this machine's CPU stages computed by ``executor``."""

    streams: int = 1
    prompt_tokens: int = PLAN_PROMPT
    new_tokens: int = PLAN_TOKENS
    executor: str = "torch"


def plan_gguf(model: str, cluster_spec: str, objective: str, as_json: bool, out: str | None = None,
              lengths: LlmPlanRequest = LlmPlanRequest()) -> int:
    """``hetsplit plan MODEL.gguf --cluster C``: the planned pipeline and every device alone, predicted;
    ``out``: the folder to write it in (``generation-plan.json``, what ``generate --plan`` reads)."""
    from hetsplit.graph.llm.load import read_model
    from hetsplit.outpath import output_dir, write_text
    from hetsplit.workflow import load_cluster_spec
    from hetsplit.workflow.generate import PlanOptions, cuda_here, plan_generation, references, stage_dict

    folder = output_dir(out)
    cluster = load_cluster_spec(cluster_spec)
    m = read_model(model)
    streams, prompt, new = lengths.streams, lengths.prompt_tokens, lengths.new_tokens
    if streams > 1 and objective != "decode":
        raise UsageError("--streams: plans for the streams' tokens/s; leave out --objective")
    if prompt + new > m.config.context:
        raise UsageError(f"--prompt-tokens {prompt} and --tokens {new}: {prompt + new} positions exceed the "
                         f"model's context of {m.config.context}")
    plan = plan_generation(m, cluster, PlanOptions(prompt, new, objective, streams=streams,
                                                   cuda_devices=cuda_here(cluster), executor=lengths.executor))
    refs = references(plan)
    doc = {"model": m.config.name, "cluster": cluster.name, "prompt_tokens": prompt, "new_tokens": new,
           "objective": "streams" if streams > 1 else objective, "streams": streams, **plan.to_dict(),
           "alone": {r.device: r.predicted.to_dict() for r in refs if r.device is not None and r.predicted},
           "rules": {r.name: None if r.predicted is None else
                     {"stages": [stage_dict(s) for s in r.stages],
                      "predicted": r.predicted.to_dict()} for r in refs if r.device is None}}
    if folder is not None:
        write_text(folder / "generation-plan.json", json.dumps(doc, indent=1) + "\n")
    if as_json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 0
    print(f"{m.config.name}: {m.config.blocks} blocks, {m.stored_bytes() / 2**20:.1f} MiB stored; cluster "
          f"{cluster.name}; {prompt} prompt + {new} new tokens; objective "
          f"{f'{streams} streams' if streams > 1 else objective}; {plan.how}")
    many = f"x{streams} tok/s" if streams > 1 else ""
    best = f"{plan.single.stages[0].device} alone" if plan.single is not None else None
    rows: list[tuple[str, PipelinePrediction | None]] = [("planned: " + _stages(plan.stages), plan.predicted)]
    rows += [(r.name + (" (best single device)" if r.name == best else "") +
              ("" if r.device is not None else f": {_stages(r.stages)}"), r.predicted) for r in refs]
    width = max(48, *(len(name) + 2 for name, _ in rows))
    print(f"{'plan':{width}}{'TTFT':>12}{'per token':>12}{'tokens/s':>10}{many:>14}  fits")
    for name, p in rows:
        if p is None:
            continue
        together = f"{p.streams_tokens_per_s:>14.1f}" if streams > 1 else ""
        print(f"{name:{width}}{_ms(p.ttft_s):>12}{_ms(p.s_per_token):>12}{p.tokens_per_s:>10.1f}{together}  "
              f"{'yes' if p.fits else 'no'}")
    for r in refs:
        if r.predicted is None:
            print(f"{r.name}: not applied ({r.why})")
    print("memory-proportional: exo's default split and llama.cpp RPC's (whole blocks in proportion to each "
          "device's memory, every device used); equal-slices: distributed-llama's (every block tensor-parallel "
          "over every device, equal slices)")
    return 0


def _stages(stages: list[Stage]) -> str:
    """Stages as ``device blocks`` (a tensor-parallel one: its devices joined by +, each one's share)."""
    def one(s: Stage) -> str:
        if not s.shares:
            return f"{s.device} blocks {s.first}-{s.stop - 1}"
        parts = ", ".join(f"{m.device} {m.share.size('kv_heads')} KV heads/{m.share.size('ffn')} FFN columns/"
                          f"{m.share.size('vocab')} head rows" for m in s.shares)
        return f"{'+'.join(s.devices)} blocks {s.first}-{s.stop - 1} tensor-parallel ({parts})"

    return " | ".join(one(s) for s in stages)
