"""What the LLM worker program's messages and syncs cost: the probe (``runtime.llm_message_probe``), the
cluster it costs (``workflow.generate.costed_cluster``) and the estimate charging its figures by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.costs.llm_probe import StepProbe
from hetsplit.estimate.llm import DECODE, PREFILL, LlmCostOptions, Stage, StageShare, llm_costs, predict_pipeline
from hetsplit.estimate.llm_shares import SYNC_PARAM, equal_shares
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.runtime.llm_message_probe import LlmMessageProbe, sync_beyond_ends
from hetsplit.workflow.generate import costed_cluster

PROBE = StepProbe(call_s=1e-5, bytes_per_s=1e9, macs_per_s=1e10, prompt_call_s=1e-5)
MESSAGES = LlmMessageProbe(end_s=3e-5, end_byte_s=2e-10, hop_s={}, end_cpu_s=2.5e-5, sync_cpu_s=1.2e-4,
                           sync_wall_s=4e-4, sync_s=2.8e-4)
LATENCY, BANDWIDTH = 1.5e-4, 1e9


def mixed(n_local: int = 2):
    """``n_local`` local-cpu devices and one other, every link 150 us, 1 GB/s; the local devices' links
    125 us of CPU per message end (the mapping runtime's figure, as the ``local`` built-in gives), the
    other device's none."""
    devices = [{"name": f"c{i}", "kind": "cpu", "type": "local-cpu", "memory": "1GiB",
                "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}}
               for i in range(n_local)]
    devices.append({"name": "gpu", "kind": "cpu", "type": "other", "memory": "1GiB",
                    "params": {"peak_macs": "1e11/s", "mem_bandwidth": "50GB/s", "power_active": "10W"}})
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": "mixed", "devices": devices,
                              "links": {"default": {"name": "net", "bandwidth": "1GB/s", "latency": "150us"},
                                        "overrides": [{"between": [f"c{i}" for i in range(n_local)], "medium": {
                                            "name": "loopback", "bandwidth": "1GB/s", "latency": "150us",
                                            "message": {"cpu": "125us", "byte": 0.0}}}]}})


@pytest.fixture(scope="module")
def tiny(tiny_gguf):
    return read_gguf(tiny_gguf)


@pytest.mark.processes
def test_the_probe_measures_a_positive_bounded_message_and_sync(tiny):
    from hetsplit.runtime.llm_message_probe import probe_llm_messages

    p = probe_llm_messages.__wrapped__(tiny.config, 8, 12, rounds=40)
    vector = tiny.config.dim * 4
    assert set(p.hop_s) == {vector, 8 * vector}
    assert 0 < p.end_s < 5e-3 and 0 <= p.end_byte_s < 1e-7           # a loopback message: microseconds, not more
    assert all(0 < h < 1e-2 for h in p.hop_s.values())
    assert 0 < p.end_cpu_s < 5e-3 and 0 <= p.sync_cpu_s < 1e-2
    assert p.sync_s == sync_beyond_ends(p.sync_wall_s, p.sync_cpu_s, p.end(vector)) and p.sync_s < 1e-2
    assert p.end(1000) == pytest.approx(p.end_s + 1000 * p.end_byte_s)


def test_a_sync_loses_its_wall_beyond_its_four_ends_and_never_less_than_its_cpu():
    assert sync_beyond_ends(1e-3, 1e-4, 1e-4) == pytest.approx(6e-4)     # waits to be woken: wall, not CPU
    assert sync_beyond_ends(3e-4, 1e-4, 1e-4) == 1e-4                    # the wall within the ends: its CPU


def test_ends_between_local_devices_are_the_probes_and_the_others_keep_the_links():
    c = mixed()
    costed, weights = costed_cluster(c, PROBE, MESSAGES)
    assert weights == "float32"
    assert costed.message_cpu_s[0, 1] == MESSAGES.end_s and costed.message_cpu_s[1, 0] == MESSAGES.end_s
    assert costed.message_cpu_byte_s[0, 1] == MESSAGES.end_byte_s
    assert c.message_cpu_s[0, 1] == pytest.approx(125e-6)
    assert costed.message_cpu_s[0, 2] == costed.message_cpu_s[2, 1] == 0.0      # not both local: as the link says
    assert np.all(np.diag(costed.message_cpu_s) == 0)
    assert [d.params.get(SYNC_PARAM) for d in costed.devices] == [MESSAGES.sync_s] * 2 + [None]
    assert costed.latency_s[0, 1] == pytest.approx(LATENCY)                   # the link's latency stays on top
    plain, _ = costed_cluster(c, PROBE)                                         # no message probe: the links' figures
    assert plain.message_cpu_s[0, 1] == pytest.approx(125e-6) and SYNC_PARAM not in plain.devices[0].params
    assert costed.links.end_s[0] == MESSAGES.end_s and plain.links.end_s[0] == pytest.approx(125e-6)


def test_the_estimate_charges_the_probes_ends_and_each_members_sync_by_hand(tiny):
    """Two local-cpu devices, one tensor-parallel stage then a hop to the other device: every figure by hand."""
    cfg = tiny.config
    costed, weights = costed_cluster(mixed(), PROBE, MESSAGES)
    opts = LlmCostOptions(8, 8, weights)
    costs = llm_costs(cfg, tiny.tensors, costed, opts)
    bare = llm_costs(cfg, tiny.tensors, costed_cluster(mixed(), PROBE)[0], opts)     # the same, no sync_s
    s = MESSAGES.sync_s
    assert np.allclose(costs.shares.attn_s[:, :2], bare.shares.attn_s[:, :2] + s)  # each half, any share size
    assert np.allclose(costs.shares.ffn_s[:, :2], bare.shares.ffn_s[:, :2] + s)
    assert np.allclose(costs.shares.attn_s[:, 2], bare.shares.attn_s[:, 2])      # not a local device: none
    assert np.array_equal(costs.shares.head_s, bare.shares.head_s)

    shares = equal_shares(costs.shares, 2)
    first = Stage("c0", 0, 1, (StageShare("c0", shares[0]), StageShare("c1", shares[1])))
    stages = [first, Stage("gpu", 1, cfg.blocks)]
    pred = predict_pipeline(costs, stages)
    for phase, rows in ((PREFILL, 8), (DECODE, 1)):
        nbytes = rows * cfg.dim * 4
        end = MESSAGES.end_s + MESSAGES.end_byte_s * nbytes                  # between the two local devices
        wire = LATENCY + nbytes / BANDWIDTH
        sync = (end + wire + end) + (end + wire + end)                      # the member's partial up, the sum down
        counts = dict(costs.member_counts(first))              # device -> (KV-head groups, FFN units, vocab units)
        halves = [max(bare.shares.attn_s[phase, d, counts[d][0]] for d in (0, 1)) + s,
                  max(bare.shares.ffn_s[phase, d, counts[d][1]] for d in (0, 1)) + s]
        stage = sum(halves) + 2 * sync + max(costs.embed_s[phase, d] for d in (0, 1))
        assert costs.stage_time(phase, first) == pytest.approx(stage, rel=1e-12)
        assert pred.hops_s["c0+c1 syncs"][phase] == pytest.approx(2 * sync, rel=1e-12)
        hop = end + wire                    # c0 to the other device: c0's end is the probe's, the other's none
        assert pred.hops_s["c0->gpu"][phase] == pytest.approx(hop, rel=1e-12)
        for d in (0, 1):                     # each member's compute: its halves, each with its sync's CPU
            own = bare.shares.attn_s[phase, d, counts[d][0]] + bare.shares.ffn_s[phase, d, counts[d][1]] + 2 * s + \
                costs.embed_s[phase, d]
            assert pred.compute_s[f"c{d}"][phase] == pytest.approx(own, rel=1e-12)


def test_a_pipeline_hop_between_local_devices_is_the_probes_two_ends_and_the_wire(tiny):
    costed, weights = costed_cluster(mixed(), PROBE, MESSAGES)
    costs = llm_costs(tiny.config, tiny.tensors, costed, LlmCostOptions(8, 8, weights))
    pred = predict_pipeline(costs, [Stage("c0", 0, 1), Stage("c1", 1, tiny.config.blocks)])
    nbytes = tiny.config.dim * 4
    end = MESSAGES.end_s + MESSAGES.end_byte_s * nbytes
    assert pred.hops_s["c0->c1"][DECODE] == pytest.approx(2 * end + LATENCY + nbytes / BANDWIDTH, rel=1e-12)
    back = 2 * (MESSAGES.end_s + MESSAGES.end_byte_s * 8) + LATENCY + 8 / BANDWIDTH     # the token's 8 bytes
    assert pred.hops_s["c1->c0"][DECODE] == pytest.approx(back, rel=1e-12)


def test_a_negative_sync_parameter_is_refused(tiny):
    from dataclasses import replace

    from hetsplit.errors import PlanError

    c = mixed()
    bad = replace(c, devices=[replace(d, params={**d.params, SYNC_PARAM: -1.0}) for d in c.devices])
    with pytest.raises(PlanError, match=SYNC_PARAM):
        llm_costs(tiny.config, tiny.tensors, bad, LlmCostOptions(8, 8))


@pytest.mark.processes
def test_a_probe_whose_processes_fail_says_so(tiny, monkeypatch):
    from hetsplit.errors import HetsplitError
    from hetsplit.runtime import llm_message_probe

    monkeypatch.setattr(llm_message_probe, "MODULE", "hetsplit.no_such_module")
    with pytest.raises(HetsplitError, match="message probe's rank 0 failed .*No module named"):
        llm_message_probe.measure(tiny.config, (64,), 4, rounds=4)
