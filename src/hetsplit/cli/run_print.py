"""What ``hetsplit run`` prints: the measurements, the comparison, the notes and messages on the way."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from hetsplit.report.console import wide_console
from hetsplit.runtime.report import RunReport
from hetsplit.outpath import write_text
from hetsplit.units import format_quantity
from hetsplit.workflow.comparison import Row
from hetsplit.workflow.run import RunHooks, RunOutcome


def hooks(progress: Callable[[str], Any]) -> RunHooks:
    """Notes and the worker commands on stderr, a spinner around long steps, the device emulation's plan."""
    def note(text: str) -> None:
        print(f"note: {text}", file=sys.stderr)

    told: set[str] = set()

    def announce(commands) -> None:
        token = commands[0].token
        if token in told:      # a generation that goes on without a lost device (--recover): same address and token
            print("the run goes on at the same address; the workers started with --stay join it (any other: run "
                  "there again):", file=sys.stderr)
        else:
            told.add(token)
            print(f"the run's token (printed once; give it to each worker in $HETSPLIT_TOKEN or a --token-file): "
                  f"{token}", file=sys.stderr)
            print("the driver waits for one worker per device on the other hosts; run there:", file=sys.stderr)
        for c in commands:
            print(f"  [{c.host}] {c.text()}", file=sys.stderr)

    return RunHooks(note, progress, lambda emu: print_emulation(emu, wide_console(stderr=True)), announce)


def print_outcome(outcome: RunOutcome, as_json: bool, out: str | None) -> None:
    """The comparison (when asked) and its notes, then the measurements (or their JSON); ``out``: the JSON file."""
    console = wide_console(stderr=as_json)
    if outcome.comparison is not None:
        print_compare(outcome.comparison.rows, console)
        for note in outcome.comparison.notes:
            console.print(f"note: {note}")
    if as_json:
        json.dump(outcome.to_dict(), sys.stdout, indent=1)
        print()
    else:
        print_report(outcome.report, console)
    if out:
        write_text(Path(out), json.dumps(outcome.to_dict(), indent=1))
        console.print(f"wrote {out}")


def print_report(report: RunReport, console: Console) -> None:
    verify = f"{report.verify.max_abs_err:.2e}" if report.verify is not None else "nan"
    t = Table(title=f"{report.model}: {report.inputs} inputs, every output verified (max abs err {verify})")
    for col in ("device", "compute/input", "CPU/input", "idle/input", "recv/input", "send/input", "send time",
                "peak mem", "energy/input"):
        t.add_column(col, justify="right")
    for d in report.devices:
        energy = format_quantity(d.energy_j, "J") if d.energy_j is not None else "-"
        cpu = format_quantity(d.cpu_per_input_s, "s") if d.cpu_per_input_s is not None else "-"
        t.add_row(d.device, format_quantity(d.compute_s, "s"), cpu, format_quantity(d.idle_s, "s"),
                  format_quantity(d.recv_bytes, "B"), format_quantity(d.send_bytes, "B"),
                  format_quantity(d.send_s, "s"), format_quantity(d.peak_rss_bytes, "B"), energy)
    console.print(t)
    if report.links:   # bytes per link
        lt = Table(title="links (per input)")
        for col in ("from", "to", "messages", "bytes", "wire time"):
            lt.add_column(col, justify="right")
        for link in report.links:
            lt.add_row(link.src, link.dst, str(link.messages), format_quantity(link.nbytes, "B"),
                       format_quantity(link.wire_mean_s, "s"))
        console.print(lt)
    stream = report.stream_throughput
    whole = f" (whole stream {stream:.2f}/s)" if stream is not None else ""
    console.print(f"throughput {report.throughput:.2f}/s{whole}   latency {format_quantity(report.latency_s, 's')} "
                  f"(under load {format_quantity(report.latency_loaded_s, 's')})   pipeline efficiency "
                  f"{report.pipeline_efficiency:.0%}")
    for note in (report.efficiency_note(), report.depth_note()):
        if note:
            console.print(f"note: {note}")
    if (emu := report.emulated) is not None:
        console.print(f"emulated (measured / D, D = {emu.dilation:.3g}): throughput {emu.throughput:.2f}/s   "
                      f"latency {format_quantity(emu.latency_s, 's')}   compute " + ", ".join(
                          f"{d} {format_quantity(t, 's')}" for d, t in emu.compute_s.items()))
    if report.driver_cpu_per_input_s is not None:
        console.print(f"driver (feeds inputs, collects outputs): CPU "
                      f"{format_quantity(report.driver_cpu_per_input_s, 's')}/input")


def print_compare(rows: list[Row], console: Console) -> None:
    t = Table(title="predicted vs measured")
    for col in ("metric", "predicted", "measured", "measured/predicted"):
        t.add_column(col, justify="right")
    for r in rows:
        fmt = (lambda v: "-" if v is None else f"{v:.4g}")
        t.add_row(r.metric, fmt(r.predicted), fmt(r.measured), "-" if r.ratio is None else f"{r.ratio:.2f}")
    console.print(t)


def print_emulation(emu, console: Console) -> None:
    """The shares and dilation of --emulate-devices, before the run."""
    shares = ", ".join(f"{d} {s:.3f}" for d, s in emu.shares.items()) or "none"
    console.print(f"emulating the plan's devices: CPU share of one core {shares}; time dilation D = "
                  f"{emu.dilation:.3g} (emulated time = measured / D); host costs: {emu.host}")
