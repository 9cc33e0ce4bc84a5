"""Hostile input (issue 26): every file read through one reader (regular files only, a size cap, decode
and nesting errors with file and position), a plan never makes hetsplit read or echo a file that is
not the user's, sizes are estimated before allocating, output paths are checked up front, and every
unclear or silently accepted case of the issue ends with a clear message and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from cli_checks import TWO_CPUS, fails, refused_by_parser
from hetsplit.cli.main import main
from hetsplit.jsonfile import MAX_INPUT_ENV
from hetsplit.limits import MEMORY_ENV
from hetsplit.runtime.toy import toy_model

CLUSTER = "donna-2cpu-1gpu-1cim-hb-wcc"
SECRET = "root:x:0:0:hunter2:/root:/bin/bash"     # a fake system password file's first line
WORD = "hunter2"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A toy model, a two-CPU cluster YAML and a plan of the toy on it (plan.json: one plan object)."""
    d = tmp_path_factory.mktemp("hostile")
    toy_model(d / "toy.onnx")
    (d / "two.yaml").write_text(TWO_CPUS)
    assert main(["plan", str(d / "toy.onnx"), "-c", str(d / "two.yaml"), "--algo", "exact", "--out",
                 str(d / "p")]) == 0
    doc = json.loads((d / "p" / "plans.json").read_text())
    plan = max(doc["plans"], key=lambda p: len(p.get("stages", [])))
    (d / "plan.json").write_text(json.dumps(plan))
    return d


def _plan_doc(files) -> dict:
    return json.loads((files / "plan.json").read_text())


def _write(path: Path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _model(path: Path, opset: int = 13, shape: tuple[int, ...] = (1, 4)) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return str(path)


# ---- one reader: regular files only, a size cap, errors with file and position ---------------------

@pytest.mark.timeout(60)
def test_a_folder_a_pipe_or_a_device_given_as_any_input_is_refused_without_reading(files, tmp_path, capsys):
    folder, pipe = tmp_path / "dir.json", tmp_path / "pipe.json"
    folder.mkdir()
    os.mkfifo(pipe)            # reading it would block forever
    toy = str(files / "toy.onnx")
    for path, said in ((folder, "is a folder"), (pipe, "not a regular file"), (Path("/dev/zero"), "not a regular")):
        assert said in fails(["simulate", str(path)], capsys)                              # plan
        assert said in fails(["report", str(files / "plan.json"), "--run", str(path), "--cluster",
                              str(files / "two.yaml"), "--model", toy], capsys)         # run file
        assert said in fails(["autodice", "import", str(path), "--model", toy, "--cluster",
                              str(files / "two.yaml"), "--out", str(tmp_path / "o.json")], capsys)
    yaml_pipe = tmp_path / "pipe.yaml"
    os.mkfifo(yaml_pipe)
    assert "not a regular file" in fails(["plan", toy, "-c", str(yaml_pipe)], capsys)     # cluster
    onnx_pipe = tmp_path / "pipe.onnx"
    os.mkfifo(onnx_pipe)
    assert "not a regular file" in fails(["inspect", str(onnx_pipe)], capsys)           # model
    assert "is a folder" in fails(["inspect", str(folder)], capsys)


def test_a_plan_folder_given_as_a_plan_points_to_its_plans_json(files, tmp_path, capsys):
    """`plan --out plans.json` makes a folder of that name; giving it to split says which file was meant."""
    out = tmp_path / "plans.json"
    out.mkdir()
    (out / "plans.json").write_text((files / "plan.json").read_text())
    err = fails(["split", str(out), str(files / "toy.onnx"), "--out", str(tmp_path / "split")], capsys)
    assert f"is a folder, not a file; give the file's path (did you mean {out / 'plans.json'}?)" in err


def test_non_utf8_bytes_are_named_with_file_line_and_column(files, tmp_path, capsys):
    plan = tmp_path / "bin.json"
    plan.write_bytes(b'{"format":\n  "\xff"}')
    err = fails(["simulate", str(plan)], capsys)
    assert f"{plan}: not UTF-8 text (byte 0xff at line 2, column 4)" in err
    cluster = tmp_path / "bin.yaml"
    cluster.write_bytes(TWO_CPUS.encode() + b"description: \xfe\n")
    assert f"{cluster}: not UTF-8 text (byte 0xfe at line 6" in fails(["plan", str(files / "toy.onnx"), "-c",
                                                                         str(cluster)], capsys)
    mapping = tmp_path / "mapping.json"
    mapping.write_bytes(b"\x80{}")
    assert f"{mapping}: not UTF-8 text (byte 0x80 at line 1, column 1)" in fails(
        ["autodice", "import", str(mapping), "--model", str(files / "toy.onnx"), "--cluster", str(files / "two.yaml"),
         "--out", str(tmp_path / "o.json")], capsys)
    profile = tmp_path / "prof.json"
    profile.write_bytes(b'{"a": "\xc3"}')
    assert f"{profile}: not UTF-8 text" in fails(["inspect", str(profile)], capsys)


def test_100000_deep_nesting_is_named_with_its_position(files, tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    err = fails(["simulate", str(deep)], capsys)
    assert f"{deep}: nested too deeply (more than 100 levels from line 1, column 101)" in err
    yaml_deep = tmp_path / "deep.yaml"
    yaml_deep.write_text("devices: " + "[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in fails(["plan", str(files / "toy.onnx"), "-c", str(yaml_deep)], capsys)


def test_a_file_over_the_size_cap_is_refused_naming_the_variable_that_raises_it(files, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(MAX_INPUT_ENV, "0.001")     # ~1 kB
    big = _write(tmp_path / "big.json", {**_plan_doc(files), "params": {"pad": "x" * 5000}})
    err = fails(["simulate", big], capsys)
    assert "over the 0 MiB accepted; set HETSPLIT_MAX_INPUT_MB to raise it" in err
    monkeypatch.setenv(MAX_INPUT_ENV, "100")
    assert main(["simulate", big, "--model", str(files / "toy.onnx"), "--json"]) == 0


def test_syntax_errors_name_line_and_column_and_quote_no_line_of_the_file(files, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"{SECRET}\nsecret: [\n")
    err = fails(["plan", str(files / "toy.onnx"), "-c", str(bad)], capsys)
    assert f"{bad}: not valid YAML at line 2, column 7" in err and WORD not in err and "secret" not in err
    js = tmp_path / "bad.json"
    js.write_text('{"format": "hetsplit.plan/2",\n "model": }')
    assert f"{js}: not valid JSON (line 2, column 11" in fails(["simulate", str(js)], capsys)


# ---- a plan does not make hetsplit read or echo other files ----------------------------------------

def test_a_plans_cluster_file_is_read_only_as_a_cluster_yaml_and_never_echoed(files, tmp_path, capsys):
    passwd = tmp_path / "passwd"
    passwd.write_text(f"{SECRET}\ndaemon:x:1:1::/:/usr/sbin/nologin\n")
    plan = _write(tmp_path / "evil.json", {**_plan_doc(files), "cluster_file": str(passwd)})
    err = fails(["simulate", plan], capsys)
    assert "is not a .yaml file; a plan may name only a cluster YAML" in err and WORD not in err
    as_yaml = tmp_path / "passwd.yaml"                    # named like a cluster: read as one, quoted never
    as_yaml.write_text(f"{SECRET}\nsecret: [\n")
    plan = _write(tmp_path / "evil2.json", {**_plan_doc(files), "cluster_file": str(as_yaml)})
    err = fails(["simulate", plan], capsys)
    assert "is not a readable hetsplit cluster" in err and WORD not in err and "secret" not in err
    as_yaml.write_text(f"{WORD}: {{x: 0}}\n")                  # valid YAML, not a cluster: its keys not named either
    err = fails(["simulate", plan], capsys)
    assert "is not a readable hetsplit cluster" in err and WORD not in err
    doc = {k: v for k, v in _plan_doc(files).items() if k != "cluster_file"}
    named = _write(tmp_path / "evil3.json", {**doc, "cluster": str(passwd)})   # a name, never read as a path
    err = fails(["simulate", named], capsys)
    assert "is no built-in cluster" in err and WORD not in err
    err = fails(["report", named, "--out", str(tmp_path / "r.html"), "--run", str(tmp_path / "none.json")], capsys)
    assert WORD not in err


def test_a_plans_model_is_a_zoo_name_only_never_a_file_it_names(files, tmp_path, capsys):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"format": WORD}))
    plan = _write(tmp_path / "evil.json", {**_plan_doc(files), "model": str(secret)})
    err = fails(["simulate", plan], capsys)
    assert "is no zoo model; give the model with --model" in err and WORD not in err
    assert main(["report", plan, "--out", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr()
    assert "is no zoo model" in out.out and WORD not in out.out + out.err   # the plans only, with a note


def test_the_user_still_sees_what_is_wrong_in_a_cluster_named_on_the_command_line(files, tmp_path, capsys):
    bad = tmp_path / "mine.yaml"
    bad.write_text(TWO_CPUS.replace("devices:", "devicez: []\ndevices:"))
    err = fails(["simulate", str(files / "plan.json"), "--cluster", str(bad)], capsys)
    assert "devicez: unknown key; did you mean 'devices'?" in err


# ---- sizes estimated before allocating ------------------------------------------------------------

def test_simulating_a_billion_inputs_is_refused_with_the_estimate_and_the_option(files, monkeypatch, capsys):
    monkeypatch.setenv(MEMORY_ENV, "8")
    err = fails(["simulate", str(files / "plan.json"), "--model", str(files / "toy.onnx"), "-n", "1000000000"], capsys)
    assert "simulating 1,000,000,000 inputs" in err and "GiB of memory, over the 8.0 GiB allowed" in err
    assert "simulate -n" in err and MEMORY_ENV in err


def test_a_population_of_100_million_is_refused_with_the_estimate(monkeypatch, capsys):
    monkeypatch.setenv(MEMORY_ENV, "8")
    err = fails(["explore", "resnet8", "-c", CLUSTER, "--pop", "100000000", "--gens", "1"], capsys)
    assert "a population of 100,000,000 would need about" in err and "explore --pop" in err


def test_a_million_devices_are_refused_naming_the_key(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text(TWO_CPUS.replace("count: 2", "count: 1000000"))
    err = fails(["plan", "resnet8", "-c", str(big)], capsys)
    assert f"{big}: devices[0].count: 1,000,000 devices, over the 1,024 a cluster may have" in err


def test_a_kv_cache_of_100_million_positions_is_refused(capsys):
    err = fails(["plan", "tinyllama-42m", "-c", "siracusa-8", "--algo", "exact", "--decode", "100000000"], capsys)
    assert "a KV cache of 100,000,000 positions is beyond the 2,097,152" in err and "--decode" in err


# The CLI's simulate, with a line on stderr once the event loop is entered: the test waits for that line
# (imports and loading take ~2 s on an idle machine, far more on a loaded one) instead of a fixed sleep.
SIMULATE_SAYING_WHEN_IT_STARTS = """
import importlib, sys
simulate = importlib.import_module("hetsplit.estimate.simulate")
real = simulate.simulate_plan
def announced(*args, **kwargs):
    print("event loop entered", file=sys.stderr, flush=True)
    return real(*args, **kwargs)
simulate.simulate_plan = announced
from hetsplit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(120)
def test_a_long_simulation_ends_within_2_s_of_sigterm(files):
    proc = subprocess.Popen([sys.executable, "-c", SIMULATE_SAYING_WHEN_IT_STARTS, "simulate", str(files / "plan.json"),
                             "--model", str(files / "toy.onnx"), "-n", "2000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()     # the whole run takes ~15 s: the signal lands inside the event loop
        assert first == "event loop entered\n", f"ended before the signal: {first!r} {proc.communicate()}"
        assert proc.poll() is None, f"ended before the signal: {proc.communicate()}"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 2.0, f"SIGTERM took {took:.1f} s"
    assert proc.returncode == 143 and "terminated" in err and "Traceback" not in err


# ---- output paths checked up front ---------------------------------------------------------------

def test_output_paths_that_cannot_be_written_exit_2_before_any_work(files, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    plan, toy = str(files / "plan.json"), str(files / "toy.onnx")
    assert f"--out {afile}: {afile} is an existing file, not a folder" in fails(
        ["split", plan, toy, "--out", str(afile)], capsys)
    assert f"--split-dir {afile}: {afile} is an existing file" in fails(
        ["run", plan, toy, "--split-dir", str(afile)], capsys)
    assert f"--run-dir {afile / 'sub'}: {afile} is an existing file" in fails(
        ["run", plan, toy, "--run-dir", str(afile / "sub")], capsys)
    assert f"--out {tmp_path}: is a folder" in fails(["report", plan, "--out", str(tmp_path)], capsys)
    run = _write(tmp_path / "run.json", {"devices": [], "throughput": 1.0})
    err = fails(["report", plan, "--run", run, "--out", str(tmp_path / "r.html")], capsys)
    assert f"{run}: not a run report of `hetsplit run --out` (it lacks model, hops" in err


# ---- unclear errors and silent accepts of the issue -------------------------------------------------

def test_peak_macs_zero_and_an_infinite_bandwidth_name_file_and_key(tmp_path, capsys):
    zero = tmp_path / "zero.yaml"
    zero.write_text(TWO_CPUS.replace("peak_macs: 4e10/s", "peak_macs: 0"))
    err = fails(["plan", "resnet8", "-c", str(zero)], capsys)
    assert f"{zero}: devices[0].params.peak_macs: peak_macs must be above 0" in err and "Warning" not in err
    inf = tmp_path / "inf.yaml"
    inf.write_text(TWO_CPUS.replace("bandwidth: 1GB/s", "bandwidth: 1e400"))
    assert f"{inf}: links.default.bandwidth: a bandwidth must be a finite non-negative number, got '1e400'" in \
        fails(["plan", "resnet8", "-c", str(inf)], capsys)


def test_an_input_of_2_31_by_2_31_is_refused_not_shown_negative(tmp_path, capsys):
    path = _model(tmp_path / "huge.onnx", shape=(2**31, 2**31, 2))
    err = fails(["inspect", path], capsys)
    assert "tensor 'x' of 2,147,483,648 x 2,147,483,648 x 2 has 9,223,372,036,854,775,808 elements" in err


def test_opset_99_is_refused(tmp_path, capsys):
    path = _model(tmp_path / "op99.onnx", opset=99)
    assert "default-domain opset 99 is newer than the" in fails(["inspect", path], capsys)


@pytest.mark.parametrize("argv, said", [
    (["run", "P", "M", "--port", "-5"], "argument --port: -5 is out of range; give a whole number 0..65535"),
    (["run", "P", "M", "--port", "70000"], "argument --port: 70000 is out of range"),
    (["run", "P", "M", "--threads", "-1"], "argument --threads: -1 is out of range; give a whole number >= 1"),
    (["profile", "resnet8", "--threads", "0"], "argument --threads: 0 is out of range"),
    (["inspect", "resnet8", "--layers", "-3"], "argument --layers: -3 is out of range; give a whole number >= 0"),
    (["run", "P", "M", "--port", "x"], "argument --port: 'x' is not a whole number"),
])
def test_options_out_of_range_are_refused_by_the_parser(argv, said, capsys):
    assert said in refused_by_parser(argv, capsys)


def test_more_latency_inputs_than_inputs_is_refused(files, capsys):
    err = fails(["run", str(files / "plan.json"), str(files / "toy.onnx"), "--latency-inputs", "50", "-n", "2"],
                capsys)
    assert "--latency-inputs 50: give 0 to --inputs (2)" in err


def test_a_layer_twice_in_assign_is_refused(files, tmp_path, capsys):
    doc = _plan_doc(files)
    layer, device = next(iter(doc["assign"].items()))
    text = json.dumps({k: v for k, v in doc.items() if k != "stages"})
    text = text.replace('"assign": {', f'"assign": {{{json.dumps(layer)}: {json.dumps(device)}, ', 1)
    path = tmp_path / "dup.json"
    path.write_text(text)
    assert f"{path}: the key {layer!r} appears twice in one object" in fails(["simulate", str(path)], capsys)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_or_infinity_in_a_plans_metrics_is_refused(value, files, tmp_path, capsys):
    doc = _plan_doc(files)
    doc["metrics"] = {**doc["metrics"], "energy_j": value}
    path = _write(tmp_path / "nan.json", doc)
    err = fails(["simulate", path], capsys)
    assert f"metrics.energy_j is {value!r}; a metric is a finite number" in err
    doc["metrics"]["energy_j"] = 1.0
    doc["metrics"]["compute_s_per_device"] = {"c0": value}
    assert "metrics.compute_s_per_device" in fails(["simulate", _write(tmp_path / "nan2.json", doc)], capsys)


def test_unknown_keys_in_plan_and_cluster_files_suggest_the_close_name(files, tmp_path, capsys):
    path = _write(tmp_path / "typo.json", {**_plan_doc(files), "combin": {}})
    assert "unknown key 'combin'; did you mean 'combine'?" in fails(["simulate", path], capsys)
    typo = tmp_path / "typo.yaml"
    typo.write_text(TWO_CPUS + "sinc: c0\n")
    assert "sinc: unknown key; did you mean 'sink'?" in fails(["plan", "resnet8", "-c", str(typo)], capsys)


def test_an_infinite_budget_and_a_budget_that_finds_nothing_exit_2(capsys):
    hier = ["explore", "resnet8", "-c", CLUSTER, "--hierarchical", "--measured-only", "--stages", "1"]
    assert "'1e999h' is longer than any search needs" in fails(hier + ["--budget", "1e999h"], capsys)
    err = fails(hier + ["--budget", "0.001s"], capsys)
    assert "no plan measured within --budget 0.001s" in err and "give a longer --budget" in err


def test_a_tree_larger_than_the_chips_is_refused(capsys):
    err = fails(["plan", "tinyllama-42m", "-c", "siracusa-8", "--algo", "tensor-parallel", "--chips", "4",
                 "--tree", "8"], capsys)
    assert "groups of 8 (--tree) over 4 chips would be one flat group; give --tree 2..4 or 0" in err
