"""Presets: every figure has a source, the figures match the papers and datasheets (checked by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsplit.cluster import Device, device_preset_names, get_medium, load_preset, preset_names
from hetsplit.cluster.presets import MEDIUM
from hetsplit.errors import ClusterError, HetsplitError

OWN_DEVICE_PRESETS = ("xeon-w3323", "rtx3070ti", "xavier-nx-cpu", "xavier-nx-gpu")
MEDIA = ("pcie5", "hb-wcc", "lb-wcc", "mipi", "gbe", "jetson-shm")


@pytest.mark.parametrize("name", preset_names())
def test_every_figure_has_a_source(name):
    p = load_preset(name)
    assert p.sources, name
    for key, source in p.sources.items():
        assert source.strip(), f"{name}: {key} has no source"
    if p.is_medium:
        assert set(p.sources) == {"bandwidth", "latency", "energy"}
    else:
        assert "memory" in p.sources
        assert {f"params.{k}" for k in p.params} == set(p.sources) - {"memory"}
        assert p.memory_bytes > 0


def test_presets_of_the_papers_exist():
    names = preset_names()
    for n in OWN_DEVICE_PRESETS + MEDIA:
        assert n in names
    assert set(preset_names(MEDIUM)) >= set(MEDIA)
    assert set(device_preset_names()) >= set(OWN_DEVICE_PRESETS)
    assert not set(device_preset_names()) & set(preset_names(MEDIUM))


@pytest.mark.parametrize("name, bandwidth, energy_per_byte", [
    ("pcie5", 64e9, 6.5e-12 * 8),       # DONNA Table I: 64 GB/s, 6.5 pJ/bit = 52 pJ/byte
    ("hb-wcc", 1e9, 0.1e-6 * 8),        # 1 GB/s, 0.1 uJ/bit = 0.8 uJ/byte
    ("lb-wcc", 3.5e6, 50e-6 * 8),       # 3.5 MB/s, 50 uJ/bit = 400 uJ/byte
    ("mipi", 0.5e9, 100e-12),           # Bochem et al.: 0.5 GB/s, 100 pJ/byte
    ("gbe", 125e6, 1.5e-9 * 8),         # 1 Gb/s raw; 1.5 nJ/bit is an assumption (stated in the file)
])
def test_media_figures(name, bandwidth, energy_per_byte):
    m = get_medium(name)
    assert m.name == name
    assert m.bandwidth == pytest.approx(bandwidth)
    assert m.energy_per_byte == pytest.approx(energy_per_byte)
    assert m.source


def test_lb_wcc_by_hand():
    m = get_medium("lb-wcc")
    assert m.energy_per_byte == pytest.approx(4e-4)        # 50e-6 J/bit x 8 bit/byte
    assert m.transfer_time(3.5e6) == pytest.approx(1.0)   # 3.5 MB at 3.5 MB/s
    assert m.transfer_energy(1000) == pytest.approx(0.4)


def test_gbe_energy_says_it_is_an_assumption():
    assert "assumption" in load_preset("gbe").sources["energy"]


@pytest.mark.parametrize("name, peak_macs, mem_bandwidth, power, memory", [
    ("xeon-w3323", 12 * 3.5e9 * 2 * 16, 8 * 25.6e9, 220.0, 64 * 2**30),
    ("rtx3070ti", 21.7e12 / 2, 608e9, 290.0, 8 * 2**30),
    ("xavier-nx-cpu", 6 * 1.4e9 * 8, 59.7e9, 11.9, 8 * 2**30),
    ("xavier-nx-gpu", 384 * 1.1e9, 59.7e9, 10.0, 8 * 2**30),
])
def test_cpu_gpu_figures_by_hand(name, peak_macs, mem_bandwidth, power, memory):
    p = load_preset(name)
    assert p.model == "roofline" and p.type == name
    assert p.params["peak_macs"] == pytest.approx(peak_macs)
    assert p.params["mem_bandwidth"] == pytest.approx(mem_bandwidth)
    assert p.params["power_active"] == pytest.approx(power)
    assert p.memory_bytes == pytest.approx(memory)
    assert "assumption" in p.sources["params.efficiency"]


@pytest.mark.parametrize("name", OWN_DEVICE_PRESETS)
def test_roofline_model_accepts_the_preset(name):
    from hetsplit.costs.models.roofline import RooflineParams

    p = load_preset(name)
    dev = Device(name="d0", kind=p.kind, type=p.type, memory_bytes=p.memory_bytes, model=p.model,
                 params=p.params, preset=p.name)
    rp = RooflineParams.from_device(dev)
    assert rp.peak_macs == p.params["peak_macs"]
    assert all(0 < v <= 1 for v in rp.efficiency.values())
    assert 0 < rp.mem_efficiency <= 1


def test_thesis_power_is_the_mean_of_table_2():
    watts = [0.352 / 28.3e-3, 1.959 / 122.46e-3, 1.026 / 138.68e-3]
    assert load_preset("xavier-nx-cpu").params["power_active"] == pytest.approx(sum(watts) / 3, abs=0.05)


# ---- errors in preset files ------------------------------------------------------------------

GOOD = """format: hetsplit.preset/1
name: my-cpu
kind: cpu
model: roofline
memory: {value: 16GiB, source: "datasheet"}
params:
  peak_macs: {value: 1e11/s, source: "datasheet"}
"""


def write(tmp_path: Path, text: str, name: str = "my-cpu.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_preset_file_by_path(tmp_path):
    p = load_preset(write(tmp_path, GOOD))
    assert p.name == "my-cpu" and p.params["peak_macs"] == 1e11 and p.memory_bytes == 16 * 2**30
    assert load_preset("my-cpu.yaml", base_dir=tmp_path).name == "my-cpu"


@pytest.mark.parametrize("old, new, fragment", [
    ('peak_macs: {value: 1e11/s, source: "datasheet"}', "peak_macs: {value: 1e11/s}",
     "params.peak_macs.source: every figure needs a source"),
    ('peak_macs: {value: 1e11/s, source: "datasheet"}', "peak_macs: 1e11/s",
     "params.peak_macs: write it as {value: '1e11/s', source:"),
    ('peak_macs: {value: 1e11/s, source: "datasheet"}', 'peak_macs: {value: 1e11/s, source: "x", unit: 1}',
     "params.peak_macs.unit: unknown key"),
    ("kind: cpu", "kind: tpu", "kind: 'tpu' is not one of"),
    ("format: hetsplit.preset/1", "format: 1", "format: expected 'hetsplit.preset/1'"),
    ("model: roofline", "modle: roofline", "modle: unknown key; did you mean 'model'?"),
    ("16GiB", "16GX", "memory: unknown unit 'GX'"),
    ('memory: {value: 16GiB, source: "datasheet"}', "", "memory: missing"),
])
def test_preset_errors_name_file_and_key(tmp_path, old, new, fragment):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(HetsplitError) as exc:
        load_preset(str(path))
    assert str(path) in str(exc.value)
    assert fragment in str(exc.value)


def test_a_rewritten_preset_file_is_read_again(tmp_path):
    path = write(tmp_path, GOOD)
    assert load_preset(path).params["peak_macs"] == 1e11
    path.write_text(GOOD.replace("1e11/s", "2.5e11/s"))
    assert load_preset(path).params["peak_macs"] == 2.5e11


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ClusterError) as exc:
        load_preset("rtx3070")
    msg = str(exc.value)
    assert "did you mean 'rtx3070ti'" in msg and "xeon-w3323" in msg and "pcie5" in msg


def test_device_preset_is_not_a_medium():
    with pytest.raises(ClusterError, match="is a gpu device, not a medium"):
        load_preset("rtx3070ti").medium()
