"""What a worker on another host takes from its driver: only the settings it needs, each checked.

The driver publishes ``published(cfg, manifest, ranks)``, a document of its own format holding only the
fields below; a worker (``runtime.join.join_run``) builds its own ``RunConfig`` from it with
``worker_config``: every field type- and range-checked, unknown fields refused naming them. What names
something on the worker's host (its manifest and sub-model paths, the cgroups it joins, the CPUs it pins
to, its addresses) and rehearsal faults are never taken from a peer: the worker sets them itself.

| field | taken as |
| --- | --- |
| ``inputs`` | whole number 1..``MAX_INPUTS``, and its bookkeeping must fit this host's memory |
| ``latency_inputs`` | whole number 0..``inputs`` |
| ``timeout_s``, ``startup_timeout_s`` | finite seconds in (0, ``MAX_TIMEOUT_S``] |
| ``depth`` | whole number 1..``MAX_DEPTH`` |
| ``threads`` | device of the run -> whole number 1..``MAX_THREADS``; used up to this host's cores |
| ``kinds`` | device of the run -> ``cpu`` or ``gpu`` |
| ``cpu_only`` | true or false |
| ``delays_s`` | rank of the run -> peer rank -> finite seconds in [0, ``MAX_DELAY_S``] |
"""

from __future__ import annotations

import math
import os
from typing import Any

from hetsplit.errors import RuntimeFailure
from hetsplit.limits import memory_budget
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launchable
from hetsplit.runtime.manifest import Manifest
from hetsplit.storeprobe import MAX_TIMEOUT_S     # a week (cmd_run reads it here)

FORMAT = "hetsplit.peer-config/1"
MAX_INPUTS = 100_000_000
MAX_DEPTH = 64
MAX_THREADS = 1024
MAX_DELAY_S = 60.0
BYTES_PER_STEP = 256              # bookkeeping per input and segment or message end (~140 B measured for the
#                                   records alone; the report made of them at the end takes as much again)
TAKEN = ("inputs", "latency_inputs", "timeout_s", "startup_timeout_s", "depth", "threads", "kinds", "cpu_only",
         "delays_s")
NEVER = {"cgroups": "cgroups a worker joins are its own", "paces": "device emulation is the driver's host's own",
         "faults": "faults are rehearsals of the driver's host",
         "cpus": "CPUs are pinned by the host's own user", "manifest": "the worker writes its own manifest",
         "addrs": "a worker binds to its own address", "token": "the worker has its own token"}


class PeerConfigError(RuntimeFailure):
    """The driver's configuration holds a field a worker does not take, or a value out of range."""


def published(cfg: RunConfig, job: Launchable, ranks: list[int]) -> dict[str, Any]:
    """What the driver hands the workers of ``ranks`` of ``job`` (a manifest, a pipeline job): only the
    fields of ``TAKEN``."""
    devices = {job.worker(r).device for r in ranks}
    return {"format": FORMAT, "inputs": cfg.inputs, "latency_inputs": cfg.latency_inputs, "timeout_s": cfg.timeout_s,
            "startup_timeout_s": cfg.startup_timeout_s, "depth": cfg.depth,
            "threads": {d: int(n) for d, n in cfg.threads.items() if d in devices},
            "kinds": {d: k for d, k in cfg.kinds.items() if d in devices}, "cpu_only": cfg.cpu_only,
            "delays_s": {r: dict(v) for r, v in cfg.delays_s.items() if r in {str(x) for x in ranks}}}


def steps_per_input(manifest: Manifest, ranks: list[int]) -> int:
    """Segments and message ends the ranks keep a record of per input."""
    return sum(len(manifest.worker(r).segments) + len(manifest.sent_by(r)) + len(manifest.received_by(r))
               for r in ranks)


def check_inputs(inputs: int, steps: int, what: str) -> None:
    """Refuse ``inputs`` whose per-input bookkeeping (``steps`` records each) would not fit in memory."""
    need = inputs * max(1, steps) * BYTES_PER_STEP
    budget = memory_budget()
    if need > budget:
        raise PeerConfigError(f"{what} {inputs:,}: streaming that many inputs would need about {need / 2**30:,.1f} "
                              f"GiB here for its bookkeeping, over the {budget / 2**30:,.1f} GiB allowed; "
                              "stream fewer inputs")


class PeerChecker:
    """Checks of a document a peer sent (``what``: the driver's configuration, a generation's job), each
    failure a PeerConfigError naming the worker, the document and the field."""

    def __init__(self, who: str, what: str = "configuration"):
        self.who, self.what = who, what

    def refuse(self, why: str) -> PeerConfigError:
        return PeerConfigError(f"{self.who}: the driver's {self.what} {why}; refused")

    def fail(self, field: str, why: str) -> PeerConfigError:
        return self.refuse(f"field {field!r} {why}")

    def whole(self, field: str, v: Any, low: int, high: int) -> int:
        if type(v) is not int or not low <= v <= high:
            raise self.fail(field, f"is {v!r:.60}, not a whole number in {low}..{high:,}")
        return v

    def seconds(self, field: str, v: Any, low: float, high: float, open_low: bool) -> float:
        ok = type(v) in (int, float) and math.isfinite(v) and (v > low if open_low else v >= low) and v <= high
        if not ok:
            raise self.fail(field, f"is {v!r:.60}, not a number of seconds in {'(' if open_low else '['}{low:g}, "
                                   f"{high:g}]")
        return float(v)

    def mapping(self, field: str, v: Any) -> dict:
        if not isinstance(v, dict):
            raise self.fail(field, f"is a {type(v).__name__}, not an object")
        return v

    def items(self, field: str, v: Any, low: int, high: int) -> list:
        if not isinstance(v, list) or not low <= len(v) <= high:
            raise self.fail(field, f"is not a list of {low}..{high:,} items")
        return v

    def wholes(self, field: str, v: Any, count: tuple[int, int], low: int, high: int) -> list[int]:
        """A list of ``count[0]..count[1]`` whole numbers, each in ``low..high``."""
        for i, x in enumerate(self.items(field, v, *count)):
            self.whole(f"{field}[{i}]", x, low, high)
        return v


def worker_config(doc: Any, job: Launchable, ranks: list[int], *, steps: int, who: str, manifest_path: str,
                  token: str, master_addr: str, master_port: int, addr: str, cores: int | None = None) -> RunConfig:
    """The worker's own RunConfig for ``ranks`` of ``job`` (which keep ``steps`` records per input): the
    checked fields of the driver's ``doc``, the rest its own."""
    c = PeerChecker(who)
    if not isinstance(doc, dict):
        raise PeerConfigError(f"{who}: the driver's configuration is a {type(doc).__name__}, not an object; refused")
    never = sorted(k for k in doc if k in NEVER)
    if never:
        raise PeerConfigError(f"{who}: the driver's configuration sets {', '.join(never)}, which a worker never takes "
                              f"from a peer ({'; '.join(NEVER[k] for k in never)}); refused")
    unknown = sorted(str(k) for k in doc if k not in TAKEN and k != "format")
    if unknown:
        raise PeerConfigError(f"{who}: the driver's configuration has fields a worker does not take: "
                              f"{', '.join(repr(k) for k in unknown)[:300]}; refused")
    if doc.get("format") != FORMAT:
        raise c.fail("format", f"is {doc.get('format')!r:.60}, not {FORMAT!r} (install the same hetsplit on every "
                               "host)")
    missing = [k for k in TAKEN if k not in doc]
    if missing:
        raise PeerConfigError(f"{who}: the driver's configuration lacks {', '.join(missing)}; refused")
    inputs = c.whole("inputs", doc["inputs"], 1, MAX_INPUTS)
    check_inputs(inputs, steps, f"{who}: the driver's configuration field 'inputs' is")
    devices = {job.worker(r).device for r in range(job.world_size)}
    threads = {}
    for d, n in c.mapping("threads", doc["threads"]).items():
        if d not in devices:
            raise c.fail("threads", f"names {d!r:.60}, not a device of the run")
        threads[d] = min(c.whole(f"threads.{d}", n, 1, MAX_THREADS), cores or len(os.sched_getaffinity(0)))
    kinds = {}
    for d, k in c.mapping("kinds", doc["kinds"]).items():
        if d not in devices or k not in ("cpu", "gpu"):
            raise c.fail("kinds", f"maps {d!r:.60} to {k!r:.60}; it maps the run's devices to 'cpu' or 'gpu'")
        kinds[d] = k
    if type(doc["cpu_only"]) is not bool:
        raise c.fail("cpu_only", f"is {doc['cpu_only']!r:.60}, not true or false")
    delays: dict[str, dict[str, float]] = {}
    world = job.world_size
    for r, peers in c.mapping("delays_s", doc["delays_s"]).items():
        if r not in {str(x) for x in ranks}:
            raise c.fail("delays_s", f"names rank {r!r:.60}, not a rank of this worker")
        delays[r] = {}
        for p, s in c.mapping(f"delays_s.{r}", peers).items():
            if not (isinstance(p, str) and p.isdigit() and int(p) < world):
                raise c.fail(f"delays_s.{r}", f"names peer {p!r:.60}, not a rank of the run")
            delays[r][p] = c.seconds(f"delays_s.{r}.{p}", s, 0.0, MAX_DELAY_S, open_low=False)
    timeout = c.seconds("timeout_s", doc["timeout_s"], 0.0, MAX_TIMEOUT_S, open_low=True)
    startup = c.seconds("startup_timeout_s", doc["startup_timeout_s"], 0.0, MAX_TIMEOUT_S, open_low=True)
    return RunConfig(manifest_path, inputs=inputs, latency_inputs=c.whole("latency_inputs", doc["latency_inputs"], 0,
                                                                          inputs),
                     timeout_s=timeout, startup_timeout_s=startup, master_addr=master_addr, master_port=master_port,
                     token=token, launcher_serves=True, depth=c.whole("depth", doc["depth"], 1, MAX_DEPTH),
                     threads=threads, kinds=kinds, cpu_only=doc["cpu_only"], addrs={str(r): addr for r in ranks},
                     delays_s=delays)


def remote_ranks(doc: Any, job: Launchable, who: str) -> dict[str, int]:
    """The driver's map of devices on other hosts to their ranks, checked against the run's ranks."""
    if not isinstance(doc, dict) or not doc:
        raise PeerConfigError(f"{who}: the driver's 'remote' map is {type(doc).__name__} {doc!r:.60}, not an object of "
                              "devices to ranks; refused")
    out: dict[str, int] = {}
    for d, r in doc.items():
        ok = type(r) is int and 1 <= r < job.world_size and job.worker(r).device == d
        if not ok:
            raise PeerConfigError(f"{who}: the driver's 'remote' map sends device {d!r:.60} to rank {r!r:.60}, which "
                                  "is not that device's rank in the run; refused")
        out[d] = r
    return out
