"""What one run measured, as types: ``RunReport`` (end to end), ``DeviceRun`` (per device), ``HopRun`` (per
message), ``LinkRun`` (per link), ``Verification`` and ``EmulatedRun``; how it was shaped: ``LinkShaping`` and
``DeviceShaping`` (set-up, not measurements). SI units throughout.

``RunReport.to_dict`` is the ``hetsplit.run.report/1`` JSON (``hetsplit run --out`` without ``--compare``;
docs/architecture.md, Formats) and ``RunReport.from_dict`` reads it back, also from files written before the
format had its ``format`` key. ``runtime.measure.summarize`` makes a report from the ranks' records.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from hetsplit.errors import RuntimeFailure

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

FORMAT = "hetsplit.run.report/1"
T = TypeVar("T", bound="DataclassInstance")


def _read(cls: type[T], doc: Any, where: str, keys: dict[str, str] | None = None) -> T:
    """``cls`` from a JSON object: every field without a default must be there (JSON name: ``keys`` maps a
    field to another name); unknown keys are ignored (later versions add optional keys)."""
    keys = keys or {}
    if not isinstance(doc, dict):
        raise RuntimeFailure(f"{where}: expected a JSON object, found {type(doc).__name__}")
    required = [f for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [keys.get(f.name, f.name) for f in required if keys.get(f.name, f.name) not in doc]
    if missing:
        raise RuntimeFailure(f"{where}: not a run report of `hetsplit run --out` (it lacks {', '.join(missing)}); "
                             "give that file")
    return cls(**{f.name: doc[keys.get(f.name, f.name)] for f in dataclasses.fields(cls)
                  if keys.get(f.name, f.name) in doc})


@dataclass(frozen=True)
class DeviceRun:
    """One device's worker: compute (median wall time of its segments per steady input, and their mean),
    CPU (its process's, every thread; and with one compute thread the CPU inside its sub-models), idle time
    waiting for messages, bytes per input (``*_workers_bytes``: between workers only, what the plan's
    TaskGraph counts), the median time of its sends, peak memory, and energy where a meter was read."""

    device: str
    compute_s: float
    compute_mean_s: float
    rank: int = 0
    segments: int = 1
    threads: int = 1
    kind: str = "cpu"
    executor: str | None = None
    cpu_per_input_s: float | None = None
    compute_cpu_per_input_s: float | None = None
    idle_s: float = 0.0
    recv_bytes: int = 0
    send_bytes: int = 0
    recv_workers_bytes: int = 0
    send_workers_bytes: int = 0
    send_s: float = 0.0
    peak_rss_bytes: int = 0
    energy_j: float | None = None        # per input, from the device's meter
    energy_meter: str | None = None      # the meter read, or why none was

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "a device") -> "DeviceRun":
        return _read(cls, doc, where)


_ENDS = {"src": "from", "dst": "to"}


@dataclass(frozen=True)
class HopRun:
    """One message (``src`` -> ``dst``): its bytes beside the TaskGraph's, the tensors it carries, and its wire
    time per input (once both ends were ready and the link free; ``wire_s`` the median of the steady inputs)."""

    src: str
    dst: str
    nbytes: int
    wire_s: float
    payload: str = ""
    collective: str | None = None        # gather, scatter, ... (None: point to point)
    plan_nbytes: float | None = None   # what the plan's TaskGraph counts (None: not known)
    tensors: list[str] = field(default_factory=list)
    wire_all_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {_ENDS.get(k, k): v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, doc: Any, where: str = "a hop") -> "HopRun":
        return _read(cls, doc, where, _ENDS)


@dataclass(frozen=True)
class LinkRun:
    """One link (``src`` -> ``dst``) per input: the bytes and messages on it, the sum of their mean wire times."""

    src: str
    dst: str
    nbytes: int
    messages: int
    wire_mean_s: float

    def to_dict(self) -> dict[str, Any]:
        return {_ENDS.get(k, k): v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, doc: Any, where: str = "a link") -> "LinkRun":
        return _read(cls, doc, where, _ENDS)


@dataclass(frozen=True)
class Verification:
    """Every output checked against the unsplit model: how many, the largest errors, where the largest was."""

    outputs_checked: int
    max_abs_err: float
    max_rel_err: float = 0.0
    worst: str | None = None
    atol: float = 0.0
    rtol: float = 0.0
    ok: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "verify") -> "Verification | None":
        """None for an empty object (a run that did not verify)."""
        return None if doc in ({}, None) else _read(cls, doc, where)


@dataclass(frozen=True)
class EmulatedRun:
    """A device-emulated run brought back to emulated time: measured / ``dilation`` (``--emulate-devices``)."""

    dilation: float
    throughput: float
    latency_s: float
    latency_loaded_s: float
    compute_s: dict[str, float]          # device -> its compute per input

    @classmethod
    def of(cls, report: "RunReport", dilation: float) -> "EmulatedRun":
        """``report``'s throughput, latencies and per-device compute brought back to emulated time."""
        return cls(dilation, report.throughput * dilation, report.latency_s / dilation,
                   report.latency_loaded_s / dilation, {d.device: d.compute_s / dilation for d in report.devices})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "emulated") -> "EmulatedRun":
        if isinstance(doc, dict) and "dilation" not in doc:     # written before it carried its dilation
            doc = {**doc, "dilation": 1.0}
        return _read(cls, doc, where)


@dataclass(frozen=True)
class ShapedLink:
    """One rank-to-rank link whose bandwidth was shaped (bytes per second)."""

    from_rank: int
    to_rank: int
    bandwidth: float

    @classmethod
    def from_dict(cls, doc: Any, where: str = "a shaped link") -> "ShapedLink":
        return _read(cls, doc, where)


@dataclass(frozen=True)
class LinkShaping:
    """How a run's links were emulated (``runtime.netem``): network namespaces made, how delays were applied
    (``tc netem`` or in-process), and the links whose bandwidth was shaped."""

    namespaces: int
    delay: str
    shaped: list[ShapedLink] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "emulation") -> "LinkShaping":
        plain = _read(cls, doc, where)
        return dataclasses.replace(plain, shaped=_items(ShapedLink, doc, "shaped", where))


@dataclass(frozen=True)
class CpuGroup:
    """One worker rank's cgroup: its share of one core, as the quota per period written."""

    share: float
    quota_us: int
    period_us: int


@dataclass(frozen=True)
class DeviceShaping:
    """How a run's devices were emulated (``runtime.device_emulation``): the time dilation, each device's CPU
    share, where the host's costs came from, and how the shares were applied: by the cgroups (by rank) of
    ``runtime.cpu_throttle``, or paced by each worker (``runtime.pacing``: ``paced``, no cgroups)."""

    dilation: float
    shares: dict[str, float]
    host: str = ""
    cgroup: str = ""                                   # the cpu controller's version: v1 or v2 ("" paced)
    period_us: int = 0
    groups: dict[str, CpuGroup] = field(default_factory=dict)
    paced: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "device_emulation") -> "DeviceShaping":
        plain = _read(cls, doc, where)
        groups = doc.get("groups") or {}
        if not isinstance(groups, dict):
            raise RuntimeFailure(f"{where}: 'groups' must be an object of rank -> cgroup")
        return dataclasses.replace(plain, groups={str(r): _read(CpuGroup, g, f"{where}, groups[{r}]")
                                                  for r, g in groups.items()})


@dataclass(frozen=True)
class RunReport:
    """What one run measured (SI units), plus the verification result.

    ``throughput`` is the spacing of the streamed outputs, ``stream_throughput`` the streamed inputs over
    first sent to last output; ``latency_s`` the median unloaded latency (the first inputs one at a time;
    of two or more, the first, which warms the run up, left out), ``latency_loaded_s`` while streaming; ``stage_bound_throughput`` 1 / max(mean stage compute, mean link
    wire time) while streaming, set by ``stage_bound_by``. ``emulation`` and ``device_emulation`` describe
    how links and devices were shaped (``runtime.netem``, ``runtime.cpu_throttle``): set-up, not measurements.
    """

    model: str
    devices: list[DeviceRun]
    hops: list[HopRun]
    inputs: int
    throughput: float
    latency_s: float
    latency_loaded_s: float
    latencies_s: list[float]
    verify: Verification | None
    stage_bound_throughput: float
    plan_kind: str = "mapping"           # pipeline | mapping
    stage_bound_by: str = ""
    links: list[LinkRun] = field(default_factory=list)
    stream_throughput: float | None = None
    driver_cpu_per_input_s: float | None = None
    run_dir: str | None = None           # where the logs and records were kept (None: a temporary folder)
    removed_leftovers: list[str] = field(default_factory=list)
    emulation: LinkShaping | None = None
    device_emulation: DeviceShaping | None = None
    emulated: EmulatedRun | None = None
    in_flight: int = 1                   # inputs the plan keeps in flight at most (``runtime.rounds.in_flight``)

    def device(self, name: str) -> DeviceRun | None:
        return next((d for d in self.devices if d.device == name), None)

    @property
    def over_stage_bound(self) -> float:
        """Measured throughput / the stage bound, uncapped (0 without a bound)."""
        return self.throughput / self.stage_bound_throughput if self.stage_bound_throughput > 0 else 0.0

    @property
    def pipeline_efficiency(self) -> float:
        """How close the stream came to the stage bound, at most 1: a throughput above the bound means
        the bound under-counts the pipeline (``efficiency_note`` says why), not an efficiency above 100%."""
        return min(1.0, self.over_stage_bound)

    def efficiency_note(self) -> str | None:
        """Why the pipeline efficiency is capped, when measured throughput exceeds the stage bound: outputs
        that came in a burst (the whole stream, first input sent to last output, kept within the bound), or
        spans that overlap."""
        if self.over_stage_bound <= 1.0:
            return None
        by = self.stage_bound_by or "the slowest stage or hop"
        head = (f"measured throughput {self.throughput:.4g}/s is {self.over_stage_bound:.2f}x the stage bound "
                f"{self.stage_bound_throughput:.4g}/s (1 / mean time per input of {by}), so pipeline efficiency "
                "shows 100%: ")
        stream = self.stream_throughput
        if stream is not None and stream <= self.stage_bound_throughput:
            return head + (f"the outputs reached the driver in a burst, so their spacing overstates the rate. Over "
                           f"the whole stream (first streamed input sent to last output) it ran at {stream:.4g}/s: "
                           f"{self.inputs} inputs are too few for a steady state of this plan; stream more (-n)")
        return head + ("the bound averages each input's span, and spans that overlap (several transfers in "
                       "flight on one link, or a wire time that includes waiting for its peer) add up to more than "
                       "the time the resource was busy")

    def depth_note(self) -> str | None:
        """What a stream too short for the plan measured: a plan that hands each input between its devices
        many times keeps that many inputs in flight (``in_flight``), and a stream of fewer than twice as
        many fills and drains without a steady state, so its throughput is not the plan's."""
        if self.inputs >= 2 * self.in_flight:
            return None
        return (f"this plan keeps up to {self.in_flight} inputs in flight (each input crosses between its devices "
                f"{self.in_flight - 1} times, a round each); {self.inputs} inputs only fill and drain it, so the "
                f"throughput figures are not its steady state: stream at least {2 * self.in_flight} (-n)")

    def to_dict(self) -> dict[str, Any]:
        """The ``hetsplit.run.report/1`` JSON (with the derived efficiency figures, for readers of the file)."""
        doc: dict[str, Any] = {
            "format": FORMAT, "model": self.model, "plan_kind": self.plan_kind, "inputs": self.inputs,
            "throughput": self.throughput, "latency_s": self.latency_s, "latency_loaded_s": self.latency_loaded_s,
            "latencies_s": list(self.latencies_s), "stage_bound_throughput": self.stage_bound_throughput,
            "stage_bound_by": self.stage_bound_by, "pipeline_efficiency": self.pipeline_efficiency,
            "over_stage_bound": self.over_stage_bound, "efficiency_note": self.efficiency_note(),
            "verify": self.verify.to_dict() if self.verify is not None else {},
            "devices": [d.to_dict() for d in self.devices], "hops": [h.to_dict() for h in self.hops],
            "links": [x.to_dict() for x in self.links], "run_dir": self.run_dir}
        optional = {"stream_throughput": self.stream_throughput, "driver_cpu_per_input_s": self.driver_cpu_per_input_s,
                    "in_flight": self.in_flight if self.in_flight > 1 else None, "depth_note": self.depth_note(),
                    "removed_leftovers": self.removed_leftovers or None,
                    "emulation": self.emulation.to_dict() if self.emulation is not None else None,
                    "device_emulation": self.device_emulation.to_dict() if self.device_emulation is not None else None,
                    "emulated": self.emulated.to_dict() if self.emulated is not None else None}
        doc.update({k: v for k, v in optional.items() if v is not None})
        return doc

    @classmethod
    def from_dict(cls, doc: Any, where: str = "the run's JSON") -> "RunReport":
        """A report back from ``to_dict`` (a run's ``--out`` JSON without ``--compare``); ``where`` names the
        document in errors. A ``format`` other than ``hetsplit.run.report/1`` is refused; none is read as it."""
        if isinstance(doc, dict) and doc.get("format", FORMAT) != FORMAT:
            raise RuntimeFailure(f"{where}: format {doc['format']!r} is not {FORMAT}; give the JSON of "
                                 "`hetsplit run --out`")
        missing = [k for k in _REQUIRED if k not in doc] if isinstance(doc, dict) else []
        if missing:
            raise RuntimeFailure(f"{where}: not a run report of `hetsplit run --out` (it lacks {', '.join(missing)}); "
                                 "give that file")
        plain = _read(_Plain, doc, where)
        emulated, links, devices = doc.get("emulated"), doc.get("emulation"), doc.get("device_emulation")
        return cls(**dataclasses.asdict(plain), devices=_items(DeviceRun, doc, "devices", where),
                   emulation=LinkShaping.from_dict(links, f"{where}, emulation") if links else None,
                   device_emulation=DeviceShaping.from_dict(devices, f"{where}, device_emulation") if devices else None,
                   hops=_items(HopRun, doc, "hops", where), links=_items(LinkRun, doc, "links", where),
                   verify=Verification.from_dict(doc.get("verify") or {}, f"{where}, verify"),
                   emulated=EmulatedRun.from_dict(emulated, f"{where}, emulated") if emulated else None)


def _items(kind: Any, doc: dict[str, Any], key: str, where: str) -> list[Any]:
    """``doc[key]``, a list of ``kind``'s JSON objects (absent: none)."""
    items = doc.get(key) or []
    if not isinstance(items, list):
        raise RuntimeFailure(f"{where}: '{key}' must be a list of objects")
    return [kind.from_dict(x, f"{where}, {key}[{i}]") for i, x in enumerate(items)]


_REQUIRED = ("model", "devices", "hops", "inputs", "throughput", "latency_s", "latency_loaded_s", "latencies_s",
             "verify", "stage_bound_throughput")


@dataclass(frozen=True)
class _Plain:
    """The report's scalar fields as JSON holds them (``RunReport.from_dict``)."""

    model: str
    inputs: int
    throughput: float
    latency_s: float
    latency_loaded_s: float
    latencies_s: list[float]
    stage_bound_throughput: float
    plan_kind: str = "mapping"
    stage_bound_by: str = ""
    stream_throughput: float | None = None
    driver_cpu_per_input_s: float | None = None
    run_dir: str | None = None
    removed_leftovers: list[str] = field(default_factory=list)
    in_flight: int = 1
