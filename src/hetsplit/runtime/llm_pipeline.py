"""Pipeline decode of a GGUF LLM by real processes: each stage owns whole blocks and keeps their KV cache.

A stage may be tensor-parallel: several ranks, one per device, each with its ``TensorShare`` of the
stage's blocks (``graph.llm.shares``); they sum their partial outputs twice per block (a star all-reduce
through the stage's leader, its first rank), the stage before sends its hidden state to each of them, the
last stage's members send their best logit to its leader, which picks the token and sends it to every
member of the first stage. One worker program runs every rank of every kind of stage.

``run_pipeline_decode(job, options)`` starts one process per stage with the runtime's launcher
(``runtime.launch``: rendezvous, supervision, a dead process ends the run naming its device). Rank
``r`` runs stage ``r`` (``runtime.llm_pipeline_worker``): stage 0 embeds the tokens, the last stage
ends with the final norm and the LM head. Per step (the prompt in one pass, then one token per
step) the hidden state crosses every boundary once and the last stage sends the greedy token back
to stage 0: one hop per boundary per token, plus the token's return. Several streams (one prompt
each, of its own length) take their steps in turn, each with its own KV caches and positions. Tokens stream through
``tokens.txt`` in the run directory (stage 0 appends each as it arrives), read by the launcher's
poll (``TokenStream``), so the caller sees them as they come.

A cluster not owned yet is rehearsed as ``hetsplit run`` rehearses one: ``PipelineOptions.links``
shapes every rank-to-rank link in network namespaces (``runtime.netem``: htb for the bandwidth, netem,
else the sender's sleep, for the latency), ``PipelineOptions.devices`` runs each stage at its device's speed: its worker paces
its work to its CPU share (the prompt's step at ``PipelineOptions.prefill_devices``' share, where given)
(``runtime.device_emulation``, ``runtime.pacing``: not a cgroup's CPU quota, under which a decode step
costs more CPU than unthrottled), everything slowed by the emulation's dilation D (links dilated with
it); the report keeps D, so figures divide back to the cluster's time.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from hetsplit.errors import PlanError, RuntimeFailure, UsageError
from hetsplit.graph.llm import EXECUTORS
from hetsplit.graph.llm.shares import TensorShare
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launcher, PeerSet, Peers
from hetsplit.runtime.report import DeviceShaping, LinkShaping

if TYPE_CHECKING:     # imported where used: netem needs Linux network tools; the workers need neither
    from hetsplit.runtime.hosts import HostMap, Hosted, WorkerCommand
    from hetsplit.runtime.device_emulation import DeviceEmulation
    from hetsplit.runtime.netem import LinkMatrix

WORKER_MODULE = "hetsplit.runtime.llm_pipeline_worker"
JOB_FILE = "job.json"
LOGITS_FILE = "logits-{rank}.pt"    # each rank of the last stage: its rows of every step's logits
TOKENS_FILE = "tokens.txt"
MAX_STREAMS = 64


def logits_file(rank: int) -> str:
    return LOGITS_FILE.format(rank=rank)


@dataclass(frozen=True)
class Member:
    """What the launcher reads of a rank."""

    rank: int
    device: str


@dataclass
class PipelineJob:
    """The model file, the ranks (each rank's device, its stage's first and stop block, its stage's index
    and, in a tensor-parallel stage, its share), each stream's prompt and how many tokens to make. The
    streams (generations at once, each with its KV caches, in turn on every stage) are the prompts: one
    token list each, of any lengths; every stream's caches hold the longest prompt and the new tokens."""

    model: str
    devices: list[str]
    bounds: list[list[int]]           # per rank: [first, stop) of its stage's blocks
    blocks: int
    prompts: list[list[int]]                   # per stream: its prompt's token ids
    new_tokens: int
    keep_logits: bool = True
    stage_of: list[int] | None = None          # per rank: its stage (None: one rank per stage)
    shares: list[dict | None] | None = None    # per rank: its ``TensorShare.to_dict`` (None: whole blocks)
    executor: str = "torch"                    # one of ``EXECUTORS``

    def __post_init__(self) -> None:
        n = len(self.devices)
        if self.executor not in EXECUTORS:
            raise PlanError(f"executor {self.executor!r:.40}: one of {', '.join(EXECUTORS)}")
        if len(self.bounds) != n or not self.devices:
            raise PlanError(f"{n} devices for {len(self.bounds)} ranks' blocks")
        if len(set(self.devices)) != n:
            raise PlanError(f"a device runs two ranks: {self.devices}")
        stage_of = self.stage_of if self.stage_of is not None else list(range(n))
        if len(stage_of) != n or stage_of[0] != 0 or any(type(x) is not int for x in stage_of) or \
                any(b - a not in (0, 1) for a, b in zip(stage_of, stage_of[1:])):
            raise PlanError(f"stage_of {stage_of}: each rank's stage, from 0, the ranks of a stage next to each other")
        self.stage_of = stage_of
        shares: list[dict | None] = self.shares if self.shares is not None else [None] * n
        if len(shares) != n:
            raise PlanError(f"{len(shares)} shares for {n} ranks")
        self.shares = shares
        for s in range(self.stages):
            ranks = self.ranks_of(s)
            if any(self.bounds[r] != self.bounds[ranks[0]] for r in ranks):
                raise PlanError(f"the ranks {ranks} of stage {s} name different blocks")
            if (len(ranks) > 1) != all(shares[r] is not None for r in ranks) or \
                    (len(ranks) == 1 and shares[ranks[0]] is not None):
                raise PlanError(f"stage {s}: every rank of a tensor-parallel stage has a share, a rank alone none")
        leaders = [self.bounds[self.ranks_of(s)[0]] for s in range(self.stages)]
        edges = [0] + [b for _, b in leaders]
        if [a for a, _ in leaders] != edges[:-1] or edges[-1] != self.blocks or any(a >= b for a, b in leaders):
            raise PlanError(f"stages {leaders} do not cover blocks 0..{self.blocks - 1} in order, each non-empty")
        if not isinstance(self.prompts, list) or not 1 <= len(self.prompts) <= MAX_STREAMS:
            raise PlanError(f"prompts: a list of 1 to {MAX_STREAMS} token lists, one per stream (generations at once)")
        if any(not isinstance(p, list) or not p for p in self.prompts) or self.new_tokens < 1:
            raise PlanError("a pipeline decode needs a prompt (a non-empty list of token ids) per stream and at "
                            "least one new token")

    @property
    def streams(self) -> int:
        return len(self.prompts)

    @property
    def positions(self) -> int:
        """The positions every stream's KV caches hold: the longest prompt and the new tokens."""
        return max(map(len, self.prompts)) + self.new_tokens

    @property
    def longest(self) -> int:
        """The stream of the longest prompt (the first of them): the prefill the plan is costed at."""
        lengths = [len(p) for p in self.prompts]
        return lengths.index(max(lengths))

    @property
    def world_size(self) -> int:
        return len(self.devices)

    @property
    def stages(self) -> int:
        assert self.stage_of is not None
        return self.stage_of[-1] + 1

    def ranks_of(self, stage: int) -> list[int]:
        """The ranks of ``stage``, its leader first."""
        assert self.stage_of is not None
        return [r for r, s in enumerate(self.stage_of) if s == stage]

    def share_of(self, rank: int) -> TensorShare | None:
        assert self.shares is not None
        doc = self.shares[rank]
        return None if doc is None else TensorShare.from_dict(doc, f"rank {rank}'s share")

    def worker(self, rank: int) -> Member:
        return Member(rank, self.devices[rank])

    def steps(self) -> list[list[int]]:
        """Tokens each stream feeds per step: its prompt in one pass, then one per generated token (the
        last one's token is not fed back)."""
        return [[len(p) for p in self.prompts]] + [[1] * self.streams] * (self.new_tokens - 1)

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self)))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "PipelineJob":
        return cls(**json.loads(Path(path).read_text()))


class TokenStream:
    """The launcher's peers hook, used to stream: each poll hands new tokens from ``tokens.txt`` to ``on_token``."""

    def __init__(self, run_dir: Path, on_token: Callable[[int], None] | None):
        self.path, self.on_token, self.seen = run_dir / TOKENS_FILE, on_token, 0

    def open(self, cfg: RunConfig) -> None:
        self.path.unlink(missing_ok=True)

    def tick(self) -> bool:
        if self.on_token is not None and self.path.exists():
            lines = self.path.read_text().split("\n")[:-1]       # whole lines only
            for line in lines[self.seen:]:
                self.on_token(int(line))
            self.seen = max(self.seen, len(lines))
        return True

    def docs(self) -> dict[int, dict]:
        return {}

    def close(self, docs: dict[int, dict], failure: str | None) -> None:
        self.tick()


@dataclass
class PipelineOptions:
    """How to run: timeouts, the links to emulate between ranks (``runtime.netem``; rank r runs stage r),
    the devices to emulate (``runtime.device_emulation``: shares by device name; ``prefill_devices``: the
    shares of the prompt's step, at the same dilation, where they differ), faults to rehearse
    (rank -> {kind: die|stall, after: step}), where to keep the run, the devices on other hosts."""

    timeout_s: float = 60.0
    startup_timeout_s: float = 120.0
    links: LinkMatrix | None = None
    devices: DeviceEmulation | None = None
    prefill_devices: DeviceEmulation | None = None
    faults: dict[str, dict] = field(default_factory=dict)
    run_dir: Path | None = None
    on_token: Callable[[int], None] | None = None
    kinds: dict[str, str] = field(default_factory=dict)   # device -> cpu | gpu (a gpu's stage on its host's CUDA)
    cpu_only: bool = False             # every stage on the CPU, GPUs or not
    hosts: HostMap | None = None       # devices on other hosts (``runtime.llm_hosts``): their workers join
    port: int = 0                      # with ``hosts``: the rendezvous port (0: a free one)
    announce: Callable[[list[WorkerCommand]], None] | None = None   # told each other host's worker command
    token: str | None = None           # the run's token (None: a new one); runs of one token share their workers
    stay: bool = False                 # with ``hosts``: the workers are told to serve the next runs too (--stay)


@dataclass
class StageReport:
    """One stage's decode steps (medians over the decode steps; the prefill apart: the longest prompt's
    stream's, ``PipelineJob.longest``, the prefill a plan is costed at)."""

    rank: int
    device: str
    blocks: list[int]
    prefill_compute_s: float
    prefill_cpu_s: float            # the CPU time of the stage's thread in its prefill_compute_s
    compute_s: float
    cpu_s: float                    # the CPU time of the stage's thread in its compute_s (less: others had the core)
    wait_s: float
    sent_bytes: int                 # per decode token
    peak_rss_bytes: int


@dataclass
class PipelineReport:
    """A run: stream 0's tokens, per-step logits (the last stage's; streams in turn within a step), stage 0's
    times: TTFT (its first step begun to stream 0's first token known there) and stream 0's time per
    token (from each of its tokens to the next); with several streams every stream's tokens, its TTFT
    (from the same start: the streams' prefills run in turn) and their tokens/s together."""

    tokens: list[int]
    logits: torch.Tensor | None
    ttft_s: float                   # the prefill step on stage 0: prompt in, first token back
    steps_s: list[float]            # every decode step's time on stage 0 (stream 0's)
    stages: list[StageReport]
    hops_s: dict[str, list[float]] = field(default_factory=dict)   # "a->b" -> [prefill, median decode] s
    emulation: LinkShaping | None = None             # how the links were emulated (None: not)
    device_emulation: DeviceShaping | None = None    # how the devices were (None: not)
    prefill_emulation: DeviceShaping | None = None   # how they were for the prompt's step (None: as decode)
    streams_tokens: list[list[int]] = field(default_factory=list)   # every stream's tokens
    streams_tokens_per_s: float = float("nan")       # decode tokens of every stream per second, together
    streams_ttft_s: list[float] = field(default_factory=list)      # every stream's TTFT

    @property
    def s_per_token(self) -> float:
        return float(statistics.median(self.steps_s)) if self.steps_s else float("nan")

    @property
    def dilation(self) -> float:
        """How many times slower than the emulated cluster this run went (1 without device emulation)."""
        return self.device_emulation.dilation if self.device_emulation is not None else 1.0

    def emulated(self) -> dict[str, float | dict[str, float] | list[float]]:
        """The run's figures in the emulated cluster's time (measured / ``dilation``)."""
        d = self.dilation
        return {"dilation": d, "ttft_s": self.ttft_s / d, "s_per_token": self.s_per_token / d,
                "compute_s": {s.device: s.compute_s / d for s in self.stages},
                "hops_s": {h: t[1] / d for h, t in self.hops_s.items()},
                "streams_ttft_s": [t / d for t in self.streams_ttft_s]}


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _stage_report(doc: dict, bounds: list[int], job: PipelineJob) -> StageReport:
    steps = doc["steps"]
    decode = steps[job.streams:]
    return StageReport(int(doc["rank"]), doc["device"], list(bounds), steps[job.longest]["compute_s"],
                       steps[job.longest]["cpu_s"], _median([s["compute_s"] for s in decode]),
                       _median([s["cpu_s"] for s in decode]), _median([s["wait_s"] for s in decode]),
                       int(_median([s["sent_bytes"] for s in decode])), int(doc.get("peak_rss_bytes", 0)))


def run_pipeline_decode(job: PipelineJob, options: PipelineOptions | None = None) -> PipelineReport:
    """Run ``job`` on one process per stage of this machine; RuntimeFailure naming the device when one fails."""
    opts = options or PipelineOptions()
    run_dir = Path(opts.run_dir or tempfile.mkdtemp(prefix="hetsplit-gen-"))
    docs, logits, links, devices, prefill = _run(job, opts, run_dir)   # a failed run keeps its folder: its logs
    if opts.run_dir is None:
        shutil.rmtree(run_dir, ignore_errors=True)
    for rank, doc in docs.items():
        check_stage_doc(job, rank, doc)
    root = docs[0]
    made = root.get("generated", [])
    if len(made) != job.streams or any(len(t) != job.new_tokens for t in made):
        raise RuntimeFailure(f"stage 0 ({job.devices[0]}) returned {[len(t) for t in made]} tokens per stream, "
                             f"{job.new_tokens} for each of {job.streams} were asked for")
    ttfts, steps, together = token_times(root["steps"], job.streams)
    return PipelineReport(made[0], logits, ttfts[0], steps,
                          [_stage_report(docs[r], job.bounds[r], job) for r in sorted(docs)],
                          hop_times(job, docs), links, devices, prefill, made, together, ttfts)


STEP_FIELDS = ("compute_s", "cpu_s", "wait_s", "sync_s", "sent_bytes", "started_at", "sent_at", "arrived_at")


def check_stage_doc(job: PipelineJob, rank: int, doc: dict) -> None:
    """RuntimeFailure naming the device unless a rank's report (a worker on another host sends its own)
    has a record of numbers per step and stream, as ``llm_pipeline_worker.run_stage`` writes them: the
    streams in turn, each record naming its stream and the tokens that stream fed (its own prompt's
    length at the first step)."""
    steps = doc.get("steps")
    fed = [(b, n) for step in job.steps() for b, n in enumerate(step)]
    ok = isinstance(steps, list) and len(steps) == len(fed) and all(
        isinstance(s, dict) and all(type(s.get(f)) in (int, float) for f in STEP_FIELDS)
        and type(s.get("stream")) is int and type(s.get("tokens")) is int and (s["stream"], s["tokens"]) == want
        for s, want in zip(steps, fed)) and type(doc.get("peak_rss_bytes", 0)) is int
    if not ok:
        raise RuntimeFailure(f"device {job.devices[rank]}: its report is not {len(fed)} step records (the streams "
                             f"in turn, each with its stream and the tokens it fed) of {', '.join(STEP_FIELDS)}; "
                             "refused (install the same hetsplit on every host)", job.devices[rank])


def token_times(steps: list[dict], streams: int) -> tuple[list[float], list[float], float]:
    """From stage 0's step records (streams in turn, each with ``token_at``): every stream's TTFT (from the
    first step's start), stream 0's time from each token to the next; and the decode tokens of every
    stream per second, from the last stream's first token to the last token."""
    start = steps[0]["started_at"]
    at = [[s["token_at"] for s in steps[b::streams]] for b in range(streams)]
    mine = at[0]
    since = at[-1][0]
    later = sorted(t for ts in at for t in ts[1:] if t > since)
    together = len(later) / (later[-1] - since) if later and later[-1] > since else float("nan")
    return [ts[0] - start for ts in at], [b - a for a, b in zip(mine, mine[1:])], together


def _run(job: PipelineJob, opts: PipelineOptions, run_dir: Path) -> tuple[
        dict[int, dict], torch.Tensor | None, LinkShaping | None, DeviceShaping | None, DeviceShaping | None]:
    """Launch the ranks in ``run_dir``, inside the link and device emulations asked for; their reports."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        devices = prefill = wrap = None
        ranks = dict(enumerate(job.devices))
        paces: dict[str, list[float]] = {}
        if opts.devices is not None:
            from hetsplit.runtime.pacing import paces_of

            first_shares = opts.prefill_devices.shares if opts.prefill_devices is not None else None
            paces, devices = paces_of(opts.devices.shares, first_shares, ranks), opts.devices.describe(None)
            prefill = opts.prefill_devices.describe(None) if opts.prefill_devices is not None else None
        cfg = RunConfig(str(job.save(run_dir / JOB_FILE)), inputs=len(job.steps()), timeout_s=opts.timeout_s,
                        startup_timeout_s=opts.startup_timeout_s, faults=dict(opts.faults), master_port=opts.port,
                        kinds=dict(opts.kinds), cpu_only=opts.cpu_only)
        if opts.token is not None:
            cfg.token = opts.token
        cfg.paces = paces
        emu = None
        if opts.links is not None:
            from hetsplit.runtime.netem import Emulation

            links = opts.links.dilated(opts.devices.dilation) if opts.devices is not None else opts.links
            emu = stack.enter_context(Emulation(job, links))
            wrap = emu.apply(cfg)
        tokens = TokenStream(run_dir, opts.on_token)
        peers: Peers = tokens
        local: list[int] | None = None
        hosted: Hosted | None = None
        vocab = 0
        if opts.hosts is not None:
            from hetsplit.graph.llm.load import read_model
            from hetsplit.runtime.llm_hosts import hosted_generation

            if opts.links is not None or opts.devices is not None:
                raise UsageError("--emulate-links and --emulate-devices shape this machine's own processes; they do "
                                 "not combine with --hosts")
            vocab = read_model(job.model).config.vocab
            hosted = hosted_generation(job, opts.hosts, vocab, opts.announce, opts.stay)
            local = [r for r in range(job.world_size) if r not in hosted.remote]
            peers = PeerSet(tokens, hosted)
        launcher = Launcher(job, cfg, run_dir, ranks=local, wrap=wrap, peers=peers)
        launcher.module = WORKER_MODULE
        docs = launcher.run()
        logits = None
        if job.keep_logits:
            logits = torch.cat([_logits(run_dir, job, r, hosted, vocab) for r in job.ranks_of(job.stages - 1)], dim=1)
        return docs, logits, emu.describe() if emu is not None else None, devices, prefill


def _logits(run_dir: Path, job: PipelineJob, rank: int, hosted: Hosted | None, vocab: int) -> torch.Tensor:
    """A last-stage rank's logits: its file here, or the result its worker on another host sent back."""
    if hosted is None or rank not in hosted.remote:
        return torch.load(run_dir / logits_file(rank))
    from hetsplit.runtime.llm_hosts import logits_of

    return torch.from_numpy(logits_of(hosted, job, rank, vocab).copy())


def hop_times(job: PipelineJob, docs: dict[int, dict]) -> dict[str, list[float]]:
    """Each hop's time (sent on one stage's leader's clock to taken on the next's: one host, one clock; the
    token's way back: to when stage 0 took it, which with several streams may be later than it arrived):
    the prefill step's (the longest prompt's stream's, as the plan costs it) and the median decode step's;
    and each tensor-parallel stage's syncs per step as its leader waited in them (``"a+b syncs"``). Named
    as ``estimate.llm.predict_pipeline`` names them."""
    out = {}
    k, n = job.stages, job.streams

    def prefill_and_decode(times: list[float]) -> list[float]:
        return [times[job.longest], _median(times[n:])]

    for s in range(k if k > 1 else 0):
        a, b = job.ranks_of(s), job.ranks_of((s + 1) % k)
        taken = "token_at" if s == k - 1 else "arrived_at"
        times = [y[taken] - x["sent_at"] for x, y in zip(docs[a[0]]["steps"], docs[b[0]]["steps"])]
        out[f"{job.devices[a[0]]}->{'+'.join(job.devices[r] for r in b)}"] = prefill_and_decode(times)
    for s in range(k):
        ranks = job.ranks_of(s)
        if len(ranks) > 1:
            syncs = [step.get("sync_s", 0.0) for step in docs[ranks[0]]["steps"]]
            out[f"{'+'.join(job.devices[r] for r in ranks)} syncs"] = prefill_and_decode(syncs)
    return out
