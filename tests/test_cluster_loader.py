"""Cluster YAML loading: presets and overrides, groups, links, count; every error names file and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsplit.cluster import cluster_from_dict, load_cluster
from hetsplit.errors import ClusterError, HetsplitError

HB, LB, PCIE = (1e9, 8e-7), (3.5e6, 4e-4), (64e9, 5.2e-11)  # bandwidth B/s, energy J/B

DESIGN_EXAMPLE = """
name: donna-hetero
devices:
  - {name: gpu0, preset: rtx3070ti}
  - {name: cpu1, preset: xeon-w3323}
  - {name: cpu0, type: cpu, kind: cpu, memory: 16GiB, peak_macs: 1.2e11/s, mem_bandwidth: 50GB/s, power_active: 65W}
links:
  default: hb-wcc
  overrides: [{between: [cpu1, gpu0], medium: lb-wcc}]
source: cpu0
"""


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def link(c, a, b):
    i, j = c.index(a), c.index(b)
    return c.bandwidth[i, j], c.energy_per_byte[i, j]


def test_design_example(tmp_path):
    c = load_cluster(write(tmp_path, DESIGN_EXAMPLE))
    assert c.name == "donna-hetero" and c.names == ["gpu0", "cpu1", "cpu0"] and c.source == "cpu0"
    assert c.origin.endswith("cluster.yaml")
    cpu0 = c.device("cpu0")
    assert (cpu0.kind, cpu0.type, cpu0.memory_bytes) == ("cpu", "cpu", 16 * 2**30)
    assert cpu0.params == {"peak_macs": 1.2e11, "mem_bandwidth": 50e9, "power_active": 65.0}
    assert c.device("gpu0").params["peak_macs"] == pytest.approx(10.85e12)
    assert c.types == ["rtx3070ti", "xeon-w3323", "cpu"]
    assert link(c, "cpu1", "gpu0") == pytest.approx(LB) and link(c, "gpu0", "cpu1") == pytest.approx(LB)
    assert link(c, "cpu0", "gpu0") == pytest.approx(HB)
    assert c.medium_names[c.index("gpu0")][c.index("cpu1")] == "lb-wcc"
    assert np.all(np.isinf(np.diag(c.bandwidth))) and np.all(np.diag(c.energy_per_byte) == 0)


def test_groups_media_count_and_directed_overrides():
    c = cluster_from_dict({
        "devices": [{"name": "cim", "preset": "xeon-w3323", "count": 3}, {"name": "gpu0", "preset": "rtx3070ti"},
                    {"name": "cpu9", "preset": "xeon-w3323", "group": "cloud"}],
        "groups": {"edge": {"devices": ["cim"], "medium": "hb-wcc"}, "cloud": ["gpu0"]},
        "links": {"default": "lb-wcc", "overrides": [
            {"from": "edge", "to": "cloud", "medium": {"name": "uplink", "bandwidth": "2MB/s", "energy": "1nJ/B",
                                                      "latency": "5ms"}}]},
        "source": "cim0"}, origin="t.yaml")
    assert c.names == ["cim0", "cim1", "cim2", "gpu0", "cpu9"]
    assert c.groups == {"edge": ["cim0", "cim1", "cim2"], "cloud": ["gpu0", "cpu9"]}
    assert c.device("cim1").group == "edge" and c.device("cpu9").group == "cloud"
    assert link(c, "cim0", "cim2") == pytest.approx(HB)                       # inside the group
    assert link(c, "cim0", "gpu0") == pytest.approx((2e6, 1e-9))             # edge -> cloud override
    assert link(c, "gpu0", "cim0") == pytest.approx(LB)                       # cloud -> edge: default
    assert c.latency_s[c.index("cim2"), c.index("cpu9")] == pytest.approx(5e-3)
    assert link(c, "gpu0", "cpu9") == pytest.approx(LB)                       # cloud has no medium
    assert c.types == ["xeon-w3323", "rtx3070ti"]                             # one type per preset


def test_explicit_keys_override_the_preset():
    c = cluster_from_dict({"devices": [
        {"name": "a", "preset": "xeon-w3323"},
        {"name": "b", "preset": "xeon-w3323", "memory": "8GiB"},                       # memory: same type
        {"name": "c", "preset": "xeon-w3323", "params": {"efficiency": {"conv": 0.6}}},  # new type
        {"name": "d", "preset": "xeon-w3323", "power_active": "100W", "type": "slow"}],
        "links": {"default": "pcie5"}})
    a, b, cdev, d = c.devices
    assert b.memory_bytes == 8 * 2**30 and b.type == a.type == "xeon-w3323"
    assert cdev.params["efficiency"]["conv"] == 0.6
    assert cdev.params["efficiency"]["gemm"] == a.params["efficiency"]["gemm"]   # merged, not replaced
    assert cdev.type == "xeon-w3323-c" and cdev.preset == "xeon-w3323"
    assert d.type == "slow" and d.params["power_active"] == 100.0
    assert a.params["power_active"] == 220.0


def test_medium_from_file_section_and_preset_with_override(tmp_path):
    c = cluster_from_dict({
        "media": {"campus": {"bandwidth": "100MB/s", "energy": "5nJ/b"}, "slow-hb": {"preset": "hb-wcc",
                                                                                     "latency": "2ms"}},
        "devices": [{"name": "a", "preset": "xeon-w3323"}, {"name": "b", "preset": "xeon-w3323"},
                    {"name": "c", "preset": "xeon-w3323"}],
        "links": {"default": "campus", "overrides": [{"between": ["a", "b"], "medium": "slow-hb"}]}})
    assert link(c, "a", "c") == pytest.approx((1e8, 4e-8))
    assert link(c, "b", "a") == pytest.approx(HB) and c.latency_s[0, 1] == pytest.approx(2e-3)
    assert c.medium_names[0][2] == "campus" and c.medium_names[0][1] == "slow-hb"


def test_preset_file_next_to_the_cluster(tmp_path):
    (tmp_path / "presets").mkdir()
    write(tmp_path / "presets", """format: hetsplit.preset/1
name: calibrated-cpu
kind: cpu
memory: {value: 32GiB, source: "this machine"}
params:
  peak_macs: {value: 2e11/s, source: "calibrated"}
""", "calibrated-cpu.yaml")
    c = load_cluster(write(tmp_path, "devices: [{name: cpu0, preset: presets/calibrated-cpu.yaml}]\n"))
    assert c.device("cpu0").params == {"peak_macs": 2e11} and c.device("cpu0").type == "calibrated-cpu"


def test_single_device_needs_no_links():
    c = cluster_from_dict({"devices": [{"name": "gpu0", "preset": "rtx3070ti"}]})
    assert c.num_devices == 1 and c.bandwidth.shape == (1, 1)


# ---- errors: each names the file, the key, and the fix -----------------------------------------

BASE = """devices:
  - {name: cpu0, preset: xeon-w3323}
  - {name: cpu1, preset: xeon-w3323}
  - {name: gpu0, preset: rtx3070ti}
groups:
  edge: [cpu0, cpu1]
links:
  default: hb-wcc
  overrides: [{between: [cpu0, gpu0], medium: lb-wcc}]
"""

ERRORS = [
    # (replace this, with this, key path in the message, other fragment)
    ("links:", "linkz: {}\nlinks:", "linkz", "unknown key; did you mean 'links'?"),
    ("{name: cpu1, preset: xeon-w3323}", "{name: cpu1, preset: xeon-w3323, pek_macs: 1e9/s}",
     "devices[1].pek_macs", "did you mean 'peak_macs'?"),
    ("{name: gpu0, preset: rtx3070ti}", "{name: gpu0, preset: rtx3070ti, memory: 16GX}",
     "devices[2].memory", "unknown unit 'GX'"),
    ("{name: gpu0, preset: rtx3070ti}", "{name: gpu0, preset: rtx3070ti, params: {peak_macs: 1GB/s}}",
     "devices[2].params.peak_macs", "write it like"),
    ("preset: rtx3070ti", "preset: rtx3080", "devices[2].preset", "unknown preset 'rtx3080'"),
    ("preset: rtx3070ti", "preset: pcie5", "devices[2].preset", "is a medium"),
    ("between: [cpu0, gpu0]", "between: [cpu0, gpu9]", "links.overrides[0].between",
     "'gpu9' is neither a device nor a group; devices: cpu0, cpu1, gpu0; groups: edge"),
    ("{name: cpu1, preset", "{name: cpu0, preset", "devices[1].name", "duplicate device name 'cpu0'"),
    ("edge: [cpu0, cpu1]", "edge: [cpu0, cpu7]", "groups.edge", "'cpu7' is not a device"),
    ("edge: [cpu0, cpu1]", "gpu0: [cpu0]", "groups.gpu0", "also a device name"),
    ("edge: [cpu0, cpu1]", "edge: [cpu0]\n  other: [cpu0]", "groups.other", "already in group 'edge'"),
    ("edge: [cpu0, cpu1]", "edge: []", "groups.edge", "non-empty list"),
    ("edge: [cpu0, cpu1]", "edge: {devices: [cpu0], medum: pcie5}", "groups.edge.medum", "did you mean 'medium'?"),
    ("default: hb-wcc", "default: hb-wc", "links.default", "unknown medium 'hb-wc'; did you mean 'hb-wcc'?"),
    ("default: hb-wcc", "default: {bandwidth: 1GB}", "links.default.bandwidth", "write it like 64GB/s"),
    ("default: hb-wcc", "default: {latency: 1ms}", "links.default.bandwidth", "missing"),
    ("  default: hb-wcc\n", "", "links.default", "missing; say how devices talk"),
    ("medium: lb-wcc}", "}", "links.overrides[0].medium", "missing"),
    ("between: [cpu0, gpu0]", "between: [cpu0]", "links.overrides[0].between", "expected two"),
    ("{name: cpu0, preset: xeon-w3323}", "{name: cpu0}", "devices[0].kind", "add kind: cpu"),
    ("{name: cpu0, preset: xeon-w3323}", "{name: cpu0, kind: cpu}", "devices[0].memory", "missing"),
    ("{name: cpu0, preset: xeon-w3323}", "{name: cpu0, kind: fpga, memory: 1GB}", "devices[0].kind",
     "use one of cpu, gpu"),
    ("{name: cpu0, preset: xeon-w3323}", "{name: cpu0, preset: xeon-w3323, count: 0}", "devices[0].count",
     ">= 1"),
    ("{name: cpu0, preset: xeon-w3323}", "{name: cpu, preset: xeon-w3323, count: 2}", "devices[1].name",
     "duplicate device name 'cpu1'"),
    ("links:", "source: cpu5\nlinks:", "source", "'cpu5' is not a device; use one of cpu0, cpu1, gpu0"),
]


@pytest.mark.parametrize("old, new, key, fragment", ERRORS, ids=[e[2] + ":" + e[3][:20] for e in ERRORS])
def test_errors_name_file_key_and_fix(tmp_path, old, new, key, fragment):
    assert old in BASE, old
    path = write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(HetsplitError) as exc:
        load_cluster(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: "), msg
    assert f": {key}: " in msg, msg
    assert fragment in msg, msg


def test_base_cluster_is_valid(tmp_path):
    c = load_cluster(write(tmp_path, BASE))
    assert c.groups == {"edge": ["cpu0", "cpu1"]}


def test_unknown_cluster_lists_built_ins():
    with pytest.raises(ClusterError) as exc:
        load_cluster("donna-4cpu-pcie")
    msg = str(exc.value)
    assert "did you mean donna-4cpu-pcie5" in msg and "siracusa-64" in msg and "jetson-xavier-nx-8" in msg


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ClusterError, match="does not exist"):
        load_cluster(tmp_path / "nope.yaml")
    path = write(tmp_path, "devices: [{name: a\n")
    with pytest.raises(ClusterError, match=f"{path}: not valid YAML"):
        load_cluster(path)
    path = write(tmp_path, "- just a list\n", "list.yaml")
    with pytest.raises(ClusterError, match="a cluster file is a mapping"):
        load_cluster(path)


def test_shared_type_with_different_parameters_is_refused():
    with pytest.raises(ClusterError, match="share type 'x'"):
        cluster_from_dict({"devices": [{"name": "a", "preset": "xeon-w3323", "type": "x"},
                                       {"name": "b", "preset": "rtx3070ti", "type": "x"}],
                           "links": {"default": "pcie5"}}, origin="t.yaml")


# ---- property: link precedence is default < group medium < overrides in order ----------------

MEDIA_BW = {"pcie5": 64e9, "hb-wcc": 1e9, "lb-wcc": 3.5e6, "mipi": 0.5e9, "gbe": 125e6}


@st.composite
def cluster_specs(draw):
    n = draw(st.integers(2, 6))
    names = [f"d{i}" for i in range(n)]
    labels = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))  # group 0 = no group
    media = st.sampled_from(sorted(MEDIA_BW))
    groups = {}
    for g in (1, 2):
        members = [names[i] for i in range(n) if labels[i] == g]
        if members:
            groups[f"g{g}"] = {"devices": members, "medium": draw(media)} if draw(st.booleans()) else members
    ends = st.sampled_from(names + sorted(groups))
    overrides = []
    for _ in range(draw(st.integers(0, 4))):
        a, b = draw(ends), draw(ends)
        if a == b and a in names:
            continue
        overrides.append({"between": [a, b], "medium": draw(media)} if draw(st.booleans())
                         else {"from": a, "to": b, "medium": draw(media)})
    return {"devices": [{"name": d, "preset": "xeon-w3323"} for d in names], "groups": groups,
            "links": {"default": draw(media), "overrides": overrides}}


def expected_bandwidth(spec):
    names = [d["name"] for d in spec["devices"]]
    members = {g: (v["devices"] if isinstance(v, dict) else v) for g, v in spec["groups"].items()}
    expand = lambda x: members.get(x, [x])  # noqa: E731
    bw = {(u, v): MEDIA_BW[spec["links"]["default"]] for u in names for v in names if u != v}
    for g, v in spec["groups"].items():
        if isinstance(v, dict):
            bw.update({(a, b): MEDIA_BW[v["medium"]] for a in v["devices"] for b in v["devices"] if a != b})
    for o in spec["links"]["overrides"]:
        pairs = [(o["between"][0], o["between"][1]), (o["between"][1], o["between"][0])] if "between" in o \
            else [(o["from"], o["to"])]
        for x, y in pairs:
            bw.update({(a, b): MEDIA_BW[o["medium"]] for a in expand(x) for b in expand(y) if a != b})
    return bw


@settings(max_examples=40, deadline=None)
@given(cluster_specs())
def test_link_precedence_property(spec):
    c = cluster_from_dict(spec, origin="prop.yaml")
    for (u, v), bw in expected_bandwidth(spec).items():
        assert c.bandwidth[c.index(u), c.index(v)] == bw
    assert np.all(np.isinf(np.diag(c.bandwidth)))
    if all("between" in o for o in spec["links"]["overrides"]):
        assert np.array_equal(c.bandwidth, c.bandwidth.T)


def test_a_medium_carries_what_each_message_end_costs_its_device():
    """``message: {cpu, byte}`` of a medium becomes every link's CPU per message end (``cluster.links``);
    a device pays the largest figure of its links, a preset without one charges nothing, and a key the
    loader does not know is refused by name."""
    c = cluster_from_dict({
        "devices": [{"name": "a", "preset": "xeon-w3323"}, {"name": "b", "preset": "xeon-w3323"},
                    {"name": "c", "preset": "xeon-w3323"}],
        "media": {"fast": {"preset": "gbe", "message": {"cpu": "0.2ms", "byte": "0.5ns/B"}}},
        "links": {"default": "gbe", "overrides": [{"between": ["a", "b"], "medium": "fast"}]}})
    assert c.message_cpu_s[0, 1] == c.message_cpu_s[1, 0] == pytest.approx(2e-4)
    assert c.message_cpu_byte_s[0, 1] == pytest.approx(5e-10)
    assert c.message_cpu_s[0, 2] == 0.0 and c.message_cpu_s[1, 1] == 0.0
    assert list(c.links.end_s) == pytest.approx([2e-4, 2e-4, 0.0])
    assert c.links.end(0, 1e6) == pytest.approx(2e-4 + 5e-4)
    assert c.links.end(0, 0.0) == 0.0
    with pytest.raises(ClusterError, match=r"media\.fast\.message\.cycles: unknown key"):
        cluster_from_dict({"devices": [{"name": "a", "preset": "xeon-w3323"}, {"name": "b", "preset": "xeon-w3323"}],
                           "media": {"fast": {"preset": "gbe", "message": {"cycles": 3}}}, "links": {"default": "fast"}})


def test_the_local_built_in_charges_the_runtimes_message_end():
    c = load_cluster("local")
    if c.num_devices > 1:
        assert c.links.end_s[0] > 0 and c.links.end_byte_s[0] > 0
