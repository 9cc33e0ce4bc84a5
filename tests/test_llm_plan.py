"""Planning pipeline decode of a GGUF model: the costs of both phases and the exact planner (tiny GGUF)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.errors import InfeasibleError, UsageError
from hetsplit.estimate.llm import DECODE, PREFILL, LlmCostOptions, Stage, llm_costs, predict_pipeline
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.search.llm_pipeline import best_single, every_pipeline, plan_pipeline, stage_value


def cluster(speeds: list[float], memory: list[str] | None = None, latency: str = "2ms"):
    devices = [{"name": f"d{i}", "kind": "cpu", "type": f"t{i}", "memory": (memory or ["1GiB"] * len(speeds))[i],
                "params": {"peak_macs": f"{s}e9/s", "mem_bandwidth": f"{s}GB/s", "power_active": "5W"}}
               for i, s in enumerate(speeds)]
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": "test", "devices": devices,
                              "links": {"default": {"name": "net", "bandwidth": "100MB/s", "latency": latency}}})


def fast_and_slow(path, slow_memory: str):
    """A cluster file: a device 4x faster than the other, with 1 GiB; the slow one with ``slow_memory``."""
    path.write_text("format: hetsplit.cluster/1\nname: two\ndevices:\n"
                    "  - {name: fast, kind: cpu, memory: 1GiB, peak_macs: 4e9/s, mem_bandwidth: 4GB/s, power_active: 5W}\n"
                    f"  - {{name: slow, kind: cpu, memory: {slow_memory}, peak_macs: 1e9/s, mem_bandwidth: 1GB/s, "
                    "power_active: 5W}\n"
                    "links:\n  default: {name: net, bandwidth: 100MB/s, latency: 1ms}\n")
    return path


def brute_force(costs, phase: int) -> float:
    """Every ordered subset of devices, every cut into that many non-empty stages."""
    return min((stage_value(costs, stages, phase) for stages in every_pipeline(costs)), default=np.inf)


@pytest.fixture(scope="module")
def tiny(tiny_gguf):
    return read_gguf(tiny_gguf)


def test_prefill_and_decode_are_costed_apart_and_add_up(tiny):
    costs = llm_costs(tiny.config, tiny.tensors, cluster([1, 2]), LlmCostOptions(16, 8))
    assert (costs.block_s[PREFILL] > costs.block_s[DECODE]).all()           # 16 tokens cost more than 1
    assert np.allclose(costs.block_s[:, 0], 2 * costs.block_s[:, 1])        # device 1 is twice as fast
    pred = predict_pipeline(costs, [Stage("d0", 0, 1), Stage("d1", 1, 2)])
    hops = costs.hop_s[DECODE, 0, 1] + costs.back_s[1, 0]
    assert pred.s_per_token == pytest.approx(costs.stage_s(DECODE, 0, 0, 1) + costs.stage_s(DECODE, 1, 1, 2) + hops)
    assert pred.hops_s["d0->d1"][PREFILL] > pred.hops_s["d0->d1"][DECODE]  # 16 hidden vectors against 1


def test_weights_count_at_stored_bytes_or_float32_and_the_kv_cache_grows_with_context(tiny):
    c = cluster([1])
    stored = llm_costs(tiny.config, tiny.tensors, c, LlmCostOptions(8, 8))
    f32 = llm_costs(tiny.config, tiny.tensors, c, LlmCostOptions(8, 8, "float32"))
    longer = llm_costs(tiny.config, tiny.tensors, c, LlmCostOptions(8, 72))
    whole = tiny.stored_bytes()
    kv = tiny.config.kv_bytes_per_position(tiny.config.blocks) * 16
    assert stored.stage_bytes(0, 2) == pytest.approx(whole + kv)
    assert f32.stage_bytes(0, 2) > 2 * stored.stage_bytes(0, 2) - kv
    assert longer.stage_bytes(0, 2) - stored.stage_bytes(0, 2) == pytest.approx(kv / 16 * 64)


@pytest.mark.parametrize("seed", range(6))
def test_the_planner_is_exact_against_brute_force(tiny, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    speeds = list(rng.uniform(0.2, 4.0, n))
    latency = ["0.05ms", "2ms", "20ms"][seed % 3]
    whole = tiny.stored_bytes()
    memory = [f"{int(whole * rng.uniform(0.5, 1.5))}B" for _ in range(n)]
    c = cluster(speeds, memory, latency)
    costs = llm_costs(tiny.config, tiny.tensors, c, LlmCostOptions(12, 8))
    for objective, phase in (("decode", DECODE), ("ttft", PREFILL)):
        want = brute_force(costs, phase)
        if not np.isfinite(want):
            with pytest.raises(InfeasibleError):
                plan_pipeline(costs, objective)
            continue
        got = plan_pipeline(costs, objective)
        assert got.value == pytest.approx(want, rel=1e-12)
        assert stage_value(costs, got.stages, phase) == pytest.approx(got.value, rel=1e-12)
        pred = predict_pipeline(costs, got.stages)
        assert pred.fits and (pred.s_per_token if phase == DECODE else pred.ttft_s) == pytest.approx(got.value)


@pytest.mark.parametrize("seed", range(6))
def test_with_the_first_stage_on_given_devices_the_planners_stay_exact_against_brute_force(tiny, seed):
    """A run across hosts streams its tokens from the driver's host, so a plan that goes on after a lost
    device must start there (``leaders``): both planners find the best plan brute force finds among those
    whose first stage one of them leads."""
    from hetsplit.search.llm_pipeline import plan_streams, streams_value

    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(2, 5))
    whole = tiny.stored_bytes()
    c = cluster(list(rng.uniform(0.2, 4.0, n)), [f"{int(whole * rng.uniform(0.5, 1.5))}B" for _ in range(n)],
                ["0.05ms", "2ms", "20ms"][seed % 3])
    costs = llm_costs(tiny.config, tiny.tensors, c, LlmCostOptions(12, 8, streams=int(rng.choice([1, 4]))))
    plans = list(every_pipeline(costs))
    for value, solve in ((lambda st: stage_value(costs, st, DECODE), lambda lead: plan_pipeline(costs, leaders=lead)),
                         (lambda st: streams_value(costs, st), lambda lead: plan_streams(costs, leaders=lead))):
        if not plans:
            continue
        free = min(plans, key=value)        # the best plan's leader may not lead: the constraint binds
        leaders = [d for d in costs.devices if d != free[0].device]
        want = min((value(st) for st in plans if st[0].device in leaders), default=np.inf)
        if not np.isfinite(want):
            with pytest.raises(InfeasibleError):
                solve(leaders)
            continue
        got = solve(leaders)
        assert got.stages[0].device in leaders
        assert value(got.stages) == pytest.approx(want, rel=1e-12) and want >= value(free)
    with pytest.raises(UsageError, match="not devices of the cluster"):
        plan_pipeline(costs, leaders=["nowhere"])


def test_a_fast_device_alone_wins_over_a_slow_link_and_a_split_wins_when_memory_forces_it(tiny):
    costs = llm_costs(tiny.config, tiny.tensors, cluster([1, 1], latency="50ms"), LlmCostOptions(8, 8))
    choice = plan_pipeline(costs)
    assert len(choice.stages) == 1 and choice.value == pytest.approx(best_single(costs).value)
    half = f"{int(tiny.stored_bytes() * 0.7)}B"
    costs = llm_costs(tiny.config, tiny.tensors, cluster([1, 1], [half, half]), LlmCostOptions(8, 8))
    assert best_single(costs) is None and len(plan_pipeline(costs).stages) == 2


def test_local_devices_are_costed_by_the_probe_with_float32_weights(tiny):
    from hetsplit.cluster import load_cluster
    from hetsplit.costs import local_calibration
    from hetsplit.costs.llm_probe import StepProbe, layers_per_block
    from hetsplit.workflow.generate import PlanOptions, costed_cluster, plan_generation

    probe = StepProbe(call_s=1e-5, bytes_per_s=1e9, macs_per_s=1e10, prompt_call_s=1e-5)
    local = load_cluster("local")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(local_calibration.ENV, "on")          # the suite turns measuring this machine off
        mp.setattr("hetsplit.workflow.generate.host_probe", lambda *shape, **how: probe)
        costed, weight_bytes = costed_cluster(local, probe)
        plan = plan_generation(tiny, local, PlanOptions(8, 8, stages=1))
    assert weight_bytes == "float32" and costed.devices[0].params["mem_bandwidth"] == 1e9
    assert costed_cluster(local, None) == (local, "stored")
    # one decode block: its float32 weights at 1 GB/s (each layer memory-bound here) plus 13 layers' call
    f32 = sum(t.elements * 4 for n, t in tiny.tensors.items() if n.startswith("blk.0."))
    assert layers_per_block() == 13
    assert plan.costs.block_s[1, 0, 0] == pytest.approx(f32 / 1e9 + 13e-5, rel=0.05)


CPU_GPU = {"format": "hetsplit.cluster/1", "name": "cpu-gpu", "devices": [
    {"name": "cpu0", "kind": "cpu", "type": "local-cpu", "memory": "1GiB",
     "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}},
    {"name": "gpu0", "kind": "gpu", "type": "gpu", "memory": "8GiB",
     "params": {"peak_macs": "3e13/s", "mem_bandwidth": "4TB/s", "power_active": "700W"}}],
    "links": {"default": {"name": "pcie", "bandwidth": "8GB/s", "latency": "20us"}}}


def test_a_gpu_that_computes_here_is_costed_by_the_cuda_probe_and_only_then(tiny, monkeypatch):
    from hetsplit.costs import local_calibration
    from hetsplit.costs.llm_probe import StepProbe
    from hetsplit.runtime.hosts import HostMap
    from hetsplit.workflow import generate as gen

    cpu, gpu = StepProbe(1e-5, 1e9, 1e10, 1e-5), StepProbe(4e-6, 5e11, 2e12, 6e-6)
    both = cluster_from_dict(CPU_GPU)
    costed, weights = gen.costed_cluster(both, cpu, None, gpu, ("gpu0",))
    assert weights == "float32" and [d.params["mem_bandwidth"] for d in costed.devices] == [1e9, 5e11]
    assert costed.devices[1].params["overhead_s"] == 4e-6           # the launch-bound fixed cost per layer
    # no CUDA probe, or the GPU not one of this host's: its device model's figures stay
    assert gen.costed_cluster(both, cpu)[0].devices[1] == both.devices[1]
    assert gen.costed_cluster(both, None, None, gpu, ())[0] == both
    alone, _ = gen.costed_cluster(both, None, None, gpu, ("gpu0",))
    assert alone.devices[0] == both.devices[0] and alone.devices[1].params["overhead_s"] == 4e-6
    # which devices compute on this host's GPU: the worker's rule, less other hosts' and --cpu-only
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert gen.cuda_here(both) == ("gpu0",)
    assert gen.cuda_here(both, cpu_only=True) == () and gen.cuda_here(both, HostMap({"gpu0": "10.0.0.2"})) == ()
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert gen.cuda_here(both) == ()
    # planning asks for the CUDA probe only for the devices it names
    monkeypatch.setenv(local_calibration.ENV, "on")      # the suite turns measuring this machine off
    asked = []
    monkeypatch.setattr(gen, "host_probe", lambda *shape, cuda=False, executor="torch": asked.append(cuda) or (gpu if cuda else cpu))
    monkeypatch.setattr(gen, "host_messages", lambda *shape: None)
    plan = gen.plan_generation(tiny, both, gen.PlanOptions(8, 8, cuda_devices=("gpu0",)))
    assert sorted(asked) == [False, True] and plan.costs.devices == ["cpu0", "gpu0"]
    asked.clear()
    gen.plan_generation(tiny, both, gen.PlanOptions(8, 8))
    assert asked == [False]
    # measuring this machine turned off: no probe, every device keeps its own figures
    monkeypatch.setenv(local_calibration.ENV, "off")
    asked.clear()
    plan = gen.plan_generation(tiny, both, gen.PlanOptions(8, 8, cuda_devices=("gpu0",)))
    assert asked == [] and plan.costs.cluster == both


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cuda_probe_measures_a_launch_bound_step_on_a_real_gpu(tiny):
    from hetsplit.costs import llm_probe

    shape = llm_probe.ProbeShape(tiny.config, 6, 12)
    p = llm_probe.probe_torch_cuda.__wrapped__(shape, repeat=5)
    # a tiny block on a GPU is all kernel launches: its fixed cost per layer is microseconds, not zero
    assert p.bytes_per_s > 1e9 and p.macs_per_s > 1e9 and 1e-6 < p.call_s < 1e-3


def test_the_probe_charges_each_phase_block_what_a_block_of_the_models_shapes_took(tiny, monkeypatch):
    from hetsplit.cluster import load_cluster
    from hetsplit.costs import llm_probe
    from hetsplit.estimate.llm import LlmCostOptions
    from hetsplit.workflow.generate import costed_cluster

    gemv, gemm = 2e-4, 9e-4                    # seconds of one 1536 x 576 GEMV, one GEMM of the prompt's rows
    block = {1: 3e-3, 6: 8e-3}                 # a decode step's block, the prompt's (its 6 rows)
    seen = {}

    def streamed(rows: int, repeat: int, device: str, clock) -> tuple[float, float]:
        seen["rows"] = rows
        return gemv, gemm

    def block_step(shape, phase, repeat, device, clock) -> float:
        seen.setdefault("phases", []).append(phase)
        return block[phase.tokens]
    monkeypatch.setattr(llm_probe, "_streamed_s", streamed)
    monkeypatch.setattr(llm_probe, "_block_step_s", block_step)
    opts = LlmCostOptions(6, 16, "float32")
    shape = llm_probe.ProbeShape(tiny.config, 6, opts.phases()[1].context)
    p = llm_probe.probe_torch_cpu.__wrapped__(shape)
    n = 1536 * 576
    assert seen["rows"] == 6 and p.bytes_per_s == pytest.approx(4 * n / gemv) and p.macs_per_s == pytest.approx(6 * n / gemm)
    assert [(f.tokens, f.context) for f in seen["phases"]] == [(1, shape.context), (6, 6)]
    assert p.call_s > 0 and p.prompt_call_s > p.call_s
    costed, _ = costed_cluster(load_cluster("local"), p)
    costs = llm_costs(tiny.config, tiny.tensors, costed, opts)
    # each phase's block: all of its measured step, no more (the prompt's fixed cost is its own)
    assert costs.block_s[DECODE, 0, 0] == pytest.approx(block[1], rel=1e-9)
    assert costs.block_s[PREFILL, 0, 0] == pytest.approx(block[6], rel=1e-9)
    # a block slower than its weights' stream leaves no negative fixed cost
    monkeypatch.setattr(llm_probe, "_block_step_s", lambda shape, phase, repeat, device, clock: 0.0)
    got = llm_probe.probe_torch_cpu.__wrapped__(shape)
    assert got.call_s == 0.0 and got.prompt_call_s == 0.0


def test_a_device_without_a_prompt_figure_costs_both_phases_with_its_one_fixed_cost():
    from hetsplit.cluster.types import Device
    from hetsplit.estimate.llm_shares import phase_device

    dev = Device("d", "cpu", "t", 1 << 30, params={"overhead_s": 1e-5})
    assert phase_device(dev, PREFILL) is dev and phase_device(dev, DECODE) is dev
    both = Device("d", "cpu", "t", 1 << 30, params={"overhead_s": 1e-5, "prompt_overhead_s": 3e-5})
    assert phase_device(both, PREFILL).params["overhead_s"] == 3e-5 and phase_device(both, DECODE) is both


def test_plan_of_a_gguf_prints_the_plan_and_every_device_alone(tiny_gguf, tmp_path, capsys):
    import json

    from hetsplit.cli.main import main

    path = fast_and_slow(tmp_path / "c.yaml", slow_memory="1GiB")
    assert main(["plan", str(tiny_gguf), "--cluster", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stages"] == [{"device": "fast", "blocks": [0, 2]}] and doc["best_single"]["device"] == "fast"
    assert doc["alone"]["slow"]["s_per_token"] > doc["alone"]["fast"]["s_per_token"]
    assert main(["plan", str(tiny_gguf), "--cluster", str(path)]) == 0
    assert "fast alone (best single device)" in capsys.readouterr().out


def test_a_hop_is_costed_by_the_link_rule_its_wire_and_both_message_ends(tiny):
    from hetsplit.estimate.llm import TOKEN_BYTES

    c = cluster_from_dict({"format": "hetsplit.cluster/1", "name": "ends", "devices": [
        {"name": f"d{i}", "kind": "cpu", "type": "t", "memory": "1GiB",
         "params": {"peak_macs": "1e9/s", "mem_bandwidth": "1GB/s", "power_active": "5W"}} for i in range(2)],
        "links": {"default": {"name": "net", "bandwidth": "100MB/s", "latency": "2ms",
                              "message": {"cpu": "0.1ms", "byte": "1ns/B"}}}})
    costs = llm_costs(tiny.config, tiny.tensors, c, LlmCostOptions(16, 8))
    one = tiny.config.dim * 4
    # wire: 2 ms + bytes / 100 MB/s; each of the two ends: 0.1 ms + 1 ns per byte
    for phase, nbytes in ((DECODE, one), (PREFILL, 16 * one)):
        assert costs.hop_s[phase, 0, 1] == pytest.approx(2e-3 + nbytes / 1e8 + 2 * (1e-4 + nbytes * 1e-9))
        assert costs.hop_s[phase, 0, 0] == 0.0
    assert costs.back_s[1, 0] == pytest.approx(2e-3 + TOKEN_BYTES / 1e8 + 2 * (1e-4 + TOKEN_BYTES * 1e-9))
    pred = predict_pipeline(costs, [Stage("d0", 0, 1), Stage("d1", 1, 2)])
    assert pred.hops_s["d0->d1"] == pytest.approx([costs.hop_s[PREFILL, 0, 1], costs.hop_s[DECODE, 0, 1]])


def test_the_probe_takes_the_median_of_its_repeats_not_the_luckiest(monkeypatch):
    from hetsplit.costs import llm_probe

    ticks = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])       # three calls of 5, 1 and 3 s
    monkeypatch.setattr(llm_probe.time, "thread_time", lambda: next(ticks))
    assert llm_probe.typical_time(lambda: None, 3) == 3.0


def test_each_stage_is_throttled_to_its_devices_prefill_and_decode_time_at_one_dilation(tiny):
    from hetsplit.costs import local_calibration
    from hetsplit.costs.llm_probe import StepProbe
    from hetsplit.workflow.generate import PlanOptions, host_costs, plan_generation, stage_emulation

    probe = StepProbe(call_s=1e-5, bytes_per_s=1e9, macs_per_s=1e10, prompt_call_s=1e-5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(local_calibration.ENV, "on")          # the suite turns measuring this machine off
        mp.setattr("hetsplit.workflow.generate.host_probe", lambda *shape, **how: probe)
        for speeds, cores in (([0.05, 0.2], 4), ([50, 200], 4), ([1, 1], 1)):
            plan = plan_generation(tiny, cluster(speeds), PlanOptions(8, 8, stages=2))
            emu = stage_emulation(tiny, plan, cores=cores)
            here = host_costs(tiny, plan.costs)
            assert emu.prefill.dilation == emu.decode.dilation
            for phase, e in ((PREFILL, emu.prefill), (DECODE, emu.decode)):
                assert max(e.shares.values()) <= 1.0 and sum(e.shares.values()) <= max(cores - 0.5, 1.0) + 1e-9
                for d, s in enumerate(plan.stages):            # host time / share = device time x D
                    t, h = (c.stage_s(phase, d, s.first, s.stop) for c in (plan.costs, here))
                    assert h / e.shares[s.device] == pytest.approx(t * e.dilation)
            # the device's prefill-to-decode ratio is not the host's (stored vs float32 weights): two shares
            assert emu.prefill.shares != pytest.approx(emu.decode.shares)
            assert (emu.decode.dilation > 1.0) == (speeds[0] >= 1)  # devices faster than the worker here dilate time


def _brute_streams(costs) -> float:
    """Every ordered subset of devices, every cut: the least seconds per token over the streams."""
    from hetsplit.search.llm_pipeline import streams_value

    return min((streams_value(costs, stages) for stages in every_pipeline(costs)), default=np.inf)


@pytest.fixture(scope="module")
def five_blocks(tmp_path_factory):
    from llm_tiny import write_tiny_gguf

    return read_gguf(write_tiny_gguf(tmp_path_factory.mktemp("five") / "five.gguf", seed=5, blocks=5))


@pytest.mark.parametrize("seed", range(8))
def test_the_streams_planner_is_exact_against_brute_force(five_blocks, seed):
    """B streams at once: the binary search over caps finds the least period brute force finds, and its
    plan's prediction says so."""
    from hetsplit.search.llm_pipeline import plan_streams, streams_value

    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 5))
    whole = five_blocks.stored_bytes()
    memory = [f"{int(whole * rng.uniform(0.4, 1.5))}B" for _ in range(n)]
    c = cluster(list(rng.uniform(0.2, 4.0, n)), memory, ["0.05ms", "1ms", "20ms"][seed % 3])
    streams = int(rng.choice([1, 2, 4, 16]))
    costs = llm_costs(five_blocks.config, five_blocks.tensors, c, LlmCostOptions(12, 8, streams=streams))
    want = _brute_streams(costs)
    if not np.isfinite(want):
        with pytest.raises(InfeasibleError):
            plan_streams(costs)
        return
    got = plan_streams(costs)
    assert got.value == pytest.approx(want, rel=1e-12) and streams_value(costs, got.stages) == got.value
    pred = predict_pipeline(costs, got.stages)
    assert pred.fits and pred.streams == streams and 1 / pred.streams_tokens_per_s == pytest.approx(want, rel=1e-12)
    if streams == 1:
        assert got.value == pytest.approx(plan_pipeline(costs).value, rel=1e-12)


def _simulated_period(times: list[float], streams: int, rounds: int = 400) -> float:
    """Tokens of ``streams`` streams going round stations of fixed ``times`` (each serving one token at a
    time, first come first served): the mean time between tokens leaving the last station, over the last
    whole cycles."""
    free = [0.0] * len(times)
    ready = [0.0] * streams            # when each stream's next token may enter the first station
    done = []
    for _ in range(rounds):
        for s in sorted(range(streams), key=lambda i: ready[i]):
            t = ready[s]
            for k, dt in enumerate(times):
                t = max(t, free[k]) + dt
                free[k] = t
            ready[s] = t
            done.append(t)
    done.sort()
    k = streams * (rounds // 4)        # whole cycles (the pattern repeats every ``streams`` tokens), after warm-up
    return (done[-1] - done[-1 - k]) / k


@pytest.mark.parametrize("times, streams", [([3.0, 1.0, 2.0, 0.5], 1), ([3.0, 1.0, 2.0, 0.5], 2),
                                            ([3.0, 1.0, 2.0, 0.5], 8), ([1.0, 1.0, 1.0, 1.0], 3),
                                            ([5.0, 0.2, 0.3], 4)])
def test_the_streams_period_is_what_a_simulation_of_the_streams_gives(times, streams):
    from hetsplit.estimate.llm import streams_period

    want = _simulated_period(times, streams)
    assert streams_period(sum(times), max(times), streams) == pytest.approx(want, rel=1e-6)


def test_plan_of_a_gguf_for_streams_prints_their_tokens_per_s_and_refuses_streams_elsewhere(tiny_gguf, tmp_path,
                                                                                           capsys):
    import json

    from hetsplit.cli.main import main

    path = tmp_path / "c.yaml"
    path.write_text("format: hetsplit.cluster/1\nname: two\ndevices:\n"
                    "  - {name: a, kind: cpu, memory: 1GiB, peak_macs: 4e9/s, mem_bandwidth: 4GB/s, power_active: 5W}\n"
                    "  - {name: b, kind: cpu, memory: 1GiB, peak_macs: 4e9/s, mem_bandwidth: 4GB/s, power_active: 5W}\n"
                    "links:\n  default: {name: net, bandwidth: 1GB/s, latency: 10us}\n")
    assert main(["plan", str(tiny_gguf), "--cluster", str(path), "--streams", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["objective"] == "streams" and doc["streams"] == 4 and len(doc["stages"]) == 2  # two equal devices
    assert doc["predicted"]["streams_tokens_per_s"] > 1.5 * doc["alone"]["a"]["streams_tokens_per_s"]
    assert main(["plan", "resnet8", "--cluster", "local", "--streams", "4"]) == 2
    assert "--streams: only for an LLM checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("memory, want", [
    (["3GiB", "1GiB"], [("d0", 0, 3), ("d1", 3, 5)]),
    (["1GiB", "3GiB"], [("d1", 0, 3), ("d0", 3, 5)]),            # largest memory first
    (["2GiB", "2GiB", "2GiB"], [("d0", 0, 1), ("d1", 1, 3), ("d2", 3, 5)]),   # ties by name; floor of 5/3, 10/3
    (["1000GiB", "1GiB", "1GiB"], [("d0", 0, 4), ("d2", 4, 5)]),  # d1's run is empty: left out, as exo does
])
def test_the_memory_proportional_rule_cuts_blocks_as_exo_does(five_blocks, memory, want):
    """exo's ring-memory-weighted split: devices by memory, largest first; device i's blocks end at
    floor(L x its cumulative memory share), the last at L."""
    from hetsplit.search.llm_rules import memory_proportional, rule_stages

    costs = llm_costs(five_blocks.config, five_blocks.tensors, cluster([1.0] * len(memory), memory),
                      LlmCostOptions(8, 8))
    got = memory_proportional(costs)
    assert [(s.device, s.first, s.stop) for s in got] == want
    assert rule_stages(costs, "memory-proportional") == got
    predict_pipeline(costs, got)        # every block once, devices of the cluster


def test_the_memory_proportional_rule_needs_every_devices_memory_and_names_the_rule(five_blocks):
    from hetsplit.errors import UsageError
    from hetsplit.search.llm_rules import memory_proportional, rule_stages

    c = cluster([1.0, 1.0])
    c = replace(c, devices=[c.devices[0], replace(c.devices[1], memory_bytes=float("inf"))])
    costs = llm_costs(five_blocks.config, five_blocks.tensors, c, LlmCostOptions(8, 8))
    with pytest.raises(UsageError, match=r"devices \['d1'\] have no memory size"):
        memory_proportional(costs)
    with pytest.raises(UsageError, match="split rule 'even-ish': choose one of memory-proportional"):
        rule_stages(costs, "even-ish")


def test_plan_of_a_gguf_sets_exos_split_beside_the_plan_and_the_plan_is_no_slower(tiny_gguf, tmp_path, capsys):
    """A slow device with most of the memory: exo's rule gives it most blocks; the exact plan, predicted
    by the same estimate, is at least as fast, and the table prints both."""
    import json

    from hetsplit.cli.main import main

    path = fast_and_slow(tmp_path / "c.yaml", slow_memory="4GiB")
    assert main(["plan", str(tiny_gguf), "--cluster", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    exo = doc["rules"]["memory-proportional"]
    assert exo["stages"] == [{"device": "slow", "blocks": [0, 1]}, {"device": "fast", "blocks": [1, 2]}]
    assert doc["predicted"]["s_per_token"] < exo["predicted"]["s_per_token"]
    dllama = doc["rules"]["equal-slices"]               # distributed-llama's: both devices, equal slices
    assert [s["device"] for s in dllama["stages"][0]["shares"]] == ["fast", "slow"]
    assert doc["predicted"]["s_per_token"] < dllama["predicted"]["s_per_token"]
    assert main(["plan", str(tiny_gguf), "--cluster", str(path)]) == 0
    out = capsys.readouterr().out
    assert "memory-proportional: slow blocks 0-0 | fast blocks 1-1" in out
    assert "equal-slices: fast+slow blocks 0-1 tensor-parallel (fast 1 KV heads/" in out


def test_plan_of_a_gguf_plans_for_the_prompt_and_tokens_asked_and_refuses_more_than_the_context(tiny_gguf, tmp_path,
                                                                                             capsys):
    import json

    from hetsplit.cli.main import main

    path = fast_and_slow(tmp_path / "c.yaml", slow_memory="1GiB")
    docs = {}
    for prompt in (4, 48):
        assert main(["plan", str(tiny_gguf), "--cluster", str(path), "--prompt-tokens", str(prompt), "--tokens", "8",
                     "--json"]) == 0
        docs[prompt] = json.loads(capsys.readouterr().out)
    assert (docs[4]["prompt_tokens"], docs[4]["new_tokens"]) == (4, 8)
    assert docs[48]["predicted"]["ttft_s"] > docs[4]["predicted"]["ttft_s"]     # a longer prompt's prefill
    assert main(["plan", str(tiny_gguf), "--cluster", str(path), "--prompt-tokens", "100000"]) == 2
    assert "exceed the model's context" in capsys.readouterr().err
    assert main(["plan", "resnet8", "--cluster", "local", "--tokens", "8"]) == 2
    assert "only for an LLM checkpoint" in capsys.readouterr().err


def test_a_cluster_of_more_identical_devices_than_the_planner_takes_is_planned_over_the_first_ten(tiny):
    from hetsplit.cluster.local import local_cluster
    from hetsplit.search.llm_pipeline import MAX_DEVICES
    from hetsplit.workflow.generate import PlanOptions, alike_devices, plan_generation

    many = local_cluster([f"cpu{i}" for i in range(16)])           # the built-in local on a 16-core machine
    names, said = alike_devices(many)
    assert names == [f"cpu{i}" for i in range(MAX_DEVICES)] and "first 10 of 16 identical" in said
    plan = plan_generation(tiny, many, PlanOptions(4, 4, probe=False))
    assert plan.how.endswith(said) and {s.device for s in plan.stages} <= set(names)
    # devices that differ are not narrowed: the planner refuses them by name
    spec = {"format": "hetsplit.cluster/1", "name": "mixed", "devices": [
        {"name": f"d{i}", "kind": "cpu", "memory": "1GiB", "params": {"peak_macs": f"{1 + i % 2}e10/s",
                                                                      "mem_bandwidth": "20GB/s", "power_active": "10W"}}
         for i in range(12)],
        "links": {"default": {"name": "lan", "bandwidth": "1GB/s", "latency": "1ms"}}}
    mixed = cluster_from_dict(spec)
    assert alike_devices(mixed) == (mixed.names, "")
    with pytest.raises(UsageError, match="at most 10 devices"):
        plan_generation(tiny, mixed, PlanOptions(4, 4, probe=False))
