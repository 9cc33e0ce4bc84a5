"""RunConfig: what every process of one run is told (written as JSON into the run directory)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hetsplit.runtime.rendezvous import new_token


@dataclass
class RunConfig:
    """Settings shared by the driver and the workers of one run (SI units)."""

    manifest: str                      # path of manifest.json
    inputs: int = 8                    # inputs streamed through the devices
    latency_inputs: int = 2            # the first ones go one at a time (unloaded latency)
    timeout_s: float = 60.0            # longest wait for a tensor or a peer before the run fails
    startup_timeout_s: float = 120.0   # rendezvous and sub-model loading
    master_addr: str = "127.0.0.1"     # where the driver serves the rendezvous store
    master_port: int = 0               # 0: the driver picks a free port and writes it to port.txt
    token: str = field(default_factory=new_token)   # the run's identity at the rendezvous (runtime.rendezvous)
    launcher_serves: bool = False      # the launcher serves the rendezvous (a run across hosts), not the driver
    seed: int = 0
    depth: int = 2                     # receive frames in flight per process
    threads: dict[str, int] = field(default_factory=dict)      # device -> compute threads (default 1)
    kinds: dict[str, str] = field(default_factory=dict)        # device -> cpu | gpu (default cpu)
    cpu_only: bool = False             # every device computes on the CPU, whatever its kind
    addrs: dict[str, str] = field(default_factory=dict)        # rank -> address its sockets bind to
    delays_s: dict[str, dict[str, float]] = field(default_factory=dict)  # rank -> peer rank -> link latency
    atol: float = 1e-4                 # verification: |split - whole| <= atol + rtol * max|whole|
    rtol: float = 1e-3
    verify: bool = True
    cpus: dict[str, list[int]] = field(default_factory=dict)  # rank -> CPUs it is pinned to (none: not pinned)
    faults: dict[str, dict] = field(default_factory=dict)   # rank -> {"kind": die|stall, "after": k rounds}: rehearsals
    cgroups: dict[str, str] = field(default_factory=dict)   # rank -> cgroup.procs it joins once connected (throttling)
    paces: dict[str, list[float]] = field(default_factory=dict)   # LLM stage rank -> [prompt, decode] CPU share (pacing)

    def joins_cgroup(self, rank: int) -> bool:
        """Whether rank ``rank`` joins a CPU-throttling cgroup (only a child of the run's launcher may)."""
        return bool(self.cgroups.get(str(rank)))

    def addr(self, rank: int) -> str:
        return self.addrs.get(str(rank), self.master_addr)

    def delay(self, rank: int, peer: int) -> float:
        return float(self.delays_s.get(str(rank), {}).get(str(peer), 0.0))

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(asdict(self), indent=1))
        return p

    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        return cls(**json.loads(Path(path).read_text()))
