"""plan_emulation: CPU shares and time dilation from the plan's costs and the host's (hand-made problems)."""

from __future__ import annotations

import numpy as np
import pytest

from factories import chain_graph, cluster, problem
from hetsplit.errors import UsageError
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime.device_emulation import DeviceEmulation, plan_emulation
from hetsplit.runtime.netem import LinkMatrix

GRAPH = chain_graph([8, 8, 8, 8])
ZERO = np.zeros((4, 1))


def problems(fast_ms: float, slow_ms: float, host_ms: float = 1.0):
    """Plan cluster d0 (fast), d1 (slow), d2 (fast, left idle); the host's one type: ``host_ms`` per layer."""
    cl = cluster(["fast", "slow", "fast"])
    own = problem(GRAPH, cl, np.array([[fast_ms, slow_ms]] * 4) * 1e-3, np.zeros((4, 2)))
    host = problem(GRAPH, cluster(["host"]), np.full((4, 1), host_ms * 1e-3), ZERO)
    return own, host


PIPE = Plan("toy", "toy-cluster", "hand", [Stage("d0", ["l0", "l1"]), Stage("d1", ["l2", "l3"])])


def test_shares_reproduce_each_devices_time_at_one_dilation():
    own, host = problems(0.5, 4.0)          # d0: 1 ms vs host 2 ms (ratio 2); d1: 8 ms vs 2 ms (ratio 0.25)
    emu = plan_emulation(PIPE, own, host, cores=4)
    assert emu.dilation == pytest.approx(2.0)                      # the fastest device sets D: its share is 1
    assert emu.shares == pytest.approx({"d0": 1.0, "d1": 0.125})
    assert "d2" not in emu.shares                                    # no layers, no throttle
    for dev, t_dev in (("d0", 1e-3), ("d1", 8e-3)):                 # host time / share = device time x D
        assert 2e-3 / emu.shares[dev] == pytest.approx(t_dev * emu.dilation)
    assert "toy-cluster host" in emu.host


def test_devices_slower_than_the_host_need_no_dilation():
    own, host = problems(4.0, 8.0)
    emu = plan_emulation(PIPE, own, host, cores=4)
    assert emu.dilation == 1.0 and emu.shares == pytest.approx({"d0": 0.25, "d1": 0.125})


def test_the_shares_leave_half_a_core_to_the_driver():
    own, host = problems(1.25, 1.25)         # host 2 ms / device 2.5 ms: 0.8 of a core each, 1.6 together
    emu = plan_emulation(PIPE, own, host, cores=1)
    assert sum(emu.shares.values()) == pytest.approx(0.5)
    assert emu.dilation == pytest.approx(3.2) and emu.shares == pytest.approx({"d0": 0.25, "d1": 0.25})
    emu2 = plan_emulation(PIPE, own, host, cores=2)
    assert sum(emu2.shares.values()) == pytest.approx(1.5) and emu2.dilation == pytest.approx(1.6 / 1.5)
    assert plan_emulation(PIPE, own, host, cores=3).dilation == 1.0


def test_a_mapping_device_runs_the_union_of_its_layers():
    own, host = problems(0.5, 4.0)
    mapping = Plan("toy", "toy-cluster", "hand", assign={"l0": "d0", "l1": "d1", "l2": "d0", "l3": "d0"})
    emu = plan_emulation(mapping, own, host, cores=8)
    # d0: 3 layers, 1.5 ms vs host 3 ms (ratio 2); d1: 1 layer, 4 ms vs 1 ms (ratio 0.25)
    assert emu.dilation == pytest.approx(2.0) and emu.shares == pytest.approx({"d0": 1.0, "d1": 0.125})


def test_bad_emulations_are_refused():
    with pytest.raises(UsageError, match="dilation"):
        DeviceEmulation({"a": 0.5}, 0.5)
    with pytest.raises(UsageError, match="share"):
        DeviceEmulation({"a": 1.5}, 1.0)
    own, host = problems(0.0, 4.0)
    with pytest.raises(UsageError, match="d0"):
        plan_emulation(PIPE, own, host, cores=4)


def test_emulated_metrics_and_dilated_links():
    from hetsplit.plan.types import Metrics
    from hetsplit.runtime.report import DeviceRun, EmulatedRun, RunReport
    from hetsplit.workflow.run import emulated_rows

    report = RunReport("m", [DeviceRun("d0", 0.2, 0.2)], [], 4, 10.0, 0.4, 0.8, [], None, 0.0)
    emu = EmulatedRun.of(report, 4.0)
    assert emu == EmulatedRun(4.0, 40.0, 0.1, 0.2, {"d0": 0.05})
    predicted = Metrics(20.0, 0.05, "stage d0", 0.1, 1.0, {"d0": 1.0}, {"d0": 0.1}, {"d0": 1.0}, True, 0.1)
    assert [r.ratio for r in emulated_rows(predicted, emu)] == pytest.approx([2.0, 1.0, 0.5])
    links = LinkMatrix.uniform(3, 1e6, 1e-3).dilated(4.0)
    assert links.bandwidth[1, 2] == 2.5e5 and links.latency_s[1, 2] == 4e-3 and np.isinf(links.bandwidth[0, 1])


def test_cli_refuses_emulate_devices_where_it_cannot_work(monkeypatch, capsys):
    from hetsplit.cli.main import main
    from hetsplit.runtime import cpu_throttle

    assert main(["run", "no-plan.json", "vgg8", "--emulate-devices", "--threads", "2"]) == 2
    assert "--threads" in capsys.readouterr().err
    monkeypatch.setattr(cpu_throttle, "throttle_available", lambda: "CPU throttling needs root (test)")
    assert main(["run", "no-plan.json", "vgg8", "--emulate-devices"]) == 2
    assert "needs root (test)" in capsys.readouterr().err


def test_shards_are_costed_by_the_hosts_model():
    """A tensor-parallel plan's shards, on the host: each device's time is the host model's cost of
    exactly its tasks (the oracle: the host problem's task costs of the plan's TaskGraph on the
    host's graph, summed: the host runs the exported float model, the chips an int8 deployment)."""
    from hetsplit.estimate.task_costs import task_costs
    from hetsplit.plan.check import check_plan
    from hetsplit.runtime.device_emulation import device_times
    from hetsplit.search import make_partitioner
    from hetsplit.workflow import load_problem

    own = load_problem("tinyllama-42m", "siracusa-8")
    host = load_problem("tinyllama-42m", "local")
    plan = make_partitioner("tensor-parallel").solve(own)[0]
    tg = check_plan(host.graph, own.cluster, plan)
    per_task = task_costs(host, tg).time_s[:, 0]
    expected = {d: 0.0 for d in plan.devices}
    for k, task in enumerate(tg.tasks):
        expected[own.cluster.names[task.device]] += float(per_task[k])
    got = device_times(plan, own, host)
    assert set(got) == set(expected)
    assert {d: h for d, (_, h) in got.items()} == pytest.approx(expected, rel=1e-12)
