"""hetsplit run PLAN MODEL: run any plan (pipeline, mapping, tensor-parallel) for real, one process per device,
measured and verified."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hetsplit.cli.cmd_split import note_unchecked
from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, int_range, progress
from hetsplit.errors import UsageError
from hetsplit.plan.io import load_plan
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity
from hetsplit.outpath import write_text


def register(sub) -> None:
    p = add_command(sub, "run", "run a plan across processes (or hosts), measure it and verify every output",
                    ["hetsplit run out/plans.json resnet18 --inputs 16",
                     "hetsplit run imce/plans.json resnet8 -n 200 --here   # IMC mapping, costed for its processes",
                     "hetsplit run plan.json resnet50 --cluster local --profile prof.json --compare --out cmp.json",
                     "hetsplit run plan.json resnet18 --cluster edge.yaml --emulate-links",
                     "hetsplit run plan.json resnet18 --emulate-devices --compare  # each worker at its device's speed",
                     "hetsplit run plan.json resnet18 --hosts gpu0=10.0.0.2  # gpu0 joins from 10.0.0.2: "
                     "`hetsplit worker` there"])
    p.add_argument("plan", help="plan or plan-set JSON; a set gives its best Pareto plan (or --index)")
    p.add_argument("model", help="zoo name or .onnx file the plan was made for")
    p.add_argument("--index", type=int, default=None, help="which plan of a plan set")
    p.add_argument("--inputs", "-n", type=int, default=16, help="inputs streamed through the devices (default 16)")
    p.add_argument("--latency-inputs", type=int, default=None,
                   help="first inputs sent one at a time, at most --inputs (default 2, or --inputs if fewer)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="fail when no tensor moves, or the processes do not meet, for S seconds (default 60)")
    p.add_argument("--threads", type=int_range(1), default=1, help="compute threads per device (default 1)")
    p.add_argument("--cluster", "-c", default=None, help="cluster of the plan (default: the plan's own)")
    p.add_argument("--profile", default=None, help="hetsplit.profile/1 JSON for the predictions of --compare")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure this machine's local devices anew for the cluster's costs, and with --here the "
                        "runtime's own per-message costs (both cached per machine)")
    p.add_argument("--compare", action="store_true", help="print predicted beside measured metrics")
    p.add_argument("--here", action="store_true",
                   help="compare (implies --compare) with a prediction for the processes that ran the plan here "
                        "(every device a 1-thread local-cpu worker, costs from --profile or profiled now, the runtime's "
                        "per-message costs measured here on first use; the simulator and the bounds of this "
                        "machine's shared cores), not the plan's cluster")
    p.add_argument("--emulate-links", action="store_true",
                   help="shape every link to the cluster's bandwidth and latency (needs root, ip and tc)")
    p.add_argument("--emulate-devices", action="store_true",
                   help="throttle each device's worker (cgroup CPU quota) to the device's speed relative to this "
                        "machine, all slowed by one time dilation D, and report emulated metrics (measured / D); "
                        "needs root and the cgroup cpu controller")
    p.add_argument("--pin", action="store_true", help="pin each device's worker to its own CPU cores")
    p.add_argument("--cpu-only", action="store_true",
                   help="compute on the CPU for every device (default: a gpu device runs on its host's GPU where the "
                        "host has CUDA)")
    p.add_argument("--hosts", default=None, metavar="DEV=HOST,...",
                   help="run these devices on other hosts: the run prints the `hetsplit worker` command for each "
                        "host (the others and the driver run here)")
    p.add_argument("--port", type=int_range(0, 65535), default=0, help="rendezvous port (default 0: a free one)")
    p.add_argument("--ssh", action="store_true", help="with --hosts: run each host's worker command over ssh")
    p.add_argument("--split-dir", default=None, metavar="DIR", help="keep the sub-models here (default: temporary)")
    add_input_shape_option(p)
    p.add_argument("--run-dir", default=None, metavar="DIR", help="keep the processes' logs and measurements here")
    p.add_argument("--out", "-o", default=None, metavar="FILE", help="write the measurements (and comparison) as JSON")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.outpath import output_dir, output_file
    from hetsplit.runtime import RunOptions, resolve_model
    from hetsplit.workflow import load_plan_cluster, plan_input_shapes

    _check_bounds(args)
    if args.latency_inputs is not None and args.latency_inputs > args.inputs >= 1:
        raise UsageError(f"--latency-inputs {args.latency_inputs}: give 0 to --inputs ({args.inputs}) of the inputs "
                         "to send one at a time")
    if args.latency_inputs is None:
        args.latency_inputs = min(2, args.inputs)
    opts = RunOptions(inputs=args.inputs, latency_inputs=args.latency_inputs, timeout_s=args.timeout,
                      startup_timeout_s=args.timeout, port=args.port,
                      run_dir=Path(args.run_dir) if args.run_dir else None, pin=args.pin)
    output_file(args.out)
    _check_hosts(args)
    output_dir(args.split_dir, "--split-dir")
    output_dir(args.run_dir, "--run-dir")
    if args.emulate_devices:
        _check_emulate_devices(args)
    plan = load_plan(args.plan, args.index)
    cluster = load_plan_cluster(plan, args.cluster, required=args.emulate_links or args.emulate_devices,
                                recalibrate=args.recalibrate)
    note_unchecked(plan, cluster)
    with progress(f"loading {args.model}"):
        graph, path = resolve_model(args.model, plan_input_shapes(plan, input_shapes(args)) or None)
    with contextlib.ExitStack() as stack:
        if args.split_dir or args.run_dir:
            split_dir = Path(args.split_dir) if args.split_dir else Path(args.run_dir) / "split"
        else:
            split_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-split-")))
        return _run(args, opts, plan, graph, path, cluster, split_dir)


def _run(args, opts, plan, graph, path, cluster, split_dir: Path) -> int:
    from hetsplit.runtime import run_manifest, split_model
    from hetsplit.runtime.hosts import HostMap

    with progress("splitting"):
        manifest = split_model(plan, graph, path, split_dir, cluster=cluster)
    from hetsplit.runtime.peer_config import check_inputs, steps_per_input

    check_inputs(args.inputs, steps_per_input(manifest, list(range(manifest.world_size))), "--inputs")
    opts.threads = {w.device: args.threads for w in manifest.stages}
    opts.kinds, opts.cpu_only = _kinds(cluster, manifest), args.cpu_only
    if not args.cpu_only and not args.hosts:
        _note_no_cuda(opts.kinds)
    if args.emulate_devices:
        from hetsplit.workflow import device_emulation

        with progress("costing the plan's devices and this machine's"):
            opts.devices = device_emulation(plan, graph, cluster, args.profile)
        print_emulation(opts.devices, wide_console(stderr=True))
    if args.emulate_links:
        from hetsplit.runtime import LinkMatrix

        opts.links = LinkMatrix.from_cluster(manifest, cluster)
    if args.hosts:
        opts.hosts = HostMap.parse(args.hosts)
        with contextlib.ExitStack() as stack:
            opts.announce = _announce(args.ssh, stack)
            report = run_manifest(manifest, opts)
        return _finish(args, report, plan, graph, cluster)
    report = run_manifest(manifest, opts)
    return _finish(args, report, plan, graph, cluster)


def _check_bounds(args) -> None:
    """--inputs, --threads and --timeout within what a run can hold, before any work (each flag named)."""
    import math
    import os

    from hetsplit.runtime.peer_config import MAX_INPUTS, MAX_THREADS, MAX_TIMEOUT_S

    if args.inputs > MAX_INPUTS:
        raise UsageError(f"--inputs {args.inputs}: give at most {MAX_INPUTS:,} inputs")
    cores = len(os.sched_getaffinity(0))
    if args.threads > MAX_THREADS or (not args.hosts and args.threads > cores):
        most = MAX_THREADS if args.hosts else cores
        raise UsageError(f"--threads {args.threads}: give at most {most} compute threads per device"
                         + ("" if args.hosts else f" (this machine has {cores} cores)"))
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"--timeout {args.timeout}: give a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} "
                         "(a week)")


def _check_hosts(args) -> None:
    from hetsplit.errors import UsageError
    from hetsplit.runtime.hosts import HostMap

    if args.hosts:
        HostMap.parse(args.hosts)      # malformed --hosts: refused before any work
    if args.ssh and not args.hosts:
        raise UsageError("--ssh starts the workers of --hosts; give --hosts DEV=HOST,...")
    for flag, on in (("--emulate-links", args.emulate_links), ("--emulate-devices", args.emulate_devices)):
        if on and args.hosts:
            raise UsageError(f"{flag} shapes this machine's own processes; it does not combine with --hosts")


def _announce(ssh: bool, stack: contextlib.ExitStack):
    """What the run does once it serves the rendezvous: print each host's worker command, and with ``ssh`` run
    it there (the ssh clients end with this command; the workers end with the run)."""
    from hetsplit.lifetime import die_with_parent

    def announce(commands) -> None:
        print(f"the run's token (printed once; give it to each worker in $HETSPLIT_TOKEN or a --token-file): "
              f"{commands[0].token}", file=sys.stderr)
        print("the driver waits for one worker per device on the other hosts; run there:", file=sys.stderr)
        for c in commands:
            print(f"  [{c.host}] {c.text()}", file=sys.stderr)
        if ssh:
            for c in commands:      # the token goes on the remote shell's input, never on a command line
                p = subprocess.Popen(["ssh", "-o", "BatchMode=yes", c.host, c.remote_shell()], stdin=subprocess.PIPE,
                                     stdout=sys.stderr, preexec_fn=die_with_parent())   # stdout: the report
                p.stdin.write(f"{c.token}\n".encode())
                p.stdin.close()
                stack.callback(_end, p)

    return announce


def _end(p: subprocess.Popen) -> None:
    """An ssh client at the end of the run: its worker ends with the run and the client with it, so the
    run returns once its workers are gone; terminated when that takes over 5 s (a bounded wait)."""
    try:
        p.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        p.terminate()
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _check_emulate_devices(args) -> None:
    """Refuse --emulate-devices where it cannot work, before any work (exit 2 with the reason)."""
    from hetsplit.errors import UsageError
    from hetsplit.runtime.cpu_throttle import throttle_available

    for flag, bad in (("--threads", args.threads != 1), ("--hosts", bool(args.hosts)), ("--here", args.here)):
        if bad:
            raise UsageError(f"--emulate-devices throttles one-thread workers on this machine and compares with the "
                             f"plan's own cluster; it does not combine with {flag}")
    why = throttle_available()
    if why:
        raise UsageError(why)


def _kinds(cluster, manifest) -> dict[str, str]:
    """Each device's kind in the cluster (gpu or cpu): a gpu device computes on its host's GPU where the host
    has CUDA (each worker decides on its own host, ``runtime.executor``)."""
    if cluster is None:
        return {}
    return {w.device: "gpu" if w.device in cluster.names and cluster.device(w.device).kind == "gpu" else "cpu"
            for w in manifest.stages}


def _note_no_cuda(kinds: dict[str, str]) -> None:
    from hetsplit.runtime.executor import Host

    gpus = [d for d, k in kinds.items() if k == "gpu"]
    if gpus and not Host.here().cuda:
        print(f"note: no CUDA GPU here; {'devices' if len(gpus) > 1 else 'device'} {', '.join(gpus)} "
              f"{'compute' if len(gpus) > 1 else 'computes'} on the CPU", file=sys.stderr)


def _finish(args, report, plan, graph, cluster) -> int:
    console = wide_console(stderr=args.json)
    doc = report.to_dict()
    if args.here:
        from hetsplit.experiments.mapping_run import compare_run_here

        result = compare_run_here(report, plan, graph, args.model, args.profile, args.latency_inputs, args.run_dir,
                                  recalibrate=args.recalibrate)
        doc = result.to_dict()
        if args.threads != 1:
            doc["notes"].append(f"the run used {args.threads} threads per device; the prediction assumes 1")
        print_compare(result.rows(), console)
        for note in doc["notes"]:
            console.print(f"note: {note}")
    elif args.compare:
        from hetsplit.runtime import compare
        from hetsplit.runtime.measure import overhead_note, predict, profile_notes

        notes: list[str] = []
        simulated = None
        if args.profile:
            from hetsplit.costs import load_profile

            if cluster is None:
                from hetsplit.workflow import load_plan_cluster

                cluster = load_plan_cluster(plan, args.cluster, required=True)
            profile = load_profile(args.profile)
            predicted, simulated = predict(plan, graph, cluster, profile.costs, args.inputs)
            cpu_workers = sum(1 for d in report.devices if d.get("kind", "cpu") == "cpu")
            notes = profile_notes(profile.meta, cpu_workers, args.threads)
        elif plan.metrics is not None:
            predicted = plan.metrics
        else:
            from hetsplit.errors import RuntimeFailure

            raise RuntimeFailure("--compare needs predictions: give --profile (with --cluster) or a plan with metrics")
        doc = compare(report, predicted, cluster, simulated=simulated)
        if report.extra.get("emulated"):
            from hetsplit.runtime.device_emulation import emulated_rows

            doc["rows"] += emulated_rows(doc["predicted"], report.extra["emulated"])
        overhead = overhead_note(report, predicted_throughput=doc["predicted"].get("throughput"))
        doc["notes"] = notes + [n for n in [overhead] if n]
        if cluster is not None and not args.hosts:
            from hetsplit.workflow import runs_here

            if runs_here(cluster):
                doc["notes"].append("the plan's devices are this machine's cores: `--here` compares the run with "
                                    "a prediction for the processes that ran it (sharing the cores, each message "
                                    "costing the runtime CPU)")
        print_compare(doc["rows"], console)
        for note in doc["notes"]:
            console.print(f"note: {note}")
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        print_report(report, console)
    if args.out:
        write_text(Path(args.out), json.dumps(doc, indent=1))
        console.print(f"wrote {args.out}")
    return 0


def print_report(report, console: Console) -> None:
    t = Table(title=f"{report.model}: {report.inputs} inputs, every output verified "
                    f"(max abs err {report.verify.get('max_abs_err', float('nan')):.2e})")
    for col in ("device", "compute/input", "CPU/input", "idle/input", "recv/input", "send/input", "send time",
                "peak mem", "energy/input"):
        t.add_column(col, justify="right")
    for d in report.devices:
        energy = format_quantity(d["energy_j"], "J") if d.get("energy_j") is not None else "-"
        cpu = format_quantity(d["cpu_per_input_s"], "s") if d.get("cpu_per_input_s") is not None else "-"
        t.add_row(d["device"], format_quantity(d["compute_s"], "s"), cpu, format_quantity(d["idle_s"], "s"),
                  format_quantity(d["recv_bytes"], "B"), format_quantity(d["send_bytes"], "B"),
                  format_quantity(d["send_s"], "s"), format_quantity(d["peak_rss_bytes"], "B"), energy)
    console.print(t)
    if report.extra.get("links"):   # bytes per link
        lt = Table(title="links (per input)")
        for col in ("from", "to", "messages", "bytes", "wire time"):
            lt.add_column(col, justify="right")
        for link in report.extra["links"]:
            lt.add_row(link["from"], link["to"], str(link["messages"]), format_quantity(link["nbytes"], "B"),
                       format_quantity(link["wire_mean_s"], "s"))
        console.print(lt)
    stream = report.extra.get("stream_throughput")
    whole = f" (whole stream {stream:.2f}/s)" if stream is not None else ""
    console.print(f"throughput {report.throughput:.2f}/s{whole}   latency {format_quantity(report.latency_s, 's')} "
                  f"(under load {format_quantity(report.latency_loaded_s, 's')})   pipeline efficiency "
                  f"{report.pipeline_efficiency:.0%}")
    if report.efficiency_note():
        console.print(f"note: {report.efficiency_note()}")
    if report.extra.get("emulated"):
        emu, dev = report.extra["emulated"], report.extra["device_emulation"]
        console.print(f"emulated (measured / D, D = {dev['dilation']:.3g}): throughput {emu['throughput']:.2f}/s   "
                      f"latency {format_quantity(emu['latency_s'], 's')}   compute " + ", ".join(
                          f"{d} {format_quantity(t, 's')}" for d, t in emu["compute_s"].items()))
    if report.extra.get("driver_cpu_per_input_s") is not None:
        console.print(f"driver (feeds inputs, collects outputs): CPU "
                      f"{format_quantity(report.extra['driver_cpu_per_input_s'], 's')}/input")


def print_compare(rows: list[dict], console: Console) -> None:
    t = Table(title="predicted vs measured")
    for col in ("metric", "predicted", "measured", "measured/predicted"):
        t.add_column(col, justify="right")
    for r in rows:
        fmt = (lambda v: "-" if v is None else f"{v:.4g}")
        t.add_row(r["metric"], fmt(r["predicted"]), fmt(r["measured"]), "-" if r["ratio"] is None else
                  f"{r['ratio']:.2f}")
    console.print(t)


def print_emulation(emu, console: Console) -> None:
    """The shares and dilation of --emulate-devices, before the run."""
    shares = ", ".join(f"{d} {s:.3f}" for d, s in emu.shares.items()) or "none"
    console.print(f"emulating the plan's devices: CPU share of one core {shares}; time dilation D = "
                  f"{emu.dilation:.3g} (emulated time = measured / D); host costs: {emu.host}")
