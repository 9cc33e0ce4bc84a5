"""hetsplit worker --join HOST:PORT --token T --device D: serve a device of a run whose driver is on another host."""

from __future__ import annotations

import os
from pathlib import Path

from hetsplit.cli.common import add_command


def register(sub) -> None:
    p = add_command(sub, "worker", "run a device of a run across hosts (the command `hetsplit run --hosts` prints)",
                    ["hetsplit worker --join 10.0.0.1:29500 --token 3f2a... --device gpu0",
                     "hetsplit worker --join 10.0.0.1:29500 --token 3f2a... --device cpu1,cpu2 --run-dir logs/"])
    p.add_argument("--join", required=True, metavar="HOST:PORT", help="the driver's rendezvous (printed by the run)")
    p.add_argument("--token", required=True, help="the run's token (printed by the run); another run refuses it")
    p.add_argument("--device", required=True, metavar="DEV[,DEV]", help="the plan's device(s) this host runs")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="give up when the driver cannot be reached or hands out nothing for S seconds (default 60)")
    p.add_argument("--addr", default="", metavar="ADDR",
                   help="this host's address for the other hosts (default: the one on the route to the driver)")
    p.add_argument("--run-dir", default=None, metavar="DIR", help="keep the sub-models and logs here")
    p.set_defaults(func=run)


def run(args) -> int:
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")   # before torch loads: no c10d warnings with C++ frames
    from hetsplit.errors import UsageError
    from hetsplit.runtime.hosts import JoinOptions, join_run

    host, sep, port = args.join.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--join {args.join!r}: write HOST:PORT, e.g. 10.0.0.1:29500")
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    opts = JoinOptions(host.strip("[]"), int(port), args.token, devices, timeout_s=args.timeout, addr=args.addr, run_dir=Path(args.run_dir) if args.run_dir else None)
    docs = join_run(opts)
    devices = ", ".join(d.get("device", "?") for d in docs.values())
    print(f"worker: {devices} finished; the driver reports the measurements")
    return 0
