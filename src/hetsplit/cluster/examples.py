"""Built-in example clusters: the set-ups of the papers, as cluster specs (the YAML format, as dicts).

Each is loadable by name (``load_cluster("donna-2cpu-1gpu-1cim-hb-wcc")``) and printable as YAML
(``hetsplit clusters NAME --yaml``) to start a file of one's own.

- DONNA (seed 000): its four device sets {4 CPU}, {2 CPU, 2 GPU}, {2 CPU, 2 CIM},
  {2 CPU, 1 GPU, 1 CIM} on each medium of its Table I (pcie5, hb-wcc, lb-wcc); the single-GPU
  baseline; and the edge-CIM + cloud set-up (CIM devices on HB-WCC at the edge, a cloud GPU or
  CPU behind LB-WCC, inputs arriving at an edge device).
- The thesis (seed 003): 8 Jetson Xavier NX boards, CPU and GPU of each as 2 PEs (16 PEs),
  shared memory inside a board, Gigabit Ethernet between boards; and the 4-board (8-PE) cluster of
  Guo et al.'s hierarchical DSE (seed 004), on a Gigabit switch too.
- Bochem et al. (seed 002): 1 to 64 Siracusa chips on MIPI, in groups of four.
- Bougioukou & Antonakopoulos (seed 001): the IMC emulator, ``imce-N`` (N processing units, a
  third of them DPUs, at least one) and ``imce-N-k`` (k IMC units, N - k DPUs), for any N; the
  units share DRAM and signal each other by interrupts (medium ``imce-ipi``).
- Files in ``builtin/``: ``local``, this machine's own cores as devices (one per core it may use).
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from hetsplit.cluster.loader import CLUSTER_FORMAT
from hetsplit.errors import ClusterError
from hetsplit.jsonfile import read_yaml

BUILTIN_DIR = Path(__file__).parent / "builtin"

DONNA_MEDIA = ("pcie5", "hb-wcc", "lb-wcc")
DONNA_SETS = {  # device-set label -> [(device prefix, preset, count)]
    "4cpu": [("cpu", "xeon-w3323", 4)],
    "2cpu-2gpu": [("cpu", "xeon-w3323", 2), ("gpu", "rtx3070ti", 2)],
    "2cpu-2cim": [("cpu", "xeon-w3323", 2), ("cim", "neurosim-rram", 2)],
    "2cpu-1gpu-1cim": [("cpu", "xeon-w3323", 2), ("gpu", "rtx3070ti", 1), ("cim", "neurosim-rram", 1)],
}
DONNA_EDGE_CIMS = 4  # DONNA does not state how many edge CIM devices; four, like its device sets
JETSON_CLUSTERS = {8: "Thesis (seed 003)", 4: "Guo et al., hierarchical DSE (seed 004)"}  # boards -> paper
SIRACUSA_SIZES = (1, 2, 4, 8, 16, 32, 64)
SIRACUSA_GROUP = 4
IMCE_LISTED = (4, 8, 12, 16, 32)  # imce-N sizes listed by `hetsplit clusters`; any N loads by name
IMCE_NAME = re.compile(r"imce-(\d+)(?:-(\d+))?")
_DONNA = "DONNA (seed 000)"


def _devices(members: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{i}", "preset": preset} for prefix, preset, n in members for i in range(n)]


def _donna_set(label: str, medium: str) -> dict[str, Any]:
    return {"name": f"donna-{label}-{medium}",
            "description": f"{_DONNA} device set {{{label.replace('-', ', ')}}} joined by {medium} (Table I)",
            "devices": _devices(DONNA_SETS[label]), "links": {"default": medium}}


def _donna_edge_cloud(cloud: str, preset: str) -> dict[str, Any]:
    return {"name": f"donna-edge-{DONNA_EDGE_CIMS}cim-cloud-{cloud}",
            "description": (f"{_DONNA} Sec. IV-3, CIM as edge devices: {DONNA_EDGE_CIMS} CIM devices talk over "
                            f"HB-WCC, the cloud {cloud.upper()} sits behind LB-WCC; inputs arrive at cim0 "
                            f"(the number of edge devices is not stated in the paper; {DONNA_EDGE_CIMS} assumed)"),
            "devices": _devices([("cim", "neurosim-rram", DONNA_EDGE_CIMS), (cloud, preset, 1)]),
            "groups": {"edge": {"devices": [f"cim{i}" for i in range(DONNA_EDGE_CIMS)], "medium": "hb-wcc"},
                       "cloud": [f"{cloud}0"]},
            "links": {"default": "lb-wcc"},
            "source": "cim0"}


def _jetson(boards: int, paper: str, pes: tuple[str, ...] = ("cpu", "gpu")) -> dict[str, Any]:
    devices, groups = [], {}
    for b in range(boards):
        for pe in pes:
            devices.append({"name": f"nx{b}-{pe}", "preset": f"xavier-nx-{pe}", "memory": "4GiB"})
        if len(pes) > 1:
            groups[f"board{b}"] = {"devices": [f"nx{b}-{pe}" for pe in pes], "medium": "jetson-shm"}
    only = "" if len(pes) > 1 else f"-{pes[0]}"
    what = ("CPU and GPU of each as 2 PEs" if len(pes) > 1 else f"only the {pes[0].upper()} of each as a PE")
    spec = {"name": f"jetson-xavier-nx-{boards}{only}",
            "description": (f"{paper}: {boards} Jetson Xavier NX boards on a Gigabit switch, {what} "
                            f"({len(pes) * boards} PEs); jetson-shm inside a board, GbE between boards; each PE may "
                            "use 4 GiB of its board's 8 GiB (assumption: an even split); inputs arrive at "
                            f"nx0-{pes[0]}"),
            "devices": devices, "links": {"default": "gbe"}, "source": f"nx0-{pes[0]}"}
    if groups:
        spec["groups"] = groups
    return spec


def _siracusa(n: int) -> dict[str, Any]:
    chips = [f"chip{i}" for i in range(n)]
    groups = {f"quad{g}": {"devices": chips[g * SIRACUSA_GROUP:(g + 1) * SIRACUSA_GROUP], "medium": "mipi"}
              for g in range((n + SIRACUSA_GROUP - 1) // SIRACUSA_GROUP)}
    return {"name": f"siracusa-{n}",
            "description": (f"Bochem et al. (seed 002): {n} Siracusa chip(s) joined by MIPI (0.5 GB/s, 100 pJ/B), "
                            f"one MIPI port per chip (its messages in and out take turns), in groups of "
                            f"{SIRACUSA_GROUP} for hierarchical reduction; inputs arrive at chip0"),
            "devices": [{"name": c, "preset": "siracusa"} for c in chips],
            "groups": groups, "links": {"default": "mipi", "ports": "shared"}, "source": "chip0"}


def imce_default_imc(units: int) -> int:
    """IMC units of ``imce-N``: two thirds of the units, leaving at least one DPU (12 -> 8 IMC + 4 DPU,
    the set-up of the paper's Table I)."""
    return units - max(1, round(units / 3))


def _imce(units: int, imc: int | None = None) -> dict[str, Any]:
    from hetsplit.errors import ClusterError

    explicit = imc is not None
    imc = imce_default_imc(units) if imc is None else imc
    if units < 1 or not 0 <= imc <= units:
        raise ClusterError(f"imce-{units}{f'-{imc}' if explicit else ''}: need N >= 1 units and 0 <= k <= N IMC units")
    dpus = units - imc
    name = f"imce-{units}-{imc}" if explicit else f"imce-{units}"
    return {"name": name,
            "description": (f"Bougioukou & Antonakopoulos (seed 001): IMC emulator with {units} processing unit(s), "
                            f"{imc} IMC (conv and matrix-vector products with ReLU/SiLU only) and {dpus} DPU "
                            "(every layer, convolutions slowly); tensors in shared DRAM, messages by interrupt"),
            "devices": ([{"name": "imc", "preset": "imce-imc", "count": imc}] if imc else [])
                       + ([{"name": "dpu", "preset": "imce-dpu", "count": dpus}] if dpus else []),
            "links": {"default": "imce-ipi"}}


def _build() -> dict[str, dict[str, Any]]:
    specs = [_donna_set(label, medium) for label in DONNA_SETS for medium in DONNA_MEDIA]
    specs.append({"name": "donna-1gpu", "description": f"{_DONNA} baseline: one RTX 3070 Ti runs the whole model",
                  "devices": [{"name": "gpu0", "preset": "rtx3070ti"}]})
    specs += [_donna_edge_cloud("gpu", "rtx3070ti"), _donna_edge_cloud("cpu", "xeon-w3323")]
    specs += [_jetson(boards, paper) for boards, paper in JETSON_CLUSTERS.items()]
    specs.append(_jetson(8, JETSON_CLUSTERS[8], ("cpu",)))      # the thesis's CPU-only experiments
    specs += [_siracusa(n) for n in SIRACUSA_SIZES]
    specs += [_imce(n) for n in IMCE_LISTED]
    specs += [_from_file(path) for path in sorted(BUILTIN_DIR.glob("*.yaml"))]
    return {s["name"]: {"format": CLUSTER_FORMAT, **s} for s in specs}


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _from_file(path: Path) -> dict[str, Any]:
    """A built-in kept as a YAML file; ``local`` gets one device per usable core of this machine."""
    spec: dict[str, Any] = read_yaml(path, ClusterError, "no such built-in cluster file")
    if spec.get("name") == "local":
        spec["devices"][0]["count"] = usable_cores()
    return spec


_BUILTIN = _build()


def builtin_names() -> list[str]:
    """Names of the listed built-in clusters, in a stable order (DONNA, Jetson, Siracusa, IMCE);
    ``imce-N`` and ``imce-N-k`` load for any N (see ``is_builtin``)."""
    return list(_BUILTIN)


def is_builtin(name: str) -> bool:
    """A listed built-in, or an ``imce-N`` / ``imce-N-k`` family member."""
    return name in _BUILTIN or IMCE_NAME.fullmatch(name) is not None


def builtin_spec(name: str) -> dict[str, Any]:
    """A copy of a built-in cluster's spec (the YAML format as a dict)."""
    from hetsplit.errors import ClusterError

    if name in _BUILTIN:
        return copy.deepcopy(_BUILTIN[name])
    m = IMCE_NAME.fullmatch(name)
    if m:
        return {"format": CLUSTER_FORMAT, **_imce(int(m[1]), None if m[2] is None else int(m[2]))}
    raise ClusterError(f"unknown built-in cluster {name!r}; built-ins are: {', '.join(_BUILTIN)} "
                       "(and imce-N, imce-N-k for any N)")


def spec_presets(spec: dict[str, Any]) -> list[str]:
    """The device presets a spec names (to tell which presets a built-in needs)."""
    return sorted({d["preset"] for d in spec["devices"] if "preset" in d})
