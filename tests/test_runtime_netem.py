"""Emulated links (namespaces + veth + tc), for pipelines and mappings alike: measured transfer times follow
the link model within 20%."""

from __future__ import annotations

import pytest

from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import LinkMatrix, RunOptions, emulation_available, run_plan
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.toy import toy_model

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
WHY = emulation_available()


def two_stage_toy(folder, size: int):
    """The toy model cut after its second layer: 2 x 32 x size^2 x 4 bytes cross the cut."""
    path = folder / f"wide{size}.onnx"
    graph = toy_model(path, channels=32, size=size)
    n = graph.names
    return Plan(graph.name, "emu", "hand", [Stage("edge", n[:2]), Stage("cloud", n[2:])]), graph, path


# Transfers big enough that the link, not the per-message software cost of ~1-3 ms on a busy 2-core
# machine, sets their time: 1 MiB at 3.5 MB/s (0.3 s), 4 MiB at 1 Gb/s (34 ms). Every input is sent
# alone (latency inputs): streamed, a message can wait on the shaped link behind the one before, and its
# time counts that wait (at 1 Gb/s in CI, beside other tests: 33-94 ms against 34, the median 1.2x).
@pytest.mark.alone     # judges the shaped link's speed: beside other tests, at 1 Gb/s it once ran 1.2x (CI)
@pytest.mark.skipif(WHY is not None, reason=f"link emulation unavailable: {WHY}")
@pytest.mark.parametrize("bandwidth, latency_s, inputs, size", [(3.5e6, 0.002, 4, 64), (125e6, 0.0005, 8, 128)],
                         ids=["3.5MB/s", "1Gb/s"])
def test_emulated_link_follows_the_link_model(tmp_path, bandwidth, latency_s, inputs, size):
    plan, graph, path = two_stage_toy(tmp_path, size)
    links = LinkMatrix.uniform(3, bandwidth, latency_s)
    report = run_plan(plan, graph, path, RunOptions(inputs=inputs, latency_inputs=inputs, timeout_s=30, links=links,
                                                    run_dir=tmp_path / "run"))
    assert report.verify.ok
    hop = next(h for h in report.hops if (h.src, h.dst) == ("edge", "cloud"))
    predicted = latency_s + hop.nbytes / bandwidth
    assert hop.nbytes == graph.cut_bytes[2]
    assert 0.8 <= hop.wire_s / predicted <= 1.2, (hop.wire_s, predicted, hop.wire_all_s)
    assert not processes_of(tmp_path / "run")


@pytest.mark.alone     # judges the shaped links' speed
@pytest.mark.skipif(WHY is not None, reason=f"link emulation unavailable: {WHY}")
def test_a_mapping_runs_over_emulated_links_at_their_bandwidth(tmp_path):
    """Layers alternating between two devices (messages both ways, 2 x 512 KiB each way per input) over a
    3.5 MB/s link: verified, and each link busy for its bytes at the link's bandwidth within 20%. Every
    input is sent alone (latency inputs), so no message waits behind another input's on the shaped link:
    streamed, one of the four a -> b messages sometimes queued behind the one before (0.29 s against
    0.13 s), moving the mean by up to 25% (it failed once in CI at 1.25)."""
    path = tmp_path / "toy.onnx"
    graph = toy_model(path, channels=32, size=64)
    on_a = {"stem", "b0_conv1", "b1_conv2", "b1_add", "pool", "fc"}
    plan = Plan(graph.name, "emu", "hand", assign={n: "a" if n in on_a else "b" for n in graph.names})
    bandwidth, latency_s = 3.5e6, 0.002
    report = run_plan(plan, graph, path, RunOptions(inputs=3, latency_inputs=3, timeout_s=30,
                                                    links=LinkMatrix.uniform(3, bandwidth, latency_s),
                                                    run_dir=tmp_path / "run"))
    assert report.verify.ok and report.plan_kind == "mapping"
    links = {(x.src, x.dst): x for x in report.links}
    for pair in (("a", "b"), ("b", "a")):
        link = links[pair]
        assert link.messages == 2 and link.nbytes == 2 * 32 * 64 * 64 * 4
        predicted = link.nbytes / bandwidth + link.messages * latency_s
        assert 0.8 <= link.wire_mean_s / predicted <= 1.2, (pair, link, predicted)
    assert not processes_of(tmp_path / "run")


@pytest.mark.skipif(WHY is None, reason="link emulation is available here")
def test_emulation_says_why_it_cannot_run():
    assert "root" in WHY or "ip" in WHY or "tc" in WHY or "namespace" in WHY
