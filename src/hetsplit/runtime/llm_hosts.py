"""A generation across hosts: ``hetsplit generate --hosts DEV=HOST,...`` and the ``hetsplit worker`` that joins it.

The driver's side (``hosted_generation``) is a ``runtime.hosts.Hosted`` whose handout is the pipeline
job with its model path blanked, the list of the checkpoint's files (a GGUF file, or a Hugging Face
folder's ``config.json``, ``*.safetensors`` and ``tokenizer.json``: name, size, SHA-256), the files
themselves once a worker asks for them (a worker run with ``--model`` uses its host's own copy when it
is the same, and asks for nothing) and, for each remote rank of the last stage, its logits as a result
of exactly ``logits_shape`` float32 values. The first stage's leader (rank 0) stays on the driver's
host: it streams the tokens there.

The worker's side (``GenerationProgram``, chosen by ``runtime.join.program_named``) takes nothing it has
not checked: the job document has exactly the job's fields, each of its type and within its bound, and no
model path (``peer_job``: the worker reads only the checkpoint it fetched, under names it checked as plain
file names, ``check_model_file``; 1..``MAX_STREAMS`` prompts, one per stream, of at most ``MAX_POSITIONS``
token ids all together); once fetched, the checkpoint must match the job (its blocks, every prompt's
token ids, the context every stream's positions must fit, every tensor-parallel stage's shares) and its
KV caches must fit this host's memory budget (``check_job_model``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hetsplit.errors import PlanError, RuntimeFailure, UsageError
from hetsplit.graph.llm import EXECUTORS
from hetsplit.graph.llm.config import LlmConfig
from hetsplit.graph.llm.shares import TensorShare, check_shares
from hetsplit.limits import memory_budget
from hetsplit.runtime import rendezvous
from hetsplit.runtime.hosts import WANT, Handout, HostMap, Hosted, WorkerCommand
from hetsplit.runtime.join import fetch_all, submodel_cap
from hetsplit.runtime.launch import Launchable
from hetsplit.runtime.llm_pipeline import JOB_FILE, MAX_STREAMS, WORKER_MODULE, PipelineJob, logits_file
from hetsplit.runtime.peer_config import PeerChecker, PeerConfigError
from hetsplit.runtime.store_auth import StoreKey, fetch, set_sealed

JOB_BYTES = 16 << 20            # a job document: mostly the prompts' token ids
FILES_BYTES = 64 << 10          # the list of the checkpoint's file names
MAX_FILES = 64
MAX_RANKS = 64
MAX_BLOCKS = 4096
MAX_POSITIONS = 1 << 20
MAX_NAME = 200
MODEL_SUFFIXES = (".gguf", ".json", ".safetensors")


def check_model_file(name: object) -> str:
    """``name`` if it is a plain checkpoint file name (letters, digits, ``-_.``, ending in ``.gguf``,
    ``.json`` or ``.safetensors``, not hidden, at most 255 bytes); ValueError saying why not."""
    ok = isinstance(name, str) and all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".") \
        and name.endswith(MODEL_SUFFIXES) and len(name.encode()) <= 255 and name not in MODEL_SUFFIXES
    if not ok:
        raise ValueError(f"checkpoint file {name!r:.80}: a plain file name ending in {', '.join(MODEL_SUFFIXES)} "
                         "(letters, digits, '-', '_', '.'; no folder, not hidden)")
    return str(name)


def model_files(path: Path) -> dict[str, Path]:
    """The files of a checkpoint a worker needs, by their plain names: the GGUF file, or the folder's
    ``.json`` and ``.safetensors`` files."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file() and
                                                 p.suffix in (".json", ".safetensors"))
    if not files or len(files) > MAX_FILES:
        raise UsageError(f"{path}: {len(files)} checkpoint files to hand to other hosts; 1 to {MAX_FILES} are sent")
    try:
        return {check_model_file(p.name): p for p in files}
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}; rename it to hand the checkpoint to other hosts") from None


def file_entries(files: dict[str, Path]) -> list[dict[str, Any]]:
    """Each checkpoint file's name, size and SHA-256 (what a worker with its own copy compares)."""
    out = []
    for name, path in sorted(files.items()):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        out.append({"name": name, "bytes": path.stat().st_size, "sha256": h.hexdigest()})
    return out


def logits_shape(job: PipelineJob, rank: int, vocab: int) -> tuple[int, int]:
    """What a rank of the last stage keeps: a row per step and stream, of its vocabulary rows (all of them
    for a rank alone)."""
    share = job.share_of(rank)
    return len(job.steps()) * job.streams, share.size("vocab") if share is not None else vocab


def last_ranks(job: PipelineJob) -> list[int]:
    return job.ranks_of(job.stages - 1)


def hosted_generation(job: PipelineJob, hosts: HostMap, vocab: int,
                      announce: Callable[[list[WorkerCommand]], None] | None, stay: bool = False) -> Hosted:
    """The driver's side of ``job`` with the devices of ``hosts`` on other hosts (rank 0 stays here);
    ``stay``: the workers are told to serve the driver's next runs too."""
    hosts.check(job)
    remote = sorted(hosts.remote_ranks(job))
    if 0 in remote:
        raise UsageError(f"--hosts places {job.devices[0]}, which leads the first stage: it streams the tokens to "
                         "this host; run generate on its host, or leave it out of --hosts")
    files = model_files(Path(job.model))
    doc = {**dataclasses.asdict(job), "model": ""}      # a worker reads only its own checkpoint or the one fetched
    documents = {"job": json.dumps(doc).encode(), "model-files": json.dumps(file_entries(files)).encode()}
    results = {r: {"logits": int(np.prod(logits_shape(job, r, vocab))) * 4}
               for r in last_ranks(job) if r in remote and job.keep_logits}
    handout = Handout("generation", documents, {f"model/{n}": p for n, p in files.items()},
                      {r: job.streams for r in remote}, results, on_request=True)
    return Hosted(job, hosts, handout, announce, stay)


def logits_of(hosted: Hosted, job: PipelineJob, rank: int, vocab: int) -> np.ndarray:
    """A remote rank's logits from its result (its size checked exactly when fetched)."""
    return np.frombuffer(hosted.results[rank]["logits"], dtype=np.float32).reshape(logits_shape(job, rank, vocab))


def checked_entries(doc: Any, who: str) -> list[dict[str, Any]]:
    """The driver's list of checkpoint files (``file_entries``), each field checked."""
    ok = isinstance(doc, list) and 1 <= len(doc) <= MAX_FILES and all(
        isinstance(e, dict) and set(e) == {"name", "bytes", "sha256"} and type(e["bytes"]) is int
        and 0 <= e["bytes"] <= submodel_cap() and isinstance(e["sha256"], str) and len(e["sha256"]) == 64
        and all(c in "0123456789abcdef" for c in e["sha256"]) for e in doc)
    if not ok:
        raise PeerConfigError(f"{who}: the driver's list of checkpoint files is not 1..{MAX_FILES} entries of a name, "
                              "a size and a SHA-256; refused")
    for e in doc:
        check_model_file(e["name"])
    if len({e["name"] for e in doc}) != len(doc):
        raise PeerConfigError(f"{who}: the driver's list of checkpoint files names a file twice; refused")
    return doc


def check_own_copy(path: Path, entries: list[dict[str, Any]]) -> None:
    """UsageError unless ``path`` (``hetsplit worker --model``) holds the driver's checkpoint files: the same
    names, sizes and SHA-256."""
    if not path.exists():
        raise UsageError(f"--model {path}: no such file or folder")
    mine = {e["name"]: e for e in file_entries(model_files(path))}
    theirs = {e["name"]: e for e in entries}
    if set(mine) != set(theirs):
        raise UsageError(f"--model {path}: holds {sorted(mine)}; the driver's checkpoint is {sorted(theirs)}")
    differ = sorted(n for n in mine if mine[n] != theirs[n])
    if differ:
        raise UsageError(f"--model {path}: {', '.join(differ)} differ from the driver's (size or SHA-256): not the "
                         "checkpoint of this run; copy the driver's, or leave out --model to fetch it")


def peer_job(doc: Any, model_path: Path, who: str) -> PipelineJob:
    """The driver's job document, every field checked, reading the checkpoint at ``model_path`` (this
    worker's own)."""
    c = PeerChecker(who, "job")
    if not isinstance(doc, dict):
        raise c.refuse(f"is a {type(doc).__name__}, not an object")
    fields = {f.name for f in dataclasses.fields(PipelineJob)}
    unknown, missing = sorted(str(k) for k in doc if k not in fields), sorted(fields - set(doc))
    if unknown or missing:
        raise c.refuse(f"has fields {unknown} a worker does not take and lacks {missing}")
    if doc["model"] != "":
        raise c.refuse(f"names a model path {doc['model']!r:.80}; a worker reads only the checkpoint it fetched")
    n = len(c.items("devices", doc["devices"], 1, MAX_RANKS))
    if any(not isinstance(d, str) or not 0 < len(d) <= MAX_NAME for d in doc["devices"]):
        raise c.fail("devices", f"holds a name that is not a string of 1..{MAX_NAME} characters")
    blocks = c.whole("blocks", doc["blocks"], 1, MAX_BLOCKS)
    for i, b in enumerate(c.items("bounds", doc["bounds"], n, n)):
        c.items(f"bounds[{i}]", b, 2, 2)
        c.whole(f"bounds[{i}][0]", b[0], 0, blocks)
        c.whole(f"bounds[{i}][1]", b[1], 0, blocks)
    prompts = c.items("prompts", doc["prompts"], 1, MAX_STREAMS)
    for b, p in enumerate(prompts):
        c.wholes(f"prompts[{b}]", p, (1, MAX_POSITIONS), 0, MAX_POSITIONS * 64)
    if sum(map(len, prompts)) > MAX_POSITIONS:
        raise c.fail("prompts", f"holds {sum(map(len, prompts)):,} token ids, over {MAX_POSITIONS:,}")
    c.whole("new_tokens", doc["new_tokens"], 1, MAX_POSITIONS)
    if type(doc["keep_logits"]) is not bool:
        raise c.fail("keep_logits", "is not true or false")
    if doc["stage_of"] is not None:
        for i, s in enumerate(c.items("stage_of", doc["stage_of"], n, n)):
            c.whole(f"stage_of[{i}]", s, 0, n - 1)
    if doc["shares"] is not None:
        for i, s in enumerate(c.items("shares", doc["shares"], n, n)):
            if s is not None:
                try:
                    TensorShare.from_dict(s, f"shares[{i}]")
                except PlanError as exc:
                    raise c.refuse(str(exc)) from None
    if doc["executor"] not in EXECUTORS:
        raise c.fail("executor", f"is {doc['executor']!r:.40}, not one of {', '.join(EXECUTORS)}")
    try:
        return PipelineJob(**{**doc, "model": str(model_path)})
    except PlanError as exc:
        raise c.refuse(str(exc)) from None


def check_job_model(job: PipelineJob, config: LlmConfig, ranks: list[int], who: str) -> None:
    """PeerConfigError unless the checkpoint fits the job: its blocks, every prompt's token ids, the context
    (every stream's caches hold the longest prompt and the new tokens), the shares of every tensor-parallel
    stage; and the KV caches of ``ranks``, every stream's, fit this host's memory."""
    c = PeerChecker(who, "job")
    if job.blocks != config.blocks:
        raise c.refuse(f"has {job.blocks} blocks; the checkpoint it handed out has {config.blocks}")
    for b, p in enumerate(job.prompts):
        if max(p) >= config.vocab:
            raise c.refuse(f"feeds token id {max(p)} in stream {b}'s prompt; the vocabulary has {config.vocab}")
    positions = job.positions
    if positions > config.context:
        raise c.refuse(f"makes {positions} positions (the longest prompt and the new tokens); the checkpoint's "
                       f"context is {config.context}")
    for s in range(job.stages):
        members = [job.share_of(r) for r in job.ranks_of(s)]
        if len(members) > 1:
            try:
                check_shares([m for m in members if m is not None], config, f"stage {s}")
            except PlanError as exc:
                raise c.refuse(str(exc)) from None
    need = sum(config.kv_bytes_per_position(job.bounds[r][1] - job.bounds[r][0]) * positions * job.streams
               for r in ranks)
    budget = memory_budget()
    if need > budget:
        raise c.refuse(f"needs {need / 2**30:,.1f} GiB of KV cache here, over the {budget / 2**30:,.1f} GiB allowed")


class GenerationProgram:
    """A generation's worker (``runtime.llm_pipeline_worker``): the job, then the checkpoint (this host's own
    copy, ``--model``, when its files are the driver's by name, size and SHA-256; else fetched); its last
    stage's ranks send their logits back."""

    module = WORKER_MODULE

    def __init__(self, own: Path | None = None):
        self.own = own
        self.entries: list[dict[str, Any]] = []

    def read_job(self, store: rendezvous.KeyValueStore, key: StoreKey, split: Path, who: str
                 ) -> tuple[Launchable, Path]:
        self.entries = checked_entries(json.loads(fetch(store, key, "model-files", FILES_BYTES, who)), who)
        names = [e["name"] for e in self.entries]
        if self.own is not None:
            check_own_copy(self.own, self.entries)
            path = self.own.resolve()
        else:
            folder = split / "model"
            path = folder / names[0] if len(names) == 1 and names[0].endswith(".gguf") else folder
        job = peer_job(json.loads(fetch(store, key, "job", JOB_BYTES, who)), path, who)
        return job, job.save(split / JOB_FILE)

    def steps(self, job: Launchable, ranks: list[int]) -> int:
        assert isinstance(job, PipelineJob)
        return job.streams

    def fetch_files(self, store: rendezvous.KeyValueStore, key: StoreKey, job: Launchable, ranks: list[int],
                    split: Path, who: str) -> None:
        from hetsplit.errors import ModelError
        from hetsplit.graph.llm.load import read_model

        assert isinstance(job, PipelineJob)
        if self.own is None:
            folder = split / "model"
            folder.mkdir(exist_ok=True)
            if folder.is_symlink() or folder.resolve().parent != split.resolve():
                raise RuntimeFailure(f"{who}: {folder} is a link out of the run folder; refused")
            set_sealed(store, key, WANT, b"1")
            fetch_all(store, key, {f"model/{e['name']}": e["name"] for e in self.entries}, folder, submodel_cap(), who)
        try:
            config = read_model(job.model).config
        except ModelError as exc:
            raise PeerConfigError(f"{who}: the checkpoint the driver handed out cannot be read ({exc}); refused") \
                from None
        check_job_model(job, config, ranks, who)

    def results(self, job: Launchable, run_dir: Path) -> Callable[[int], dict[str, bytes]] | None:
        assert isinstance(job, PipelineJob)
        if not job.keep_logits:
            return None
        last = set(last_ranks(job))

        def logits(rank: int) -> dict[str, bytes]:
            import torch

            if rank not in last:
                return {}
            rows = torch.load(run_dir / logits_file(rank), weights_only=True)     # this rank's own file
            return {"logits": rows.to(torch.float32).contiguous().numpy().tobytes()}

        return logits
