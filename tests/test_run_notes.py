"""run --compare's notes follow the numbers: above/below by the sign, pipeline efficiency at most 100%."""

from __future__ import annotations

import pytest

from dataclasses import replace

from hetsplit.plan.types import Metrics
from hetsplit.runtime.measure import stage_bound
from hetsplit.runtime.report import DeviceRun, RunReport
from hetsplit.workflow.run_notes import overhead_note, versus


def _report(throughput: float, bound: float = 0.0, driver_s: float = 0.6e-3, extra_s: float = 0.4e-3) -> RunReport:
    devices = [DeviceRun(f"local-cpu{i}", 2e-3, 2e-3, cpu_per_input_s=2e-3 + extra_s) for i in range(2)]
    return RunReport("m", devices, [], 10, throughput, 1.0, 1.0, [], None, bound, driver_cpu_per_input_s=driver_s,
                     stage_bound_by="stage local-cpu0")


def metrics(throughput: float, compute: dict[str, float]) -> Metrics:
    """A plan's metrics with ``throughput`` and per-device ``compute`` (the rest nominal)."""
    return Metrics(throughput, 1 / throughput, "stage", 0.01, 1.0, {d: 0.5 for d in compute}, compute,
                   {d: 1.0 for d in compute}, True, 0.01)


@pytest.mark.parametrize("measured, word", [(550.0, "above"), (130.0, "below"), (273.0, "matches")])
def test_versus_words_the_sign(measured, word):
    text = versus(measured, 272.0)
    assert word in text and f"{measured / 272.0:.2f}x" in text
    assert ("above" in text) + ("below" in text) + ("matches" in text) == 1


def test_overhead_note_says_above_when_the_run_beats_the_prediction():
    note = overhead_note(_report(600.0), cores=2, predicted_throughput=272.0)
    assert note is not None and "above it" in note and "below" not in note and "falls below" not in note
    assert "2.21x the prediction" in note and "35%" in note


def test_overhead_note_says_below_when_the_run_falls_short():
    note = overhead_note(_report(200.0), cores=2, predicted_throughput=272.0)
    assert note is not None and "below it" in note and "above" not in note and "0.74x the prediction" in note


def test_overhead_note_without_a_prediction_names_no_direction():
    note = overhead_note(_report(200.0), cores=2)
    assert note is not None and "above" not in note and "below" not in note


def test_pipeline_efficiency_is_capped_and_the_cap_explained():
    over = _report(605.0, bound=100.0)
    assert over.pipeline_efficiency == 1.0 and over.over_stage_bound == pytest.approx(6.05)
    note = over.efficiency_note()
    assert note is not None and "6.05x the stage bound" in note and "stage local-cpu0" in note
    doc = over.to_dict()
    assert doc["pipeline_efficiency"] == 1.0 and doc["efficiency_note"] == note
    under = _report(80.0, bound=100.0)
    assert under.pipeline_efficiency == pytest.approx(0.8) and under.efficiency_note() is None
    assert _report(80.0, bound=0.0).pipeline_efficiency == 0.0


def test_stage_bound_names_the_slowest_stage_or_link_and_skips_the_driver():
    devices = [DeviceRun("a", 2e-3, 2e-3), DeviceRun("b", 1e-3, 1e-3)]
    assert stage_bound(devices, {("a", "b"): 4e-3, ("driver", "a"): 9e-3}) == (pytest.approx(250.0), "link a->b")
    assert stage_bound(devices, {("a", "b"): 1e-3}) == (pytest.approx(500.0), "stage a")
    assert stage_bound([], {}) == (0.0, "")


def test_a_burst_of_outputs_is_named_with_the_whole_streams_rate():
    """Few inputs of a deep mapping reach the driver together: their spacing beats the bound while the
    stream as a whole, first input sent to last output, stays within it; the note says so and gives
    that rate. A stream that beat the bound overall keeps the overlapping-spans explanation."""
    burst = replace(_report(106.0, bound=19.2), stream_throughput=17.5)
    note = burst.efficiency_note()
    assert note is not None and "burst" in note and "17.5/s" in note and "10 inputs are too few" in note
    assert "spans that overlap" not in note
    steady = replace(_report(106.0, bound=19.2), stream_throughput=60.0)
    note = steady.efficiency_note()
    assert note is not None and "spans that overlap" in note and "burst" not in note


def test_stream_rate_is_the_streamed_inputs_over_first_sent_to_last_output():
    from hetsplit.runtime.measure import stream_rate

    doc = {"t_in": [0.0, 1.0, 1.0, 1.0, 1.0], "t_out": [0.5, 2.9, 3.0, 3.0, 3.0], "latency_inputs": 1}
    assert stream_rate(doc) == pytest.approx(4 / 2.0)
    assert stream_rate({**doc, "t_out": [0.5]}) is None


def test_compare_gives_a_many_segment_devices_compute_beyond_the_prediction_per_segment():
    """The H200 mapping's figures: cpu0 computed 4.47 ms per input in 10 segments against 2.07 ms predicted,
    0.24 ms per segment beyond its layers, set against the 0 the closed form charges; a one-segment device
    gets no such row."""
    from hetsplit.workflow.run import plan_rows

    devices = [DeviceRun("cpu0", 4.47e-3, 4.47e-3, segments=10), DeviceRun("gpu0", 2.84e-3, 2.84e-3, segments=1)]
    report = RunReport("m", devices, [], 10, 120.0, 0.02, 0.02, [], None, 0.0)
    rows = plan_rows(report, metrics(380.0, {"cpu0": 2.07e-3, "gpu0": 3.41e-3}))
    per_segment = [r for r in rows if "per segment" in r.metric]
    assert [r.metric for r in per_segment] == ["compute cpu0 beyond the prediction, per segment (10 per input) (s)"]
    assert per_segment[0].measured == pytest.approx(0.24e-3) and per_segment[0].predicted == 0.0
    assert per_segment[0].ratio is None
