"""Link emulation on one machine: one network namespace per process, a veth pair per pair of
processes, shaped with ``tc`` so each link runs at its modelled bandwidth (and delay).

Each process's namespace owns one address on its loopback (``10.213.0.<rank+1>``); a host route
sends traffic for every peer's address through the veth joining the two, and an htb class on that
veth caps the rate at the link's bandwidth. The delay goes on a netem qdisc where the kernel has
one; where it does not, the sender of each edge sleeps the link latency before each message, which
is what the cost model charges (``latency + bytes / bandwidth`` per transfer). Needs root and
``ip``/``tc``: ``emulation_available()`` says why not. Everything created is removed on exit.

Namespaces are named ``hetsplit-<pid>-<tag>-r<rank>`` (``runtime.netns_cleanup``), ``pid`` being the
process that runs the emulation; veths ``hs<tag><i>v<j>`` (at most 15 characters), only ever inside
those namespaces. A run killed before it could delete them leaves them behind: every run starts by
removing the namespaces and cgroups of runs whose process is gone (``runtime.leftovers``; so does
``hetsplit doctor``).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import Manifest
from hetsplit.runtime.netns_cleanup import namespace_name, remove_stale_namespaces
from hetsplit.runtime.report import LinkShaping, ShapedLink

SUBNET = "10.213.0"
WIRE_OVERHEAD = 1514 / 1448  # Ethernet + IP + TCP (timestamps) headers per full frame


class Ranked(Protocol):
    """What the emulation reads of a run (a ``Manifest``, a pipeline job): how many processes it has."""

    @property
    def world_size(self) -> int: ...


@dataclass
class LinkMatrix:
    """Bandwidth (bytes/s; inf = unshaped) and latency (s) between ranks of a run."""

    bandwidth: np.ndarray
    latency_s: np.ndarray

    @classmethod
    def from_cluster(cls, manifest: Manifest, cluster) -> "LinkMatrix":
        """The cluster's links between the stages' devices; the driver's own links are left unshaped."""
        devices: list[str | None] = [None] * manifest.world_size
        for a in manifest.stages:
            devices[a.rank] = a.device
        return cls.between(devices, cluster)

    @classmethod
    def between(cls, devices: Sequence[str | None], cluster) -> "LinkMatrix":
        """The cluster's links between the devices the ranks stand for (rank r: ``devices[r]``; None, as the
        driver, and a device with itself: unshaped)."""
        w = len(devices)
        bw, lat = np.full((w, w), np.inf), np.zeros((w, w))
        for r, a in enumerate(devices):
            for q, b in enumerate(devices):
                if a is None or b is None:
                    continue
                i, j = cluster.index(a), cluster.index(b)
                if i != j:
                    bw[r, q], lat[r, q] = cluster.bandwidth[i, j], cluster.latency_s[i, j]
        return cls(bw, lat)

    def dilated(self, factor: float) -> "LinkMatrix":
        """These links slowed ``factor`` times (bandwidth / factor, latency x factor), to keep their ratio to
        compute under a device emulation's time dilation (``runtime.device_emulation``)."""
        return LinkMatrix(self.bandwidth / factor, self.latency_s * factor)

    @classmethod
    def uniform(cls, world: int, bandwidth: float, latency_s: float = 0.0, driver: bool = False) -> "LinkMatrix":
        """Every link between stages (and the driver's too, if ``driver``) at one bandwidth and latency."""
        bw, lat = np.full((world, world), bandwidth), np.full((world, world), latency_s)
        np.fill_diagonal(bw, np.inf)
        np.fill_diagonal(lat, 0.0)
        if not driver:
            bw[0, :] = bw[:, 0] = np.inf
            lat[0, :] = lat[:, 0] = 0.0
        return cls(bw, lat)


def emulation_available() -> str | None:
    """None when namespaces and tc can be used here, else the reason."""
    if os.geteuid() != 0:
        return "link emulation needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"link emulation needs the '{tool}' command (package iproute2)"
    probe = namespace_name(uuid.uuid4().hex[:6], "probe")
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _sh(*cmd: str) -> None:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeFailure(f"link emulation: `{' '.join(cmd)}` failed: {r.stderr.strip()}")


class Emulation:
    """Namespaces, veth pairs and tc shaping for one run (a context manager)."""

    def __init__(self, manifest: Manifest | Ranked, links: LinkMatrix):
        why = emulation_available()
        if why:
            raise RuntimeFailure(why)
        self.world = manifest.world_size
        self.links = links
        self.tag = uuid.uuid4().hex[:5]
        self.namespaces = [namespace_name(self.tag, f"r{r}") for r in range(self.world)]
        self.netem = False
        self.shaped: list[tuple[int, int, float]] = []
        self.removed_stale: list[str] = []

    def addr(self, rank: int) -> str:
        return f"{SUBNET}.{rank + 1}"

    def wrap(self, rank: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[rank]]

    def apply(self, cfg: RunConfig) -> Callable[[int], list[str]]:
        """Point a run's settings at these namespaces (each rank binds its own address, the rendezvous is
        rank 0's, the senders sleep the latencies netem cannot add); the prefix that starts a rank in its
        namespace."""
        cfg.master_addr = self.addr(0)
        cfg.addrs = {str(r): self.addr(r) for r in range(self.world)}
        cfg.delays_s = self.in_process_delays()
        return self.wrap

    def __enter__(self) -> "Emulation":
        self.removed_stale = remove_stale_namespaces()   # those of earlier runs that were killed
        try:
            for r, ns in enumerate(self.namespaces):
                _sh("ip", "netns", "add", ns)
                _sh("ip", "-n", ns, "link", "set", "lo", "up")
                _sh("ip", "-n", ns, "addr", "add", f"{self.addr(r)}/32", "dev", "lo")
            for i in range(self.world):
                for j in range(i + 1, self.world):
                    self._pair(i, j)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _veth(self, i: int, j: int) -> str:
        return f"hs{self.tag}{i}v{j}"

    def _pair(self, i: int, j: int) -> None:
        a, b = self._veth(i, j), self._veth(j, i)
        _sh("ip", "link", "add", a, "netns", self.namespaces[i], "type", "veth", "peer", "name", b,
            "netns", self.namespaces[j])
        for me, dev, peer in ((i, a, j), (j, b, i)):
            ns = self.namespaces[me]
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "route", "add", f"{self.addr(peer)}/32", "dev", dev, "src", self.addr(me))
            self._shape(me, peer, dev)

    def _shape(self, me: int, peer: int, dev: str) -> None:
        bw, lat = float(self.links.bandwidth[me, peer]), float(self.links.latency_s[me, peer])
        if not math.isfinite(bw) and lat <= 0:
            return
        ns = self.namespaces[me]
        tc = ["ip", "netns", "exec", ns, "tc"]
        # htb counts whole frames; the link model's bandwidth is TCP payload: scale by frame / payload bytes
        rate = f"{int(bw * 8 * WIRE_OVERHEAD)}bit" if math.isfinite(bw) else "100gbit"
        _sh(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10", "r2q", "100000")
        burst = max(64 * 1024, int(bw / 1000) if math.isfinite(bw) else 1 << 20)  # one GSO frame or ~1 ms
        _sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate,
            "burst", str(burst), "cburst", str(burst), "quantum", "60000")
        if lat > 0:
            r = subprocess.run(tc + ["qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "netem", "delay",
                                     f"{lat * 1e6:.0f}us"], capture_output=True, text=True)
            self.netem = r.returncode == 0
        self.shaped.append((me, peer, bw))

    def in_process_delays(self) -> dict[str, dict[str, float]]:
        """Latencies the senders must add themselves (all of them when netem is missing)."""
        if self.netem:
            return {}
        out: dict[str, dict[str, float]] = {}
        for i in range(self.world):
            for j in range(self.world):
                if i != j and self.links.latency_s[i, j] > 0:
                    out.setdefault(str(i), {})[str(j)] = float(self.links.latency_s[i, j])
        return out

    def describe(self) -> LinkShaping:
        return LinkShaping(len(self.namespaces), "tc netem" if self.netem else "in-process (no netem)",
                           [ShapedLink(a, b, bw) for a, b, bw in self.shaped])

    def __exit__(self, *exc) -> None:
        for ns in self.namespaces:  # deleting a namespace removes its veths and qdiscs
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
