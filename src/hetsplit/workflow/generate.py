"""``generate``: a GGUF LLM's greedy generation planned over a cluster, run as a pipeline of real
processes on this machine, measured beside what the estimate predicted, optionally verified step by
step against the unsplit model (``hetsplit generate``; ``plan_generation`` is ``hetsplit plan
MODEL.gguf``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from hetsplit.cluster.examples import usable_cores
from hetsplit.cluster.types import Cluster, Device
from hetsplit.costs.local_calibration import calibration_off
from hetsplit.costs.llm_probe import ProbeShape, StepProbe, probe_device, probe_torch_cpu, probe_torch_cuda
from hetsplit.errors import HetsplitError, PlanError, RuntimeFailure, UsageError
from hetsplit.estimate.llm import (DECODE, PREFILL, LlmCostOptions, LlmCosts, PipelinePrediction, Stage, StageShare,
                                   llm_costs, predict_pipeline)
from hetsplit.estimate.llm_shares import SYNC_PARAM
from hetsplit.graph.llm import EXECUTORS
from hetsplit.graph.llm.config import LlmConfig
from hetsplit.graph.llm.decoder import Decoder, StageSpec
from hetsplit.graph.llm.load import LlmModel, model_tokenizer, read_model
from hetsplit.graph.llm.shares import PARTS, TensorShare
from hetsplit.graph.llm.step_graph import FLOAT32, STORED
from hetsplit.runtime.llm_message_probe import LlmMessageProbe, probe_llm_messages
from hetsplit.runtime.llm_pipeline import (MAX_STREAMS, PipelineJob, PipelineOptions, PipelineReport,
                                           run_pipeline_decode)
from hetsplit.search.llm_pipeline import MAX_DEVICES, MAX_TP_DEVICES, PipelineChoice, best_single, plan_pipeline, plan_streams
from hetsplit.search.llm_rules import rule_stages
from hetsplit.torch_threads import as_a_rank
from hetsplit.workflow.run import check_hosts, no_cuda_note, worker_announcer

if TYPE_CHECKING:
    from hetsplit.runtime.device_emulation import DeviceEmulation
    from hetsplit.runtime.hosts import HostMap, WorkerCommand

LOCAL_TYPES = ("local-cpu",)
PLAN_FORMAT = "hetsplit.generation-plan/1"
MAX_STAGES = 64


def read_generation_plan(path: str | Path) -> tuple[Stage, ...]:
    """The stages of a ``hetsplit.generation-plan/1`` file (``hetsplit plan MODEL.gguf --out DIR``, or the
    ``plan`` of ``generate --json``), each field checked; ``plan_generation`` checks them against the
    cluster and the model."""
    from hetsplit.jsonfile import read_json

    doc = read_json(path, UsageError, "--plan")
    where = f"--plan {path}"
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise UsageError(f"{where}: not a {PLAN_FORMAT} file (write one with hetsplit plan MODEL.gguf --out DIR)")
    raw = doc.get("stages")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_STAGES:
        raise UsageError(f"{where}: 'stages' must be a list of 1 to {MAX_STAGES} stages")
    stages = []
    for i, st in enumerate(raw):
        blocks = st.get("blocks") if isinstance(st, dict) else None
        if not (isinstance(st, dict) and isinstance(st.get("device"), str) and isinstance(blocks, list)
                and len(blocks) == 2 and all(type(b) is int for b in blocks)):
            raise UsageError(f"{where}: stage {i} must be {{\"device\": NAME, \"blocks\": [FIRST, STOP]}}")
        stages.append(Stage(st["device"], blocks[0], blocks[1], _read_shares(st.get("shares"), f"{where}: stage {i}")))
    return tuple(stages)


def read_prompts(path: str | Path) -> tuple[str, ...]:
    """The prompts of a text file (``generate --prompts-file``): one per line, blank lines left out, 1 to
    ``MAX_STREAMS`` of them."""
    from hetsplit.jsonfile import read_text

    prompts = tuple(line for line in read_text(path, UsageError, "no such prompts file").splitlines() if line.strip())
    if not 1 <= len(prompts) <= MAX_STREAMS:
        raise UsageError(f"--prompts-file {path}: {len(prompts)} prompts; give 1 to {MAX_STREAMS}, one per line")
    return prompts


def _read_shares(raw: Any, where: str) -> tuple[StageShare, ...]:
    """A stage's ``shares`` (absent: whole blocks on its device): ``[{device, kv_heads, ffn, vocab}, ...]``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not 2 <= len(raw) <= MAX_STAGES:
        raise UsageError(f"{where}: 'shares' must be a list of 2 to {MAX_STAGES} shares")
    out = []
    for k, doc in enumerate(raw):
        if not isinstance(doc, dict) or not isinstance(doc.get("device"), str):
            raise UsageError(f"{where}: share {k} must be {{\"device\": NAME, \"kv_heads\": [A, B], \"ffn\": [A, B], "
                             "\"vocab\": [A, B]}")
        try:
            share = TensorShare.from_dict({p: doc.get(p) for p in PARTS}, f"{where}: share {k}")
        except PlanError as exc:
            raise UsageError(str(exc)) from None
        out.append(StageShare(doc["device"], share))
    return tuple(out)


@dataclass(frozen=True)
class PlanOptions:
    """What to plan for: the prompt's and the generation's lengths, the objective (``decode``: time per
    token; ``ttft``), ``stages``: k > 0 cuts the blocks evenly over the cluster's first k devices instead
    of planning; ``probe``: cost this machine's ``local-cpu`` devices by a torch probe (what the run here
    computes with, weights as float32) rather than their device model.

    Streams of several prompts are costed at the longest (``generate`` gives it as ``prompt_tokens``):
    the runtime sizes every stream's KV caches at it, so the memory is what it holds; each stream's
    prefill runs alone in its turn, so the predicted TTFT, the longest prompt's, bounds every stream's
    own prefill (not its wait behind the streams before it); the decode steps' mean context is the
    longest stream's, a bound on the others'."""

    prompt_tokens: int
    new_tokens: int
    objective: str = "decode"
    stages: int = 0
    probe: bool = True
    devices: tuple[str, ...] | None = None      # the devices the plan may use (default: all of the cluster's)
    given: tuple[Stage, ...] | None = None      # a plan to run as it is (``read_generation_plan``)
    rule: str | None = None   # split by another tool's rule instead of planning (``search.llm_rules``)
    streams: int = 1          # generations decoding at once: > 1 plans for their tokens/s together
    tensor_parallel: bool = True   # the planner may give a stage to several devices, each its share
    leaders: tuple[str, ...] | None = None   # the devices that may lead the first stage (default: any)
    cuda_devices: tuple[str, ...] = ()       # gpu devices whose stages run on this host's CUDA (``cuda_here``):
                                             # with ``probe``, costed by a CUDA probe of this host
    executor: str = "torch"   # what computes the CPU stages (``graph.llm.EXECUTORS``): what the probe times


@dataclass
class GenerationPlan:
    """The plan, its prediction, the best device alone (None: none holds the model) and the costs."""

    stages: list[Stage]
    predicted: PipelinePrediction
    single: PipelineChoice | None
    single_predicted: PipelinePrediction | None
    costs: LlmCosts
    how: str
    executor: str = "torch"        # what the CPU stages compute with, as the probe costed them

    def to_dict(self) -> dict[str, Any]:
        """``hetsplit.generation-plan/1``: what ``generate --plan`` reads back (its stages), with the figures."""
        return {"format": PLAN_FORMAT, "stages": [stage_dict(s) for s in self.stages],
                "how": self.how, "executor": self.executor, "predicted": self.predicted.to_dict(),
                "best_single": None if self.single is None or self.single_predicted is None else
                {"device": self.single.stages[0].device, "predicted": self.single_predicted.to_dict()}}


def stage_dict(stage: Stage) -> dict[str, Any]:
    """A stage as a generation plan writes it (``shares`` only for a tensor-parallel one)."""
    doc: dict[str, Any] = {"device": stage.device, "blocks": [stage.first, stage.stop]}
    if stage.shares:
        doc["shares"] = [{"device": m.device, **m.share.to_dict()} for m in stage.shares]
    return doc


def pipeline_job(model_path: str | Path, stages: list[Stage], blocks: int, prompts: list[list[int]],
                 new_tokens: int, keep_logits: bool, executor: str = "torch") -> PipelineJob:
    """The runtime's job for ``stages`` and a stream per prompt: one rank per device, the ranks of a stage
    next to each other, its leader first; its CPU stages computed by ``executor``."""
    ranks: list[tuple[int, str, dict | None]] = []
    for k, s in enumerate(stages):
        ranks += [(k, m.device, m.share.to_dict()) for m in s.shares] if s.shares else [(k, s.device, None)]
    return PipelineJob(str(model_path), [d for _, d, _ in ranks],
                       [[stages[k].first, stages[k].stop] for k, _, _ in ranks], blocks, prompts, new_tokens,
                       keep_logits=keep_logits, stage_of=[k for k, _, _ in ranks], shares=[sh for _, _, sh in ranks],
                       executor=executor)


def host_probe(config: LlmConfig, prompt_tokens: int, new_tokens: int, cuda: bool = False,
               executor: str = "torch") -> StepProbe:
    """This machine's one-thread worker with ``executor`` (``cuda``: its CUDA GPU, in torch) probed at the
    generation's shapes: the model's blocks, the prompt's rows, the decode's mean context
    (``costs.llm_probe``, ``runtime.llm_ort_probe``; measured once per shape and process)."""
    _, decode = LlmCostOptions(prompt_tokens, new_tokens).phases()
    shape = ProbeShape(config, prompt_tokens, decode.context)
    if cuda:
        return probe_torch_cuda(shape)
    if executor == "onnxruntime":
        from hetsplit.runtime.llm_ort_probe import probe_ort_cpu

        return probe_ort_cpu(shape)
    return probe_torch_cpu(shape)


def cuda_here(cluster: Cluster, hosts: HostMap | None = None, cpu_only: bool = False) -> tuple[str, ...]:
    """The cluster's devices whose stages compute on this host's CUDA GPU (``executor.choose_backend``'s
    rule, as the worker's ``stage_device``), leaving out those that run on other hosts."""
    from hetsplit.runtime.executor import ORT_CPU, Host, choose_backend

    if cpu_only or not torch.cuda.is_available():
        return ()
    away = set(hosts.by_device) if hosts is not None else set()
    return tuple(d.name for d in cluster.devices
                 if d.name not in away and choose_backend(d.kind, Host(True), cpu_only) != ORT_CPU)


def host_messages(config: LlmConfig, prompt_tokens: int, new_tokens: int) -> LlmMessageProbe | None:
    """What a message of the LLM worker program costs here: a hidden vector's and the prompt's
    (``runtime.llm_message_probe``; measured once per shape and process); None where measuring this
    machine is turned off (``$HETSPLIT_LOCAL_CALIBRATION=off``, as for the mapping runtime's calibration):
    the links' own figures then."""
    _, decode = LlmCostOptions(prompt_tokens, new_tokens).phases()
    return None if calibration_off() else probe_llm_messages(config, prompt_tokens, decode.context)


def probed_device(device: Device, probe: StepProbe, messages: LlmMessageProbe | None) -> Device:
    """``device`` as this machine's one-thread worker: its executor's probe's roofline figures and, with
    ``messages``, what it loses per tensor-parallel sync beyond the sync's message ends (``sync_s``)."""
    out = probe_device(device, probe)
    if messages is None:
        return out
    return replace(out, params={**out.params, SYNC_PARAM: messages.sync_s})


def costed_cluster(cluster: Cluster, probe: StepProbe | None, messages: LlmMessageProbe | None = None,
                   cuda: StepProbe | None = None, cuda_devices: tuple[str, ...] = ()) -> tuple[Cluster, str]:
    """The cluster with this machine's ``local-cpu`` devices costed by the probe of the run's executor (when
    given), its ``cuda_devices`` by the ``cuda`` probe (when given), and the weight bytes the costs count:
    float32 where a probe stands for the runtime's executor (either holds its weights as float32).
    With ``messages`` (the LLM program's message probe), every message end between two ``local-cpu``
    devices costs what the probe measured (in place of the link's ``message`` figures, the mapping
    runtime's), and each such device's tensor-parallel syncs what the probe measured them to lose
    (``sync_s``); the links' latency and bandwidth stay on top."""
    gpus = set(cuda_devices) if cuda is not None else set()
    local_probed = probe is not None and any(d.type in LOCAL_TYPES for d in cluster.devices)
    if not local_probed and not gpus & set(cluster.names):
        return cluster, STORED
    devices = [probed_device(d, probe, messages) if probe is not None and d.type in LOCAL_TYPES else
               probe_device(d, cuda) if cuda is not None and d.name in gpus else d for d in cluster.devices]
    if messages is None or probe is None:
        return replace(cluster, devices=devices), FLOAT32
    local = np.array([d.type in LOCAL_TYPES for d in cluster.devices])
    both = local[:, None] & local[None, :] & ~np.eye(len(local), dtype=bool)
    cpu, cpu_byte = cluster.message_cpu_s, cluster.message_cpu_byte_s
    assert cpu is not None and cpu_byte is not None          # filled in by Cluster.__post_init__
    return replace(cluster, devices=devices, message_cpu_s=np.where(both, messages.end_s, cpu),
                   message_cpu_byte_s=np.where(both, messages.end_byte_s, cpu_byte)), FLOAT32


def even_stages(names: list[str], blocks: int, k: int) -> list[Stage]:
    if not 1 <= k <= min(len(names), blocks):
        raise UsageError(f"--stages {k}: the cluster has {len(names)} devices and the model {blocks} blocks")
    cuts = [round(blocks * i / k) for i in range(k + 1)]
    return [Stage(names[i], cuts[i], cuts[i + 1]) for i in range(k)]


def plan_generation(model: LlmModel, cluster: Cluster, options: PlanOptions) -> GenerationPlan:
    """Cost both phases and plan (or cut evenly) a pipeline of whole blocks; predicted figures beside it."""
    measuring = options.probe and not calibration_off()    # as the mapping runtime's calibration
    here = measuring and any(d.type in LOCAL_TYPES for d in cluster.devices)
    if options.executor not in EXECUTORS:
        raise UsageError(f"--executor {options.executor}: one of {', '.join(EXECUTORS)}")
    probe = host_probe(model.config, options.prompt_tokens, options.new_tokens, executor=options.executor) \
        if here else None
    messages = host_messages(model.config, options.prompt_tokens, options.new_tokens) if here else None
    cuda = (host_probe(model.config, options.prompt_tokens, options.new_tokens, cuda=True)
            if measuring and options.cuda_devices else None)
    costed, weight_bytes = costed_cluster(cluster, probe, messages, cuda, options.cuda_devices)
    costs = llm_costs(model.config, model.tensors, costed,
                      LlmCostOptions(options.prompt_tokens, options.new_tokens, weight_bytes, options.streams))
    allowed, narrowed = (list(options.devices), "") if options.devices is not None else alike_devices(cluster)
    unknown = sorted(set(allowed) - set(costs.devices))
    if unknown or not allowed:
        raise UsageError(f"devices {unknown or allowed}: give devices of cluster {cluster.name!r} "
                         f"({', '.join(costs.devices)})")
    tp = options.tensor_parallel and len(allowed) <= MAX_TP_DEVICES
    if options.given is not None:
        stages, how = list(options.given), "given"
    elif options.rule is not None:
        stages, how = rule_stages(costs, options.rule, allowed), f"{options.rule} (another tool's rule, not planned)"
    elif options.stages:
        stages, how = even_stages(allowed, model.config.blocks, options.stages), f"even over {options.stages}"
    elif options.streams > 1:
        stages = plan_streams(costs, allowed, tensor_parallel=tp, leaders=options.leaders).stages
        how = f"exact ({options.streams} streams: a DP per cap on the busiest stage or hop, binary search" + \
            ("; tensor-parallel stages searched)" if tp else ")")
    else:
        stages = plan_pipeline(costs, options.objective, allowed, tensor_parallel=tp, leaders=options.leaders).stages
        how = f"exact DP ({options.objective}" + ("; tensor-parallel stages searched)" if tp else ")")
    single = best_single(costs, options.objective, allowed)
    predicted = predict_pipeline(costs, stages)       # checks the stages: devices of the cluster, every block once
    if options.given is not None and not predicted.fits:
        over = [f"{d} needs {b / 2**20:.1f} MiB" for d, b in predicted.memory_bytes.items()]
        raise UsageError(f"the given plan does not fit its devices' memory ({', '.join(over)}, KV cache at "
                         f"{costs.options.context} positions included)")
    return GenerationPlan(stages, predicted, single, None if single is None else predict_pipeline(costs, single.stages),
                          costs, how + narrowed, options.executor)


def alike_devices(cluster: Cluster) -> tuple[list[str], str]:
    """The devices to plan over when none are named: all of them, or, in a cluster of more identical
    devices than the exact planner takes (the built-in ``local`` on a machine of many cores), the first
    ``MAX_DEVICES``: any plan over identical devices has its like over those, unless it has more stages;
    with what was left out, said."""
    names = cluster.names
    if len(names) <= MAX_DEVICES:
        return names, ""
    first = cluster.devices[0]
    same = all(d.cost_signature() == first.cost_signature() and d.type == first.type and
               d.memory_bytes == first.memory_bytes for d in cluster.devices)
    off = ~np.eye(len(names), dtype=bool)
    links = all(len(np.unique(m[off])) == 1 for m in (cluster.bandwidth, cluster.latency_s, cluster.message_cpu_s,
                                                      cluster.message_cpu_byte_s) if m is not None)
    if not (same and links):
        return names, ""        # the planner refuses it by name: the user says which devices are meant
    return names[:MAX_DEVICES], f"; over the first {MAX_DEVICES} of {len(names)} identical devices"


@dataclass(frozen=True)
class Reference:
    """A plan to set beside the planned one: each device alone, or another tool's rule; its stages and
    prediction (None, with ``why``, where the rule cannot be applied to this cluster)."""

    name: str
    stages: list[Stage]
    predicted: PipelinePrediction | None
    why: str = ""
    device: str | None = None     # the device, for a device alone (None: a rule)


def references(plan: GenerationPlan) -> list[Reference]:
    """Every device of the plan's cluster alone, then each rule of ``search.llm_rules``, predicted by the
    same estimate as the plan."""
    from hetsplit.search.llm_rules import RULES

    costs, blocks = plan.costs, plan.costs.config.blocks
    out = [Reference(f"{n} alone", [Stage(n, 0, blocks)], predict_pipeline(costs, [Stage(n, 0, blocks)]), device=n)
           for n in costs.devices]
    for rule in RULES:
        try:
            stages = rule_stages(costs, rule)
        except UsageError as exc:
            out.append(Reference(rule, [], None, str(exc)))
            continue
        out.append(Reference(rule, stages, predict_pipeline(costs, stages)))
    return out


def host_costs(model: LlmModel, costs: LlmCosts, executor: str = "torch") -> LlmCosts:
    """``costs``' generation with every device of its cluster made this machine's one-thread worker with
    ``executor`` (the probe; weights float32, as the worker holds them): what each stage costs the process
    running it."""
    probe = host_probe(model.config, costs.options.prompt_tokens, costs.options.new_tokens, executor=executor)
    messages = host_messages(model.config, costs.options.prompt_tokens, costs.options.new_tokens)
    here = replace(costs.cluster, devices=[probed_device(d, probe, messages) for d in costs.cluster.devices])
    return llm_costs(model.config, model.tensors, here, replace(costs.options, weight_bytes=FLOAT32))


@dataclass(frozen=True)
class StageEmulation:
    """The CPU shares of each stage's process for the prompt's step and for the decode steps, at one
    dilation (``prefill.dilation == decode.dilation``; ``runtime.pacing`` applies them)."""

    prefill: "DeviceEmulation"
    decode: "DeviceEmulation"


def stage_emulation(model: LlmModel, plan: GenerationPlan, cores: int | None = None) -> StageEmulation:
    """The CPU shares and dilation that run each stage here at its device's speed (``--emulate-devices``;
    ``runtime.device_emulation``): per stage and phase, its step on the plan's device against the same
    step on this machine's worker; one dilation D, the larger the two phases need. A stage's process runs
    its prompt at the prefill share and then moves to its decode share: a device's prefill-to-decode
    ratio is not the host's (a small-row product streams float32 weights here, is compute-bound on a
    device that holds them quantized)."""
    from hetsplit.runtime.device_emulation import DeviceEmulation, emulation_of

    host = host_costs(model, plan.costs, plan.executor)
    how = f"this machine's one-thread {plan.executor} worker (hetsplit.costs.llm_probe), {{}} steps"
    phases = []
    times: dict[int, dict[str, tuple[float, float]]] = {}     # phase -> device -> (on the device, on the host)
    for phase, name in ((PREFILL, "prefill"), (DECODE, "decode")):
        times[phase] = {}
        for s in plan.stages:
            on_device, on_host = plan.costs.member_s(phase, s), host.member_s(phase, s)
            times[phase].update({d: (on_device[d], on_host[d]) for d in s.devices})
        phases.append(emulation_of(times[phase], cores or usable_cores(), how.format(name)))
    dilation = max(e.dilation for e in phases)
    prefill, decode = (DeviceEmulation({d: s * e.dilation / dilation for d, s in e.shares.items()}, dilation, e.host)
                       for e in phases)
    return StageEmulation(prefill, decode)


def crowded_notes(stages: list[Stage], cores: int) -> list[str]:
    """What ``--emulate-devices`` cannot rehearse on a machine of ``cores`` cores: a tensor-parallel stage of
    more members than that. Its members compute at once, between two syncs, so some wait for a core while
    the others compute; pacing spreads a process's work over time, not the members' work over cores, so
    the stage runs slower than its devices would (SmolLM2 in equal slices over paced members on 2 cores:
    1.25-1.61x its predicted time per token with 3 or 4 members, once 2.99x; 0.96-1.19x with 2)."""
    return [f"--emulate-devices: the tensor-parallel stage {'+'.join(s.devices)} has {len(s.devices)} members, "
            f"this machine {cores} cores: its members compute at once and wait for a core, so its measured "
            "figures are slower than its devices' would be" for s in stages if len(s.devices) > cores]


def check_emulation(links: bool) -> None:
    """UsageError with the reason when the link emulation asked for cannot be set up here (as ``hetsplit
    run``); device emulation needs nothing (``runtime.pacing``)."""
    if links:
        from hetsplit.runtime.netem import emulation_available

        if why := emulation_available():
            raise UsageError(f"--emulate-links: {why}")


@dataclass(frozen=True)
class GenerateOptions:
    """``hetsplit generate``: the prompt (or one per stream: ``stream_prompts``), how many tokens, the plan's
    options, ``verify`` each step's logits against the unsplit model; ``emulate_links``: shape every link
    between the stages' processes to the cluster's (``runtime.netem``, as ``hetsplit run
    --emulate-links``); ``emulate_devices``: run each stage at its device's speed (``stage_emulation``'s
    shares, paced by each stage: ``runtime.pacing``)."""

    prompt: str | tuple[str, ...]      # one prompt, or one per stream
    tokens: int = 32
    objective: str = "decode"
    stages: int = 0
    probe: bool = True
    verify: bool = False
    emulate_links: bool = False
    emulate_devices: bool = False
    timeout_s: float = 60.0
    faults: dict[str, dict] = field(default_factory=dict)
    run_dir: Path | None = None
    recover: bool = False      # a device that fails: re-plan without it, rebuild the KV cache, go on
    plan: tuple[Stage, ...] | None = None      # run these stages (``read_generation_plan``) instead of planning
    rule: str | None = None    # split by another tool's rule (``search.llm_rules.RULES``) instead of planning
    tensor_parallel: bool = True   # the planner may give a stage to several devices (``PlanOptions``)
    streams: int = 0           # generations at once, each with its KV caches, in turn on every stage (0: one per prompt)
    cpu_only: bool = False     # every stage on the CPU (by default a gpu device's stage runs on its host's CUDA)
    hosts: str | None = None   # DEV=HOST,...: these devices' workers join from other hosts (``hetsplit worker``)
    port: int = 0              # with ``hosts``: the rendezvous port (0: a free one)
    ssh: bool = False          # with ``hosts``: start each host's worker command over ssh
    executor: str = "torch"    # what computes the CPU stages (``graph.llm.EXECUTORS``)

    def check_hosts(self) -> "HostMap | None":
        """The devices on other hosts (None: all here); UsageError for what does not combine with them
        (``workflow.run.check_hosts``)."""
        return check_hosts(self.hosts, self.ssh, self.emulate_links, self.emulate_devices)

    def stream_prompts(self) -> tuple[str, ...]:
        """Each stream's prompt: the prompts given, one per stream (``streams`` 0, or their number), or
        ``streams`` copies of one; UsageError for another count, or none, or over ``MAX_STREAMS``."""
        prompts = (self.prompt,) if isinstance(self.prompt, str) else tuple(self.prompt)
        if not 1 <= len(prompts) <= MAX_STREAMS or not all(isinstance(p, str) for p in prompts):
            raise UsageError(f"--prompt: give 1 to {MAX_STREAMS} prompts (one per stream), got {len(prompts)}")
        if not 0 <= self.streams <= MAX_STREAMS:
            raise UsageError(f"--streams {self.streams}: 1 to {MAX_STREAMS} generations at once")
        if self.streams == 0 or self.streams == len(prompts):
            return prompts
        if len(prompts) == 1:
            return prompts * self.streams
        raise UsageError(f"--streams {self.streams} with {len(prompts)} prompts: give one prompt per stream, or "
                         "one prompt for every stream (or leave out --streams: a stream per prompt)")


@dataclass
class Recovery:
    """A run that lost a device and went on: which device, why, how many tokens it had generated, the plan
    it ran (``plan``, the result's being the one it went on with)."""

    device: str
    error: str
    tokens_before: int
    plan: GenerationPlan

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "error": self.error, "tokens_before": self.tokens_before,
                "plan": self.plan.to_dict()}


@dataclass
class StreamResult:
    """One stream: its prompt (text and token ids), the text and tokens it generated, its measured TTFT
    (wall time from the run's first step: the streams' prefills run in turn)."""

    prompt: str
    prompt_tokens: list[int]
    text: str
    tokens: list[int]
    ttft_s: float


@dataclass
class GenerateResult:
    """Stream 0's text and tokens, the plan that produced the last of them and what it measured (after a
    recovery: the run that went on, its TTFT the rebuild of the KV cache), the verification; every
    stream's in ``streams``."""

    text: str
    prompt_tokens: list[int]
    tokens: list[int]
    plan: GenerationPlan
    measured: PipelineReport
    verify: dict[str, Any] | None
    recovery: Recovery | None = None
    notes: list[str] = field(default_factory=list)    # what the user should know of how it ran
    streams: list[StreamResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``measured`` is wall time; under device emulation ``emulated`` is it divided by the dilation, in
        the cluster's time (what compares with ``predicted``), and ``emulation`` says how links and devices
        were shaped. ``text``, ``prompt_tokens`` and ``tokens`` are stream 0's; ``streams`` every stream's
        (its ``ttft_s`` measured)."""
        m = self.measured
        return {"text": self.text, "prompt_tokens": self.prompt_tokens, "tokens": self.tokens,
                "streams": [vars(s) for s in self.streams], "verify": self.verify,
                "measured": {"ttft_s": m.ttft_s, "s_per_token": m.s_per_token, "tokens_per_s": 1 / m.s_per_token,
                             "streams": len(m.streams_tokens) or 1, "streams_tokens_per_s": m.streams_tokens_per_s,
                             "streams_tokens": m.streams_tokens,
                             "stages": [vars(s) for s in m.stages], "hops_s": m.hops_s},
                "emulated": m.emulated() if m.device_emulation is not None else None,
                "emulation": {"links": m.emulation.to_dict() if m.emulation is not None else None,
                              "devices": m.device_emulation.to_dict() if m.device_emulation is not None else None,
                              "prefill_devices": (m.prefill_emulation.to_dict() if m.prefill_emulation is not None
                                                  else None)},
                "predicted": self.plan.predicted.to_dict(), "plan": self.plan.to_dict(),
                "recovered": self.recovery.to_dict() if self.recovery is not None else None, "notes": self.notes}


def reference_logits(model: LlmModel, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The unsplit model's logits at each step, fed the same tokens (the prompt, then each generated one)."""
    with as_a_rank():                          # as the workers compute: the same rounding
        dec = Decoder(model, StageSpec.whole(model.config), len(prompt) + len(tokens))
        rows, feed, pos = [], prompt, 0
        for t in tokens:
            rows.append(dec.forward(torch.tensor(feed), pos)[-1])
            pos += len(feed)
            feed = [t]
        return torch.stack(rows)


def verify_steps(model: LlmModel, prompts: list[list[int]], report: PipelineReport,
                 before: list[int] | None = None) -> dict[str, Any]:
    """The run's logits against the unsplit model's, step by step, and its greedy tokens for identity: each
    stream's against the unsplit model fed that stream's own prompt (``prompts``, one per stream) and
    tokens; ``before``: tokens generated by an earlier run that failed (checked for identity; their
    logits were lost with it)."""
    if report.logits is None:
        raise UsageError("verify: the run kept no logits to compare (run it with keep_logits)")
    before = before or []
    streams = report.streams_tokens or [report.tokens]
    if len(prompts) != len(streams):
        raise RuntimeFailure(f"verify: {len(streams)} streams ran for {len(prompts)} prompts")
    diff, first_differing = 0.0, {}
    refs: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
    for b, (prompt, made) in enumerate(zip(prompts, streams)):    # streams alike share their reference
        tokens = before + made
        key = (tuple(prompt), tuple(tokens))
        if key not in refs:
            refs[key] = reference_logits(model, prompt, tokens)
        ref = refs[key]
        diff = max(diff, float((ref[len(before):] - report.logits[b::len(streams)]).abs().max()))
        greedy = [int(r.argmax()) for r in ref]
        differing = [i for i, (x, y) in enumerate(zip(greedy, tokens)) if x != y]
        if differing:
            first_differing[b] = differing[0]
    first = min(first_differing.values(), default=None)
    return {"ok": first is None, "max_abs_logit_diff": diff, "identical_tokens": first is None,
            "first_differing_step": first, "streams": len(streams), "differing_streams": sorted(first_differing)}


def generate(model_path: str | Path, cluster: Cluster, options: GenerateOptions,
             on_text: Callable[[str], None] | None = None,
             announce: Callable[[list[WorkerCommand]], None] | None = None) -> GenerateResult:
    """Plan, run as a pipeline of processes here (and on the hosts of ``options.hosts``, each host's worker
    command told to ``announce``), stream stream 0's text to ``on_text``, measure, verify if asked. A
    stream per prompt (``GenerateOptions.stream_prompts``), planned at the longest (``PlanOptions``)."""
    hosts = options.check_hosts()
    if options.tokens < 1:
        raise UsageError(f"--tokens {options.tokens}: generate at least one token")
    texts = options.stream_prompts()
    if len(texts) > 1 and options.recover:
        raise UsageError("--recover goes on with one stream: leave out --streams (and give one prompt) or --recover")
    check_emulation(options.emulate_links)
    model = read_model(model_path)
    tok = model_tokenizer(model)
    encoded = {t: tok.encode(t) for t in set(texts)}
    prompts = [encoded[t] for t in texts]
    if empty := [b for b, p in enumerate(prompts) if not p]:
        raise UsageError(f"--prompt: the prompt of stream {empty[0]} has no tokens")
    longest = max(map(len, prompts))
    if longest + options.tokens > model.config.context:
        raise UsageError(f"{longest} prompt + {options.tokens} new tokens exceed the model's context of "
                         f"{model.config.context}")
    prompt = prompts[0]
    plan = plan_generation(model, cluster, PlanOptions(longest, options.tokens, options.objective,
                                                       options.stages, options.probe, given=options.plan,
                                                       rule=options.rule, tensor_parallel=options.tensor_parallel,
                                                       streams=len(prompts), leaders=here_leaders(cluster, hosts),
                                                       cuda_devices=cuda_here(cluster, hosts, options.cpu_only),
                                                       executor=options.executor))
    got: list[int] = []
    shown = [""]
    notes: list[str] = []

    def on_token(t: int) -> None:
        got.append(t)
        text = tok.decode(got)
        if on_text is not None and not text.endswith("\ufffd"):      # wait for a whole character
            on_text(text[len(shown[0]):])
            shown[0] = text

    # with --recover across hosts, every run serves one port and token, so the workers that stay join the next
    token, port = None, options.port
    if hosts and options.recover:
        from hetsplit.runtime.rendezvous import free_port, new_token

        token, port = new_token(), options.port or free_port()

    def run(plan: GenerationPlan, before: list[int], faults: dict[str, dict], hosts: HostMap | None) -> PipelineReport:
        job = pipeline_job(model_path, plan.stages, model.config.blocks, [p + before for p in prompts],
                           options.tokens - len(before), options.verify, options.executor)   # ``before``: --recover's
        links = None
        if options.emulate_links:
            from hetsplit.runtime.netem import LinkMatrix

            links = LinkMatrix.between(job.devices, cluster)
        emu = stage_emulation(model, plan) if options.emulate_devices else None
        kinds = {d.name: d.kind for d in cluster.devices if d.name in job.devices}
        said = [no_cuda_note(kinds) if not options.cpu_only and not hosts else None]
        said += crowded_notes(plan.stages, usable_cores()) if emu is not None else []
        notes.extend(n for n in said if n and n not in notes)
        with contextlib.ExitStack() as stack:
            tell = worker_announcer(announce or (lambda _: None), options.ssh, stack) if hosts else None
            return run_pipeline_decode(job, PipelineOptions(
                timeout_s=options.timeout_s, faults=faults, run_dir=options.run_dir, on_token=on_token, links=links,
                devices=emu.decode if emu else None, prefill_devices=emu.prefill if emu else None,
                kinds=kinds, cpu_only=options.cpu_only,
                hosts=hosts, port=port, announce=tell, token=token,
                stay=token is not None and not options.ssh))   # --ssh starts the workers of each run itself

    recovery = None
    try:
        report = run(plan, [], dict(options.faults), hosts)
    except RuntimeFailure as exc:
        if not options.recover or exc.device is None:
            raise
        recovery = Recovery(exc.device, str(exc), len(got), plan)
        plan = replan_without(model, cluster, options, len(prompt), recovery, hosts)
        report = run(plan, list(got), {}, hosts_of(plan, hosts))   # the prompt and the tokens so far rebuild the KV cache
    before = got[:recovery.tokens_before] if recovery is not None else []
    text = tok.decode(before + report.tokens)
    if on_text is not None and len(text) > len(shown[0]):
        on_text(text[len(shown[0]):])
    verify = verify_steps(model, prompts, report, before) if options.verify else None
    made = report.streams_tokens or [report.tokens]
    streams = [StreamResult(texts[b], prompts[b], tok.decode(before + t), before + t, report.streams_ttft_s[b])
               for b, t in enumerate(made)]
    return GenerateResult(text, prompt, before + report.tokens, plan, report, verify, recovery, notes, streams)


def here_leaders(cluster: Cluster, hosts: HostMap | None) -> tuple[str, ...] | None:
    """With devices on other hosts, this host's: the planned first stage is led from here, which streams the
    tokens (None: any device may lead; also when ``hosts`` names them all, which the run refuses by name)."""
    if hosts is None:
        return None
    here = tuple(d.name for d in cluster.devices if d.name not in hosts.by_device)
    return here or None


def hosts_of(plan: GenerationPlan, hosts: HostMap | None) -> HostMap | None:
    """The devices of ``hosts`` that ``plan`` uses (None: all here)."""
    from hetsplit.runtime.hosts import HostMap

    used = {d for stage in plan.stages for d in stage.devices}
    kept = {d: h for d, h in (hosts.by_device.items() if hosts is not None else ()) if d in used}
    return HostMap(kept) if kept else None


def replan_without(model: LlmModel, cluster: Cluster, options: GenerateOptions, prompt_tokens: int,
                   recovery: Recovery, hosts: HostMap | None = None) -> GenerationPlan:
    """The plan that goes on after ``recovery.device`` failed: the exact DP over the devices left, for the
    prompt and the tokens so far as one prefill and the tokens still to come; with ``hosts``, its first
    stage led by a device of this host (it streams the tokens here)."""
    left = tuple(d.name for d in cluster.devices if d.name != recovery.device)
    if not left:
        raise RuntimeFailure(f"{recovery.error}; --recover: no other device to go on with", recovery.device)
    if recovery.tokens_before >= options.tokens:
        raise RuntimeFailure(f"{recovery.error}; --recover: it failed after the last token", recovery.device)
    leaders = here_leaders(cluster, hosts)
    if leaders is not None:
        leaders = tuple(d for d in leaders if d in left)
        if not leaders:
            raise RuntimeFailure(f"{recovery.error}; --recover: no device of this host is left to lead the first "
                                 "stage (it streams the tokens here)", recovery.device)
    try:
        return plan_generation(model, cluster, PlanOptions(prompt_tokens + recovery.tokens_before,
                                                           options.tokens - recovery.tokens_before,
                                                           options.objective, 0, options.probe, left,
                                                           tensor_parallel=options.tensor_parallel, leaders=leaders,
                                                           cuda_devices=cuda_here(cluster, hosts, options.cpu_only),
                                                           executor=options.executor))
    except HetsplitError as exc:
        raise RuntimeFailure(f"{recovery.error}; --recover: no plan without {recovery.device}: {exc}",
                             recovery.device) from None
