"""Hosts on one machine for tests: network namespaces on a bridge, each with its own address.

``NetHosts(n)``: a namespace holding a bridge (the switch) and ``n`` namespaces, each joined to the
bridge by a veth pair and addressed ``10.77.0.<i+1>/24`` (private to these namespaces: the machine's
own network is not touched). Names carry this process's pid and a random tag; everything is removed
on exit, on failure too, and what a killed test process left is removed by the next. ``start_across``
starts ``hetsplit run --hosts`` in the first namespace and the worker commands it prints in the
others, exactly as documented (the venv's ``hetsplit``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HETSPLIT = str(Path(sys.executable).with_name("hetsplit"))


def _sh(*cmd: str) -> None:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {r.stderr.strip()}")


class NetHosts:
    def __init__(self, n: int):
        tag = uuid.uuid4().hex[:6]
        self.prefix = f"hstest-{os.getpid()}-{tag}"
        self.switch = f"{self.prefix}-sw"
        self.names = [f"{self.prefix}-h{i}" for i in range(n)]
        self.veths = [(f"hv{tag}{i}", f"hp{tag}{i}") for i in range(n)]

    def addr(self, i: int) -> str:
        return f"10.77.0.{i + 1}"

    def exec(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[i]]

    @staticmethod
    def remove_stale() -> None:
        """Remove the namespaces of earlier test processes that were killed before removing their own."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        for name in listed:
            parts = name.split("-")
            dead = len(parts) > 2 and parts[1].isdigit() and not Path(f"/proc/{parts[1]}").exists()
            if parts[0] == "hstest" and dead:
                subprocess.run(["ip", "netns", "del", name], capture_output=True)

    def __enter__(self) -> "NetHosts":
        self.remove_stale()
        try:
            _sh("ip", "netns", "add", self.switch)
            _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for i, (ns, (veth, port)) in enumerate(zip(self.names, self.veths)):
                _sh("ip", "netns", "add", ns)
                _sh("ip", "-n", ns, "link", "set", "lo", "up")
                _sh("ip", "link", "add", veth, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
                _sh("ip", "-n", self.switch, "link", "set", port, "master", "br0")
                _sh("ip", "-n", self.switch, "link", "set", port, "up")
                _sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", veth)
                _sh("ip", "-n", ns, "link", "set", veth, "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def shape(self, i: int, bits_per_s: int, delay_ms: float = 0.0) -> bool:
        """Cap what host ``i`` sends at ``bits_per_s`` on the wire (htb); add ``delay_ms`` with netem where the
        kernel has it. True when the delay was added."""
        tc = ["ip", "netns", "exec", self.names[i], "tc"]
        dev = self.veths[i][0]
        _sh(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        _sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", f"{bits_per_s}bit",
            "ceil", f"{bits_per_s}bit", "burst", "16k", "cburst", "16k")
        if delay_ms <= 0:
            return False
        r = subprocess.run(tc + ["qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "netem", "delay",
                                 f"{delay_ms}ms"], capture_output=True)
        return r.returncode == 0

    def link(self, i: int, up: bool) -> None:
        """Take host ``i`` off the network (its bridge port down: no packet in or out), or back on."""
        _sh("ip", "-n", self.switch, "link", "set", self.veths[i][1], "up" if up else "down")

    def unshape(self, i: int) -> None:
        subprocess.run(["ip", "netns", "exec", self.names[i], "tc", "qdisc", "del", "dev", self.veths[i][0], "root"],
                       capture_output=True)

    def fake_ssh(self, folder: Path) -> Path:
        """A folder holding an ``ssh`` that runs its command in the namespace of the host it is given (the
        tests' stand-in for sshd: ``hetsplit run --ssh`` runs the printed commands through it)."""
        folder.mkdir(parents=True, exist_ok=True)
        cases = "\n".join(f"  {self.addr(i)}) ns={ns};;" for i, ns in enumerate(self.names))
        script = folder / "ssh"
        script.write_text(f"""#!/bin/sh
while [ "$1" = "-o" ]; do shift 2; done
host=$1; shift
case "$host" in
{cases}
  *) echo "fake ssh: unknown host $host" >&2; exit 255;;
esac
exec ip netns exec "$ns" sh -c "$*"
""")
        script.chmod(0o755)
        return folder

    def __exit__(self, *exc) -> None:
        for ns in [*self.names, self.switch]:   # deleting a namespace removes its veths, bridge and qdiscs
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Loopback:
    """Every "host" is this machine at 127.0.0.1 (no namespaces): for tests of the rendezvous alone."""

    def addr(self, i: int) -> str:
        return "127.0.0.1"

    def exec(self, i: int) -> list[str]:
        return []


def available() -> str | None:
    """None when namespaces with a bridge can be made here, else why not."""
    from hetsplit.runtime import emulation_available

    why = emulation_available()
    if why:
        return why
    try:
        with NetHosts(1):
            pass
    except RuntimeError as exc:
        return str(exc)
    return None


@dataclass
class Across:
    """A run across namespace hosts in flight: the CLI on host 0, one worker per other device."""

    cli: subprocess.Popen
    out: Path
    err: Path
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    ended_alone: set[str] = field(default_factory=set)

    def wait(self, timeout: float, settle: Iterable[str] | None = None) -> tuple[int, str, str]:
        """The run's exit code, stdout and stderr; its workers (or those of ``settle``: one cut off from the
        run cannot hear it end) get 10 s to end on their own, then all are killed; ``ended_alone`` names
        those that ended before that."""
        waiting = [w for d, w in self.workers.items() if settle is None or d in settle]
        try:
            self.cli.wait(timeout=timeout)
            end = time.time() + 10
            while time.time() < end and any(w.poll() is None for w in waiting):
                time.sleep(0.05)
            self.ended_alone = {d for d, w in self.workers.items() if w.poll() is not None}
        finally:
            self.stop()
        return self.cli.returncode, self.out.read_text(), self.err.read_text()

    def stop(self) -> None:
        for p in [self.cli, *self.workers.values()]:
            if p.poll() is None:
                p.kill()
                p.wait()


def start_across(net: NetHosts | Loopback, placement: dict[str, int], args: list[str], folder: Path,
                 start_workers: bool = True, ssh: bool = False, command: str = "run") -> Across:
    """``hetsplit COMMAND ARGS --hosts`` (``run`` or ``generate``) on host 0 with devices placed on hosts by
    ``placement``; once it prints the worker commands, each is started in its host's namespace (unless
    ``start_workers`` is False), or with ``ssh`` the run starts them itself (``--ssh``, through
    ``NetHosts.fake_ssh``)."""
    hosts = ",".join(f"{d}={net.addr(i)}" for d, i in placement.items())
    out, err = folder / "cli.out", folder / "cli.err"
    env = dict(os.environ)
    if ssh:
        args = [*args, "--ssh"]
        env["PATH"] = f"{net.fake_ssh(folder / 'bin')}:{Path(HETSPLIT).parent}:{env.get('PATH', '')}"
        start_workers = False
    with open(out, "w") as fo, open(err, "w") as fe:
        cli = subprocess.Popen(net.exec(0) + [HETSPLIT, command, *args, "--hosts", hosts], stdout=fo, stderr=fe,
                               stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    run = Across(cli, out, err)
    end = time.time() + 90
    while len(run.commands) < len(placement):
        if cli.poll() is not None or time.time() > end:
            run.stop()
            raise AssertionError(f"the run printed no worker commands: {err.read_text()[-3000:]}")
        lines = err.read_text().splitlines()
        token = next((line.split()[-1] for line in lines if line.startswith("the run's token")), None)
        for line in lines:
            if "] hetsplit worker " in line:
                argv = shlex.split(line.split("] ", 1)[1])
                assert "--token" not in argv, "the printed worker command carries the token"
                run.commands[argv[argv.index("--device") + 1]] = argv + ["--token", token]   # as a user might
        time.sleep(0.1)
    if start_workers:
        for device, argv in run.commands.items():   # each keeps its logs (--run-dir) for the tests to watch
            run.workers[device] = start_worker(net, placement[device], argv + ["--run-dir", str(folder / device)],
                                               folder / f"worker-{device}")
    return run


def start_worker(net: NetHosts | Loopback, host: int, argv: list[str], log: Path) -> subprocess.Popen:
    """The printed command, run in host ``host``'s namespace (``hetsplit`` being the venv's)."""
    with open(log, "w") as f:
        return subprocess.Popen(net.exec(host) + [HETSPLIT, *argv[1:]], stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
