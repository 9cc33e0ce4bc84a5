"""hetsplit worker --join HOST:PORT --token T --device D: serve a device of a run whose driver is on another host."""

from __future__ import annotations

import os
from pathlib import Path

from hetsplit.cli.common import add_command
from hetsplit.storeprobe import TOKEN_ENV


def register(sub) -> None:
    p = add_command(sub, "worker", "run a device of a run across hosts (the command `hetsplit run --hosts` or "
                                      "`hetsplit generate --hosts` prints)",
                    [                     "hetsplit worker --join 10.0.0.1:29500 --token-file run.token --device cpu1,cpu2 --run-dir logs/",
                     "HETSPLIT_TOKEN=3f2a... hetsplit worker --join 10.0.0.1:29500 --device gpu0",
                     "HETSPLIT_TOKEN=3f2a... hetsplit worker --join 10.0.0.1:29500 --device desktop --model model.gguf",
                     "HETSPLIT_TOKEN=3f2a... hetsplit worker --join 10.0.0.1:29500 --device board --stay"])
    p.add_argument("--join", required=True, metavar="HOST:PORT", help="the driver's rendezvous (printed by the run)")
    p.add_argument("--token", default=None,
                   help="the run's token (printed by the run); another run refuses it. It shows in the process "
                        f"list: --token-file or ${TOKEN_ENV} keep it out")
    p.add_argument("--token-file", default=None, metavar="FILE", help="read the run's token from FILE")
    p.add_argument("--device", required=True, metavar="DEV[,DEV]", help="the plan's device(s) this host runs")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="give up when the driver cannot be reached or hands out nothing for S seconds (default 60)")
    p.add_argument("--addr", default="", metavar="ADDR",
                   help="this host's address for the other hosts (default: the one on the route to the driver)")
    p.add_argument("--run-dir", default=None, metavar="DIR", help="keep the sub-models and logs here")
    p.add_argument("--stay", action="store_true",
                   help="after the run, join the driver's next run at the same address and token (a generation "
                        "with --recover goes on in a new run without a lost device), until the driver is gone")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="a generation's checkpoint (GGUF file or Hugging Face folder) on this host, used instead of "
                        "fetching it from the driver when its files are the driver's (names, sizes, SHA-256)")
    p.set_defaults(func=run)


def read_token(args) -> str:
    """The run token from --token, --token-file or $HETSPLIT_TOKEN (exactly one of them)."""
    from hetsplit.errors import UsageError
    from hetsplit.jsonfile import read_text

    given = [(flag, v) for flag, v in (("--token", args.token), ("--token-file", args.token_file),
                                       (f"${TOKEN_ENV}", os.environ.get(TOKEN_ENV) or None)) if v is not None]
    if not given:
        raise UsageError(f"give the run's token (printed by the run) with --token, --token-file FILE or ${TOKEN_ENV}")
    if len(given) > 1 and not (len(given) == 2 and given[1][0] == f"${TOKEN_ENV}"):
        raise UsageError(f"give the run's token once: {' and '.join(f for f, _ in given)} are both given")
    flag, value = given[0]
    if flag == "--token-file":
        value = read_text(value, UsageError, "no such token file").strip()
    if not value or len(value) > 1024 or not value.isprintable() or any(c.isspace() for c in value):
        raise UsageError(f"{flag}: the run token is one word of printable characters (as the run printed it)")
    return value


def _stalled(opts, dog) -> None:
    """The driver's store took a request and never answered: nothing in this process can interrupt that
    call, so say so and end the process (its ranks die with it; a temporary run folder is removed)."""
    import shutil
    import sys

    print(f"hetsplit worker: error: worker of {', '.join(opts.devices)}: the driver at {opts.host}:{opts.port} "
          f"stopped answering for {opts.timeout_s:g} s (its store took a request and never replied); stopped",
          file=sys.stderr, flush=True)
    if dog.remove is not None:
        shutil.rmtree(dog.remove, ignore_errors=True)
    os._exit(2)


def _options(args):
    """The worker's options, every flag checked before anything is reached or loaded (torch included)."""
    from hetsplit.errors import UsageError
    from hetsplit.storeprobe import check_timeout

    host, sep, port = args.join.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"--join {args.join!r}: write HOST:PORT with the port the driver printed, e.g. 10.0.0.1:29500")
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    if not devices:
        raise UsageError("--device: name the device (or devices, comma-separated) this host runs")
    twice = sorted({d for d in devices if devices.count(d) > 1})
    if twice:
        raise UsageError(f"--device names {', '.join(twice)} twice; name each device once")
    check_timeout(args.timeout, "--timeout")
    run_dir = Path(args.run_dir) if args.run_dir else None
    if run_dir is not None and run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"--run-dir {run_dir}: is an existing file, not a folder; give another path")
    return host.strip("[]"), int(port), read_token(args), devices, run_dir


def _own_model(given: str | None) -> Path | None:
    """``--model``: an existing file or folder of this host (checked against the driver's once it joins)."""
    from hetsplit.errors import UsageError

    if given is None:
        return None
    path = Path(given)
    if not path.exists():
        raise UsageError(f"--model {given}: no such file or folder on this host")
    return path


def run(args) -> int:
    import hashlib

    from hetsplit.storeprobe import probe

    host, port, token, devices, run_dir = _options(args)
    # a silent or foreign peer ends here, within --timeout, before torch is loaded (seconds on a small board)
    probe(host, port, args.timeout, f"worker of {', '.join(devices)}", hashlib.sha256(token.encode()).hexdigest())
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")   # before torch loads: no c10d logs with C++ frames
    from hetsplit.runtime.join import JoinOptions, serve_runs
    from hetsplit.runtime.rendezvous import Watchdog

    opts = JoinOptions(host, port, token, devices, timeout_s=args.timeout, addr=args.addr, run_dir=run_dir,
                       model=_own_model(args.model), stay=args.stay)
    # torch's own waits end at --timeout; the watchdog, for a call that never returns, 5% later (checked
    # every 2.5%): every wait on the driver ends within --timeout plus 10%
    dog = Watchdog(opts.timeout_s * 1.05, lambda: _stalled(opts, dog))
    with dog:
        serve_runs(opts, dog, lambda line: print(line, flush=True))
    return 0
