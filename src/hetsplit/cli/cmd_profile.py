"""hetsplit profile MODEL --device NAME: measured (this machine) or modelled (a preset) per-layer costs."""

from __future__ import annotations

import math

from rich.table import Table

from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, int_range, progress
from hetsplit.errors import ProfileError
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity


def register(sub) -> None:
    p = add_command(sub, "profile", "measure a model's per-layer latency, memory and energy, or a device model's estimate",
                    ["hetsplit profile resnet18 --device local-cpu --repeats 20 --out resnet18.cpu.json",
                     ("hetsplit profile resnet50 --threads 1 --statistic min --clock cpu --out resnet50.json"
                      "   # a busy machine"),
                     ("hetsplit profile resnet50 --threads 1 --co-load 1 --out resnet50.json"
                      "   # for 2 pipeline stages computing at once here"),
                     "hetsplit profile vgg8 --device neurosim-rram",
                     "hetsplit profile tinyllama-42m --device siracusa --param l2_bytes=4194304",
                     "hetsplit profile resnet8 --device imce-imc --out resnet8.imc.json"])
    p.add_argument("model", help="zoo name or .onnx file")
    p.add_argument("--device", default="local-cpu",
                   help="local-cpu (measure here), local-gpu (measure on a CUDA GPU, through the interpreter a "
                        "GPU device runs with), or a device preset / preset file (write its modelled costs); "
                        "default local-cpu")
    p.add_argument("--repeats", type=int, default=20, help="measured runs (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up runs before measuring (default 5)")
    p.add_argument("--statistic", choices=("median", "p10", "min"), default="median",
                   help="per-layer and whole-model time over the runs (default median; min suits a busy machine)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time the whole model by the wall clock (default) or, with --threads 1, by the thread's CPU "
                        "time (leaves out time other processes held the core)")
    p.add_argument("--threads", type=int_range(1), default=None, help="CPU threads for onnxruntime (default: all cores here)")
    p.add_argument("--co-load", type=int, default=0, metavar="K",
                   help="keep K other cores busy running the same model (pinned helper processes) while measuring "
                        "on a pinned core: the load each stage meets when K + 1 stages of a pipeline compute at once "
                        "here (default 0: the rest of the machine idle)")
    p.add_argument("--power", default=None, metavar="WATTS",
                   help="power to estimate energy from when no energy meter can read (e.g. 35W)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a modelled device's parameter (repeatable), e.g. l2_bytes=4194304")
    p.add_argument("--out", default=None, metavar="FILE", help="write the hetsplit.profile/1 JSON here")
    p.add_argument("--no-segments", action="store_true",
                   help="local-cpu: skip measuring what a segment (one sub-model call of the runtime) costs beyond "
                        "its layers (the model cut into 1, 2, 4, 8 segments, each timed as a worker's call)")
    p.add_argument("--layers", type=int_range(0), default=40, metavar="N", help="show at most N layers (default 40)")
    add_input_shape_option(p)
    p.set_defaults(func=run)


def _params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ProfileError(f"--param {item!r}: write KEY=VALUE, e.g. --param l2_bytes=4194304")
        out[key.strip()] = value.strip()
    return out


def run(args) -> int:
    from hetsplit.costs.profile import save_profile
    from hetsplit.outpath import output_file
    from hetsplit.units import parse_quantity
    from hetsplit.workflow.profile import ProfileRequest, profile

    power = None if args.power is None else parse_quantity(args.power, "power", "--power")
    output_file(args.out)
    with progress(f"profiling {args.model} on {args.device}"):
        prof = profile(args.model, ProfileRequest(
            args.device, repeats=args.repeats, warmup=args.warmup, threads=args.threads, power_w=power,
            params=_params(args.param), statistic=args.statistic, clock=args.clock, co_load=args.co_load,
            input_shapes=input_shapes(args), segments=not args.no_segments))
    show(prof, args.layers)
    if args.out:
        path = save_profile(prof, args.out)
        wide_console().print(f"wrote {path}")
    return 0


def show(prof, max_layers: int) -> None:
    console = wide_console()
    g, c = prof.graph, prof.costs
    col = c.types[0]
    t, e, m = c.time_s[:, 0], c.energy_j[:, 0], c.mem_bytes[:, 0]
    table = Table(title=f"{g.name} on {col}: {c.sources.get(col, '')}", header_style="bold")
    for name in ("#", "layer", "op", "time", "energy", "memory"):
        table.add_column(name, justify="left" if name in ("layer", "op") else "right")
    for i in range(min(g.num_layers, max_layers)):
        table.add_row(str(i), g.layers[i].name, g.layers[i].op,
                      "cannot run" if math.isinf(t[i]) else format_quantity(t[i], "s"),
                      "-" if math.isinf(e[i]) else format_quantity(e[i], "J"), format_quantity(m[i], "B"))
    console.print(table)
    if g.num_layers > max_layers:
        console.print(f"... {g.num_layers - max_layers} more layers (--layers N shows more)")
    finite = t[~__import__("numpy").isinf(t)]
    blocked = int(g.num_layers - finite.size)
    console.print(f"sum over layers: {format_quantity(float(finite.sum()), 's')}, "
                  f"{format_quantity(float(e[~__import__('numpy').isinf(e)].sum()), 'J')}"
                  + (f"; {blocked} layer(s) this device cannot run" if blocked else ""))
    meta = prof.meta
    whole = meta.get("whole_model", {})
    if "median_s" in whole:
        console.print(f"whole model measured: {format_quantity(whole['time_s'], 's')} ({whole['statistic']}, "
                      f"{whole['clock']} clock; "
                      f"median {format_quantity(whole['median_s'], 's')}, min {format_quantity(whole['min_s'], 's')}, "
                      f"p90 {format_quantity(whole['p90_s'], 's')}, {whole['n']} runs); "
                      f"sum of layers vs whole model: {meta['gap'] * 100:+.1f}%")
        if meta.get("co_load"):
            helpers = ", ".join(",".join(map(str, cpus)) for cpus in meta["co_load_cpus"])
            console.print(f"co-load: {meta['co_load']} helper(s) on CPUs {helpers} ran the model meanwhile; "
                          f"measured on CPUs {','.join(map(str, meta['measured_on_cpus']))}")
        energy = meta.get("energy", {})
        if col in c.segment:
            seg = c.segment[col]
            console.print(f"a segment beyond its layers: {format_quantity(seg.call_s, 's')} per call + "
                          f"{seg.per_byte_s * 1e9:.3g} ns per boundary byte ({seg.source})", markup=False,
                          highlight=False)
        console.print(f"energy: {energy.get('status')} ({energy.get('meter')})")
        mem = meta.get("memory", {})
        if mem.get("peak_rss_bytes"):
            console.print(f"memory: peak RSS {format_quantity(mem['peak_rss_bytes'], 'B')} "
                          f"(before the model: {format_quantity(mem['rss_before_bytes'], 'B')}); "
                          f"largest live set {format_quantity(mem['peak_live_bytes'], 'B')}")
