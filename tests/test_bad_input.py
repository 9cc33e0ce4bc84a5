"""Bad input and faults (issue 13): each becomes a clear error (what and where, exit 2), a warning, or a
message that says what is really wrong; nothing is accepted silently and nothing ends in a traceback."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from factories import chain_graph, cluster, problem
from hetsplit.cli.main import main
from hetsplit.cluster import load_cluster
from hetsplit.errors import InfeasibleError, ModelError
from hetsplit.graph.onnx_prepare import prepare_model
from hetsplit.runtime.toy import toy_model
from hetsplit.search import make_partitioner

TWO_CPUS = """name: two-cpus
devices:
  - {name: c, kind: cpu, memory: 4GiB, peak_macs: 4e10/s, mem_bandwidth: 20GB/s, power_active: 10W, count: 2}
links:
  default: {bandwidth: 1GB/s, energy: 0J/B}
"""
TWO_GPUS = """name: two-gpus
devices:
  - {name: g, preset: rtx3070ti, count: 2}
links:
  default: pcie5
"""


def fails(argv: list[str], capsys) -> str:
    """Run the CLI; it must exit 2 with a one-line message (no traceback). Returns stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A toy model, cluster YAMLs of two CPUs and of two GPUs, and a modelled profile of resnet8 on that GPU."""
    d = tmp_path_factory.mktemp("bad")
    toy_model(d / "toy.onnx")
    (d / "two.yaml").write_text(TWO_CPUS)
    (d / "gpus.yaml").write_text(TWO_GPUS)   # the profile's device type
    assert main(["profile", "resnet8", "--device", "rtx3070ti", "--out", str(d / "prof.json")]) == 0
    return d


def _profile_variant(files, tmp_path, **changes) -> str:
    """The resnet8 profile with its rtx3070ti columns changed: key -> {index: value} or a whole list."""
    doc = json.loads((files / "prof.json").read_text())
    col = doc["device_types"]["rtx3070ti"]
    for key, change in changes.items():
        if isinstance(change, dict):
            for i, v in change.items():
                col[key][i] = v
        else:
            col[key] = change
    path = tmp_path / "variant.json"
    path.write_text(json.dumps(doc))
    return str(path)


# ---- accepted silently today: a bare number for an energy ---------------------------------------------


def test_a_bare_number_for_an_energy_is_taken_as_si_with_a_warning(tmp_path, caplog):
    path = tmp_path / "bare.yaml"
    path.write_text(TWO_CPUS.replace("energy: 0J/B", "energy: 2e-10"))
    with caplog.at_level(logging.WARNING, logger="hetsplit"):
        cl = load_cluster(path)
    assert cl.energy_per_byte[0, 1] == pytest.approx(2e-10)
    assert "links.default.energy: bare number '2e-10' taken as 200 pJ/B (SI); write its unit" in caplog.text
    path.write_text(TWO_CPUS.replace("energy: 0J/B", "energy: 200pJ/B"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hetsplit"):
        assert load_cluster(path).energy_per_byte[0, 1] == pytest.approx(2e-10)
    assert "bare number" not in caplog.text


# ---- misleading messages ---------------------------------------------------------------------------

def test_an_empty_onnx_file_says_it_is_empty(tmp_path, capsys):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    err = fails(["inspect", str(path)], capsys)
    assert "no ONNX graph in it (an empty file" in err and "opset" not in err


def test_unnamed_onnx_nodes_are_named_by_op_type_and_index(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Foo", ["h"], ["y"], domain="custom")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("custom", 1)])
    onnx.save(model, tmp_path / "unnamed.onnx")
    with pytest.raises(ModelError, match="node 'Foo_1': operator custom::Foo"):
        prepare_model(tmp_path / "unnamed.onnx")


@pytest.mark.parametrize("algo", ["donna", "exact"])
def test_memory_errors_use_binary_units(algo):
    g = chain_graph([8, 3_000_000, 8], input_bytes=4)
    t = np.ones((3, 1))
    p = problem(g, cluster(["a", "a"], memory=[2 * 2**20, 2**20]), t, t, np.array([10.0, 5e6, 10.0]))
    with pytest.raises(InfeasibleError) as exc:
        make_partitioner(algo).solve(p)
    assert "layer 'l1' fits on no device that runs it: it needs 7.63 MiB" in str(exc.value)  # 5e6 + 3e6 + 8 B
    assert "has 2 MiB" in str(exc.value) and "e+" not in str(exc.value)


def test_a_null_profile_time_says_no_device_can_run_the_layer(files, tmp_path, capsys):
    err = fails(["plan", _profile_variant(files, tmp_path, time_s={3: None}), "-c", str(files / "gpus.yaml"),
                 "--algo", "exact"], capsys)
    assert "layer 'layer.0.0/Add' has no time on any device type" in err and "null in a profile" in err
    assert "fits nowhere" not in err
