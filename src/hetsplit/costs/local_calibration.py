"""The ``local`` cluster's costs, measured on this machine on first use and cached per machine.

A quick calibration (a few seconds): the probe models (``CalibrationOptions.probes``, small zoo CNNs,
one CIFAR, one ImageNet) are profiled here as a pipeline worker runs them (one onnxruntime thread,
``co_load`` other cores running the probe meanwhile, median wall time; ``profiler.profile_model``),
and the shipped per-class fit of ``REFERENCE`` (``hetsplit calibrate``'s model, fitted on 16 models
on an idle machine) is rescaled to them: one factor, the probes' measured whole-model time over the
fit's prediction. The reference fit knows how layer shapes cost; the factor says how fast this
machine is under load. The probes are measured in two rounds and each keeps its faster time (other
work only adds time). The probes are also timed alone (no co-load): ``unloaded_factor`` = alone / co-loaded, what one input sent
through an idle pipeline (latency) costs relative to a busy one. (Three factors, for the MAC, byte and fixed parts, fitted per layer were
tried: two probes on a noisy machine do not pin them down, and ResNet-50 came out 25% fast.)

The result is cached in ``cache_root()/local-calibration/`` keyed by CPU model, usable core count,
onnxruntime version and ``VERSION`` (``machine_key``) by ``calibration_store``: only when the machine
was quiet while calibrating (rounds that agree, no other process using the CPU), checked at use by a
short probe (``machine_probe.compute_probe_s``) and measured again when the machine has changed;
``local_costs(recalibrate=True)`` redoes it. When it cannot run (or ``$HETSPLIT_LOCAL_CALIBRATION=off``) the ``local`` devices keep the
roofline figures of ``cluster/builtin/local.yaml`` and ``costs_source`` says so.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hetsplit.costs import calibration_store, machine_probe
from hetsplit.errors import HetsplitError

VERSION = 4                                  # bump when the recipe changes: old cache entries are ignored
FOLDER = "local-calibration"                 # under cache_root()
REFERENCE = "epyc-milan-1t-calibrated"       # the shipped per-class fit that is rescaled
MODEL = "local"                              # device model name of the local cluster's cores
ENV = "HETSPLIT_LOCAL_CALIBRATION"           # "off": no calibration, roofline fallback
MAX_CO_LOAD = 3                              # helpers at most: many-core machines stay quick


@dataclass(frozen=True)
class CalibrationOptions:
    """What the quick calibration measures: probe models (zoo names or .onnx), runs, co-load
    (None: ``min(cores - 1, MAX_CO_LOAD)``, every core of a full pipeline busy), rounds (each probe
    keeps its fastest round; their spread tells a busy machine, ``calibration_store.BUSY_SPREAD``)."""

    probes: tuple[str, ...] = ("resnet18", "mobilenetv2")
    repeats: int = 10
    warmup: int = 2
    co_load: int | None = None
    rounds: int = 2


DEFAULT_OPTIONS = CalibrationOptions()


@dataclass
class LocalCalibration:
    """A calibration of this machine: the rescaled fit (calibrated model params) and how it was made."""

    key: dict[str, Any]
    created: str                              # ISO 8601, UTC
    scale: float                              # measured / reference, over the probes' whole-model times
    params: dict[str, Any]                    # coefficients, terms (the calibrated model's params)
    probes: list[dict[str, Any]]              # per probe: model, measured_s, reference_s
    co_load: int
    seconds: float                            # time the calibration took
    spread: float = 0.0                       # the rounds' largest relative difference on one probe
    unloaded_factor: float = 1.0              # probes alone / probes co-loaded (for latency)
    kept: str = "not cached"                  # where it is cached, or why not (``Trusted.describe``)
    busy: str = ""                            # why it was not cached: the machine was busy ("" when quiet)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("kept", "busy")}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "LocalCalibration":
        fields = ("key", "created", "scale", "params", "probes", "co_load", "seconds")
        return cls(**{k: doc[k] for k in fields}, spread=float(doc.get("spread", 0.0)),
                   unloaded_factor=float(doc.get("unloaded_factor", 1.0)))

    def source(self) -> str:
        k = self.key
        probes = ", ".join(p["model"] for p in self.probes)
        return (f"calibrated on this machine {self.created} ({k['cpu']}, {k['cores']} cores, onnxruntime "
                f"{k['onnxruntime']}; probes {probes}, 1 thread, co-load {self.co_load}; {REFERENCE} fit "
                f"x{self.scale:.2f}; alone x{self.unloaded_factor:.2f} of that); {self.kept}")


@dataclass
class LocalCosts:
    """What the ``local`` devices cost with: the calibration, or None and why (roofline fallback)."""

    calibration: LocalCalibration | None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        if self.calibration is not None:
            return self.calibration.source()
        return (f"FALLBACK: roofline figures of cluster/builtin/local.yaml (assumptions, not measured here; "
                f"{self.reason})")


# ---- the machine -------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_key() -> dict[str, Any]:
    """What a calibration holds for: CPU model, usable cores, onnxruntime version, recipe version."""
    from hetsplit.cluster.examples import usable_cores

    try:
        import onnxruntime

        ort = str(onnxruntime.__version__)
    except ImportError:
        ort = "absent"
    return {"cpu": cpu_model(), "cores": usable_cores(), "onnxruntime": ort, "version": VERSION}


def calibration_off() -> bool:
    """``$HETSPLIT_LOCAL_CALIBRATION`` turns every measurement of this machine off (tests, CI)."""
    return os.environ.get(ENV, "").lower() in ("off", "0", "no")


# ---- the calibration ---------------------------------------------------------------------------

def reference_params() -> dict[str, Any]:
    from hetsplit.cluster.presets import load_preset

    return dict(load_preset(REFERENCE).params)


def rescaled(params: dict[str, Any], scale: float) -> dict[str, Any]:
    """The reference fit's coefficients and terms times ``scale``."""
    return {"coefficients": {c: [float(x) * scale for x in v] for c, v in params["coefficients"].items()},
            "terms": {k: float(v) * scale for k, v in params.get("terms", {}).items()}}


def measure_probe(model: str, options: CalibrationOptions, co_load: int) -> Any:
    """One probe profiled here as a worker runs it: a ``calibration.Measured``."""
    from hetsplit.costs.calibration import measured_from_profile
    from hetsplit.costs.profiler import LOCAL_CPU, load_for_profiling, profile_model

    prof = profile_model(model, LOCAL_CPU, repeats=options.repeats, warmup=options.warmup, threads=1,
                         co_load=co_load)
    return measured_from_profile(prof, LOCAL_CPU, graph=load_for_profiling(model)[0])


def calibrate(options: CalibrationOptions = DEFAULT_OPTIONS, key: dict[str, Any] | None = None) -> LocalCalibration:
    """Measure the probes here and rescale the reference fit to them (see the module docstring)."""
    from hetsplit.costs.models.calibrated import predict

    key = key or machine_key()
    k = min(key["cores"] - 1, MAX_CO_LOAD) if options.co_load is None else options.co_load
    ref = reference_params()
    t0 = time.monotonic()
    loads = [max(0, k)] + ([0] if k > 0 else [])
    rounds = [[[measure_probe(p, options, load) for p in options.probes] for load in loads]
              for _ in range(max(1, options.rounds))]
    fastest = [[min(per, key=lambda m: m.whole_s) for per in zip(*(r[i] for r in rounds))] for i in range(len(loads))]
    spread = max((max(m.whole_s for m in per) / max(min(m.whole_s for m in per), 1e-30) - 1.0
                  for i in range(len(loads)) for per in zip(*(r[i] for r in rounds))), default=0.0)
    measured = fastest[0]
    reference = [float(predict(m.graph, ref["coefficients"], ref.get("terms")).sum()) for m in measured]
    scale = sum(m.whole_s for m in measured) / max(sum(reference), 1e-30)
    alone = sum(m.whole_s for m in fastest[-1]) / max(sum(m.whole_s for m in measured), 1e-30)
    probes = [{"model": m.name, "measured_s": float(m.whole_s), "reference_s": r} for m, r in zip(measured, reference)]
    return LocalCalibration(key, datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), scale,
                            rescaled(ref, scale), probes, max(0, k), time.monotonic() - t0, spread, alone)


def local_costs(recalibrate: bool = False, options: CalibrationOptions | None = None) -> LocalCosts:
    """This machine's calibration, one a process: from the cache (checked by a short probe), else
    measured now (cached when the machine was quiet; ``calibration_store``); ``recalibrate`` measures
    anew. Falls back (calibration None, with the reason) when it cannot measure."""
    if calibration_off():
        return LocalCosts(None, f"calibration turned off by ${ENV}")
    key = machine_key()

    def measure() -> tuple[LocalCalibration, float]:
        cal = calibrate(options or DEFAULT_OPTIONS, key)
        return cal, cal.spread

    recipe = calibration_store.Recipe(FOLDER, "hetsplit.local-calibration/2", key, measure, LocalCalibration.to_dict,
                                      LocalCalibration.from_dict, lambda: machine_probe.compute_probe_s())
    try:
        got = calibration_store.trusted(recipe, recalibrate)
    except (HetsplitError, ImportError, OSError) as exc:
        return LocalCosts(None, f"the calibration failed: {exc}")
    got.value.kept, got.value.busy = got.describe(), got.busy
    return LocalCosts(got.value, notes=got.notes)
