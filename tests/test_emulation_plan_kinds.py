"""--emulate-links and --emulate-devices for every plan kind: a sharded mapping over a slow link streams at
the simulator's throughput, and a tensor-parallel plan (gathers, scatters) runs over shaped links with
every worker throttled (real processes; skipped where namespaces or cgroups cannot be made here)."""

from __future__ import annotations

import os

import pytest

from hetsplit.costs import build_problem
from hetsplit.estimate import SimOptions, estimate_plan
from hetsplit.runtime import LinkMatrix, RunOptions, run_manifest, split_model
from hetsplit.runtime.cpu_throttle import find_controller, throttle_available
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.netem import emulation_available
from hetsplit.runtime.netns_cleanup import list_namespaces
from hetsplit.runtime.owned import owner_of
from hetsplit.runtime.toy import toy_model, toy_sharded_mapping
from hetsplit.workflow import load_cluster_spec

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
NO_LINKS = emulation_available()
NO_DEVICES = throttle_available()
DEVICE = "{{name: {name}, type: {type}, kind: cpu, memory: 8GiB, peak_macs: {macs}/s, mem_bandwidth: 20GB/s, " \
         "power_active: 5W}}"


def cluster_file(path, devices: dict[str, tuple[str, str]], link: str):
    """A cluster YAML: name -> (type, peak MAC/s), every link ``link`` (``{bandwidth: .., latency: ..}``)."""
    lines = [f"name: {path.stem}", "devices:"]
    lines += ["  - " + DEVICE.format(name=n, type=t, macs=m) for n, (t, m) in devices.items()]
    path.write_text("\n".join(lines + ["links:", f"  default: {link}", ""]))
    return load_cluster_spec(str(path))


def nothing_left(run_dir) -> bool:
    """No process of the run, and none of this process's namespaces or cgroups, is left."""
    ctl = find_controller()
    groups = [] if isinstance(ctl, str) else ctl.groups()
    mine = [n for n in list_namespaces() + groups if owner_of(n) == os.getpid()]
    return not mine and not processes_of(run_dir)


@pytest.mark.skipif(NO_LINKS is not None, reason=f"link emulation unavailable: {NO_LINKS}")
def test_a_link_bound_sharded_mapping_streams_at_the_simulators_throughput(tmp_path):
    """The toy CNN (16 channels, 64 x 64) with its second convolution split by output channels between
    a and b (concat on b), everything after on b: per input a sends b the stem's output and its shard
    (384 KiB) over a 1.5 MB/s link, about 0.26 s, against a few ms of compute. The measured throughput
    (outputs' spacing over 12 streamed inputs) is within 15% of the ``simulated`` fidelity's on the same
    cluster and plan; the figures are printed (the note quotes them)."""
    path = tmp_path / "toy.onnx"
    graph = toy_model(path, channels=16, size=64)
    cl = cluster_file(tmp_path / "slowlink.yaml", {"a": ("fast", "1e12"), "b": ("fast", "1e12")},
                      "{bandwidth: 1.5MB/s, latency: 1ms}")
    plan = toy_sharded_mapping(graph, "a", "b", cl.name)
    inputs = 12
    sim = estimate_plan(build_problem(graph, cl), plan, "simulated", SimOptions(inputs=inputs))
    manifest = split_model(plan, graph, path, tmp_path / "split", cluster=cl)
    report = run_manifest(manifest, RunOptions(inputs=inputs + 1, latency_inputs=1, timeout_s=30,
                                               links=LinkMatrix.from_cluster(manifest, cl), run_dir=tmp_path / "run"))
    assert report.verify.ok and report.plan_kind == "mapping"
    link = next(x for x in report.links if (x.src, x.dst) == ("a", "b"))
    assert link.nbytes == 16 * 64 * 64 * 4 + 8 * 64 * 64 * 4       # the stem's output and a's shard
    compute = max(d.compute_s for d in report.devices)
    ratio = report.throughput / sim.throughput
    print(f"link-bound mapping: measured {report.throughput:.3f}/s, simulated {sim.throughput:.3f}/s "
          f"(ratio {ratio:.3f}); link a->b {link.nbytes} B/input, wire {link.wire_mean_s * 1e3:.0f} ms; "
          f"slowest device's compute {compute * 1e3:.1f} ms/input")
    assert compute < 0.3 / sim.throughput, "compute, not the link, bounds this run: the check would not be fair"
    assert 0.85 <= ratio <= 1.15
    assert nothing_left(tmp_path / "run")


@pytest.mark.skipif(NO_LINKS is not None or NO_DEVICES is not None,
                    reason=f"needs link and device emulation: {NO_LINKS or NO_DEVICES}")
def test_a_tensor_parallel_plan_runs_over_emulated_links_and_devices(tmp_path):
    """What `hetsplit plan --algo tensor-parallel` makes of a Transformer block on 3 slow devices runs with
    both emulations, as `run --emulate-links --emulate-devices` sets them up: outputs verified, every pair
    of workers shaped at the dilated bandwidth, every worker in its cgroup (its share holds: no worker's
    CPU per input exceeds its share of the time per input), nothing left behind."""
    torch = pytest.importorskip("torch")
    from test_runtime_mapping import Block, export

    from hetsplit.search import make_partitioner
    from hetsplit.workflow import device_emulation

    torch.manual_seed(0)
    graph, path = export(Block(e=128, heads=4, f=512), (1, 32, 128), tmp_path / "block.onnx")
    cl = cluster_file(tmp_path / "three.yaml", {f"c{i}": ("slow", "4e9") for i in range(3)},
                      "{bandwidth: 50MB/s, latency: 1ms}")
    (plan,) = make_partitioner("tensor-parallel").solve(build_problem(graph, cl))
    assert any(isinstance(a, tuple) for a in plan.assign.values()) and plan.combine
    devices = device_emulation(plan, graph, cl)
    assert set(devices.shares) == {"c0", "c1", "c2"} and devices.dilation >= 1.0
    manifest = split_model(plan, graph, path, tmp_path / "split", cluster=cl)
    links = LinkMatrix.from_cluster(manifest, cl)
    report = run_manifest(manifest, RunOptions(inputs=8, latency_inputs=1, timeout_s=60, links=links,
                                               devices=devices, run_dir=tmp_path / "run"))
    assert report.verify.ok and report.plan_kind == "mapping"
    assert "gather" in {h.collective for h in report.hops}   # the sums of the sharded layers
    emu = report.emulation
    assert emu.namespaces == manifest.world_size == 4
    shaped = {(s.from_rank, s.to_rank): s.bandwidth for s in emu.shaped}
    workers = [w.rank for w in manifest.stages]
    assert set(shaped) == {(i, j) for i in workers for j in workers if i != j}
    assert all(bw == pytest.approx(50e6 / devices.dilation) for bw in shaped.values())
    groups = report.device_emulation.groups
    assert set(groups) == {str(r) for r in workers}
    # a quota caps CPU per period of wall time: the workers' CPU per streamed input is judged against the
    # stream's time per input (first streamed input sent to last output), which spans every streamed step
    per_input = 1.0 / report.stream_throughput
    for d in report.devices:
        share = devices.shares[d.device]
        print(f"{d.device}: share {share:.3f}, CPU {d.cpu_per_input_s * 1e3:.2f} ms per input of "
              f"{per_input * 1e3:.2f} ms")
        assert d.cpu_per_input_s <= share * per_input * 1.2 + 0.001, (d, share, per_input)
    assert report.emulated.throughput == pytest.approx(report.throughput * devices.dilation)
    assert nothing_left(tmp_path / "run")
