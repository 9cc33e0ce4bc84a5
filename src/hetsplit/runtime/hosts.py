"""Runs across hosts, torchrun style: one command per host, all meeting at the driver's rendezvous.

``--hosts "cpu0=10.0.0.1,gpu0=10.0.0.2"`` places devices on hosts (devices not named run on the
first host listed, which also runs the driver and serves the rendezvous on ``--port``). Each host
runs ``hetsplit run ... --node HOST``: it starts the ranks placed on it, binding their sockets to
HOST, and supervises them. Every host needs the same split directory at the same path.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Manifest

DEFAULT_PORT = 29500


@dataclass
class HostMap:
    """Which host each rank runs on; the first host runs the driver."""

    master: str
    by_device: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> "HostMap":
        pairs, first = {}, None
        for item in [x.strip() for x in text.split(",") if x.strip()]:
            if "=" not in item:
                raise RuntimeFailure(f"--hosts: {item!r} is not DEVICE=HOST; write e.g. cpu0=10.0.0.1,gpu0=10.0.0.2")
            dev, host = (x.strip() for x in item.split("=", 1))
            pairs[dev] = host
            first = first or host
        if not pairs:
            raise RuntimeFailure("--hosts is empty; write DEVICE=HOST pairs separated by commas")
        return cls(first, pairs)

    def host_of(self, manifest: Manifest, rank: int) -> str:
        return self.master if rank == 0 else self.by_device.get(manifest.worker(rank).device, self.master)

    def check(self, manifest: Manifest) -> None:
        devices = {w.device for w in manifest.stages}
        unknown = sorted(set(self.by_device) - devices)
        if unknown:
            raise RuntimeFailure(f"--hosts names devices {unknown} that the plan does not use; "
                                 f"it uses {sorted(devices)}")

    def hosts(self, manifest: Manifest) -> list[str]:
        return list(dict.fromkeys(self.host_of(manifest, r) for r in range(manifest.world_size)))

    def ranks_on(self, manifest: Manifest, host: str) -> list[int]:
        ranks = [r for r in range(manifest.world_size) if self.host_of(manifest, r) == host]
        if not ranks:
            raise RuntimeFailure(f"--node {host}: no device of the plan is placed on this host; hosts are "
                                 f"{self.hosts(manifest)}")
        return ranks

    def addrs(self, manifest: Manifest) -> dict[str, str]:
        return {str(r): self.host_of(manifest, r) for r in range(manifest.world_size)}


def node_commands(base_argv: list[str], hostmap: HostMap, manifest: Manifest, port: int) -> dict[str, str]:
    """The command each host runs (``base_argv`` is this command line without --node/--port/--ssh)."""
    return {h: shlex.join(base_argv + ["--node", h, "--port", str(port)]) for h in hostmap.hosts(manifest)}
