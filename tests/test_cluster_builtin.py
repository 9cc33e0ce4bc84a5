"""Built-in clusters: the papers' set-ups load by name with the expected devices and links."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from hetsplit.cluster import builtin_names, builtin_spec, load_cluster, preset_names
from hetsplit.cluster.examples import DONNA_MEDIA, DONNA_SETS, IMCE_LISTED, SIRACUSA_SIZES, spec_presets

MEDIA = {"pcie5": (64e9, 6.5e-12 * 8), "hb-wcc": (1e9, 0.1e-6 * 8), "lb-wcc": (3.5e6, 50e-6 * 8),
         "mipi": (0.5e9, 100e-12), "gbe": (125e6, 1.5e-9 * 8)}


def load(name: str):
    missing = sorted(set(spec_presets(builtin_spec(name))) - set(preset_names()))
    assert not missing, f"built-in {name} names preset(s) {missing} that hetsplit/cluster/presets lacks"
    return load_cluster(name)


def off_diagonal(c, matrix):
    return matrix[~np.eye(c.num_devices, dtype=bool)]


def test_names():
    names = builtin_names()
    assert len(names) == len(set(names)) == 12 + 1 + 2 + 2 + 1 + len(SIRACUSA_SIZES) + len(IMCE_LISTED) + 1  # + local
    for label in DONNA_SETS:
        for medium in DONNA_MEDIA:
            assert f"donna-{label}-{medium}" in names
    for extra in ("donna-1gpu", "donna-edge-4cim-cloud-gpu", "donna-edge-4cim-cloud-cpu", "jetson-xavier-nx-8",
                  "jetson-xavier-nx-4", "jetson-xavier-nx-8-cpu", "siracusa-1", "siracusa-64", "imce-12", "local"):
        assert extra in names


def test_local_has_one_device_per_usable_core(monkeypatch):
    from hetsplit.cluster import examples, load_cluster

    monkeypatch.setattr(examples, "usable_cores", lambda: 3)
    monkeypatch.setattr(examples, "_BUILTIN", examples._build())
    assert load_cluster("local").names == ["local-cpu0", "local-cpu1", "local-cpu2"]


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_loads(name):
    c = load(name)
    assert c.name == name and c.origin == f"built-in cluster {name}" and c.description
    if c.num_devices > 1:
        assert np.all(off_diagonal(c, c.bandwidth) > 0) and np.all(np.isfinite(off_diagonal(c, c.bandwidth)))
        assert np.array_equal(c.bandwidth, c.bandwidth.T)   # every built-in link is symmetric


@pytest.mark.parametrize("name", builtin_names())
def test_every_device_type_has_a_working_cost_model(name):
    from hetsplit.costs.models import device_model

    c = load(name)
    for t in c.types:
        assert device_model(c.representative(t)) is not None


@pytest.mark.parametrize("label", list(DONNA_SETS))
@pytest.mark.parametrize("medium", DONNA_MEDIA)
def test_donna_sets(label, medium):
    c = load(f"donna-{label}-{medium}")
    kinds = sorted(d.kind for d in c.devices)
    expected = sorted(prefix for prefix, _, n in DONNA_SETS[label] for _ in range(n))
    assert kinds == expected and c.num_devices == 4
    bw, en = MEDIA[medium]
    assert np.allclose(off_diagonal(c, c.bandwidth), bw) and np.allclose(off_diagonal(c, c.energy_per_byte), en)
    assert np.all(c.latency_s == 0)       # DONNA's model has no latency term
    assert len(c.types) == len(DONNA_SETS[label])


def test_donna_lb_wcc_by_hand():
    c = load("donna-4cpu-lb-wcc")
    # 50 uJ/bit x 8 bit/byte = 4e-4 J/byte; moving ResNet's 802,816-byte block output costs 321 J and 0.229 s
    assert c.energy_per_byte[0, 1] == pytest.approx(4e-4)
    assert c.transfer_energy(0, 1, 802_816) == pytest.approx(321.1264)
    assert c.transfer_time(0, 1, 802_816) == pytest.approx(802_816 / 3.5e6)
    assert c.devices[0].params["peak_macs"] == pytest.approx(1.344e12)


def test_donna_single_gpu_baseline():
    c = load("donna-1gpu")
    assert c.names == ["gpu0"] and c.devices[0].preset == "rtx3070ti"


@pytest.mark.parametrize("cloud", ["gpu", "cpu"])
def test_donna_edge_cloud(cloud):
    c = load(f"donna-edge-4cim-cloud-{cloud}")
    assert c.source == "cim0"
    assert c.groups == {"edge": ["cim0", "cim1", "cim2", "cim3"], "cloud": [f"{cloud}0"]}
    edge = [c.index(f"cim{i}") for i in range(4)]
    cloud_i = c.index(f"{cloud}0")
    for u in edge:
        for v in edge:
            if u != v:
                assert (c.bandwidth[u, v], c.energy_per_byte[u, v]) == pytest.approx(MEDIA["hb-wcc"])
        for a, b in ((u, cloud_i), (cloud_i, u)):
            assert (c.bandwidth[a, b], c.energy_per_byte[a, b]) == pytest.approx(MEDIA["lb-wcc"])
    assert {d.kind for d in c.devices} == {"cim", cloud}


def test_jetson_cluster():
    c = load("jetson-xavier-nx-8")
    assert c.num_devices == 16 and len(c.groups) == 8
    assert c.types == ["xavier-nx-cpu", "xavier-nx-gpu"]
    assert all(d.memory_bytes == 4 * 2**30 for d in c.devices)
    cpu0, gpu0, cpu1 = c.index("nx0-cpu"), c.index("nx0-gpu"), c.index("nx1-cpu")
    assert c.bandwidth[cpu0, gpu0] == pytest.approx(20e9) and c.medium_names[cpu0][gpu0] == "jetson-shm"
    assert (c.bandwidth[gpu0, cpu1], c.energy_per_byte[gpu0, cpu1]) == pytest.approx(MEDIA["gbe"])
    assert c.latency_s[gpu0, cpu1] == pytest.approx(1e-4)
    same_board = sum(1 for u in range(16) for v in range(16) if c.medium_names[u][v] == "jetson-shm")
    assert same_board == 8 * 2    # one pair per board, both directions
    assert c.device("nx3-gpu").group == "board3"


def test_jetson_4_boards():
    c = load("jetson-xavier-nx-4")
    assert c.num_devices == 8 and list(c.groups) == [f"board{b}" for b in range(4)]
    assert "seed 004" in c.description


@pytest.mark.parametrize("n", SIRACUSA_SIZES)
def test_siracusa(n):
    c = load(f"siracusa-{n}")
    assert c.names == [f"chip{i}" for i in range(n)] and c.source == "chip0"
    assert len(c.groups) == -(-n // 4) and all(1 <= len(g) <= 4 for g in c.groups.values())
    assert sorted(m for g in c.groups.values() for m in g) == sorted(c.names)
    assert {d.kind for d in c.devices} == {"mcu"} and len(c.types) == 1
    if n > 1:
        assert np.allclose(off_diagonal(c, c.bandwidth), 0.5e9)
        assert np.allclose(off_diagonal(c, c.energy_per_byte), 1e-10)


def test_yaml_of_a_builtin_round_trips(tmp_path, capsys):
    from hetsplit.cli.main import main

    assert main(["clusters", "jetson-xavier-nx-8", "--yaml"]) == 0
    path = tmp_path / "mine.yaml"
    path.write_text(capsys.readouterr().out)
    mine, ref = load_cluster(path), load("jetson-xavier-nx-8")
    assert mine.names == ref.names and mine.groups == ref.groups
    for attr in ("bandwidth", "latency_s", "energy_per_byte"):
        assert np.array_equal(getattr(mine, attr), getattr(ref, attr))


def test_cli_clusters_and_devices(capsys):
    from hetsplit.cli.main import main

    assert main(["clusters", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert by_name["jetson-xavier-nx-8"]["devices"] == 16
    assert by_name["jetson-xavier-nx-8"]["media"] == ["gbe", "jetson-shm"]
    assert by_name["siracusa-64"]["mix"] == {"siracusa": 64}
    assert by_name["donna-2cpu-1gpu-1cim-hb-wcc"]["kinds"] == {"cpu": 2, "gpu": 1, "cim": 1}
    assert main(["clusters"]) == 0
    assert "donna-2cpu-1gpu-1cim-hb-wcc" in capsys.readouterr().out
    assert main(["clusters", "donna-4cpu-pcie5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [link["medium"] for link in doc["links"]] == ["pcie5"] and doc["links"][0]["pairs"] == 12
    assert main(["clusters", "donna-4cpu"]) == 2
    assert "unknown cluster 'donna-4cpu'" in capsys.readouterr().err
    assert main(["devices", "--json"]) == 0
    figures = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert figures["rtx3070ti"]["peak_macs"] == pytest.approx(10.85e12)
    assert figures["lb-wcc"]["energy_per_byte"] == pytest.approx(4e-4)
    assert main(["devices", "xeon-w3323"]) == 0
    assert "Intel ARK" in capsys.readouterr().out
    assert main(["devices", "gbe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f["key"] for f in doc["figures"]} == {"bandwidth", "latency", "energy"}
    assert main(["devices", "nope"]) == 2


def test_help_has_examples(capsys):
    from hetsplit.cli.main import main

    for cmd in ("clusters", "devices"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        assert f"examples:\n  hetsplit {cmd}" in capsys.readouterr().out


def test_spec_is_a_copy():
    spec = builtin_spec("siracusa-4")
    spec["devices"].clear()
    assert len(builtin_spec("siracusa-4")["devices"]) == 4
    assert yaml.safe_load(yaml.safe_dump(spec)) == spec
