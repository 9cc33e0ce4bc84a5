"""Fuzzing the readers (issue 26): valid plan/2 files, cluster YAML, profile JSON, AutoDiCE mapping
files and a small ONNX model, mutated in their bytes (flips, cuts, inserted bytes, deep brackets) and in
their structure (keys, values, numbers, nesting, sizes), each fed to the command that reads it.

The property: the command exits 0, or exits 2 with an ``error:`` message (naming the file when its
bytes do not parse); no exception escapes, no numpy warning, at most ``LIMIT_S`` seconds and
``LIMIT_BYTES`` of Python and numpy allocations (tracemalloc peak) per example.

``FUZZ_EXAMPLES`` examples per input kind (CI: 50, the same ones every run); set
``HETSPLIT_FUZZ_EXAMPLES`` for more, drawn afresh each run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hetsplit.cli.main import main
from hetsplit.runtime.toy import toy_model

FUZZ_ENV = "HETSPLIT_FUZZ_EXAMPLES"
FUZZ_EXAMPLES = int(os.environ.get(FUZZ_ENV, "0") or 0) or 50
LIMIT_S = 10.0                       # per example, generous for a loaded machine (most take ~30 ms)
LIMIT_BYTES = 512 * 2**20
TWO_CPUS = {"name": "two-cpus",
            "devices": [{"name": "c", "kind": "cpu", "memory": "4GiB", "peak_macs": "4e10/s",
                         "mem_bandwidth": "20GB/s", "power_active": "10W", "count": 2}],
            "links": {"default": {"bandwidth": "1GB/s", "energy": "0J/B"}}}

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, print_blob=False,
                derandomize=not os.environ.get(FUZZ_ENV),
                phases=[Phase.explicit, Phase.generate],   # a failure shows its draws; shrinking takes minutes
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])

LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["", "c0", "c1", "gpu9", "1e400", "-1", "0", "NaN", "inf", "../x", "/dev/zero", "4GiB",
                     "1e10/s", "0J/B", "hetsplit.plan/2", "direct", "relay", "concat", "sum", "k", "n"]))
VALUES = st.recursive(LEAVES, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                         max_size=4), max_leaves=10)
KEYS = st.sampled_from(["format", "model", "cluster", "stages", "assign", "combine", "order", "metrics", "params",
                        "cluster_file", "devices", "links", "groups", "media", "count", "name", "layers",
                        "device_types", "time_s", "memory", "source", "sink", "default", "overrides", "x"])


# ---- mutations ---------------------------------------------------------------------------------------

def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, at + (i,))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def mutate_tree(doc: Any, data) -> Any:
    """One to three structural changes: a value replaced, a key dropped or added, a value nested
    deeper, a list grown, a number scaled to an extreme."""
    doc = json.loads(json.dumps(doc))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(doc)))
        node = _get(doc, path)
        op = data.draw(st.sampled_from(["replace", "drop", "add", "nest", "grow", "scale"]))
        if op == "replace":
            doc = _set(doc, path, data.draw(VALUES))
        elif op == "drop" and path:
            parent = _get(doc, path[:-1])
            del parent[path[-1]]
        elif op == "add" and isinstance(node, dict):
            node[data.draw(KEYS | st.text(max_size=8))] = data.draw(VALUES)
        elif op == "nest":
            doc = _set(doc, path, data.draw(st.sampled_from([[node], {"x": node}, [[node]]])))
        elif op == "grow" and isinstance(node, list) and node:
            node.extend(node * data.draw(st.integers(1, 3)))
        elif op == "scale" and isinstance(node, (int, float)) and not isinstance(node, bool):
            doc = _set(doc, path, node * data.draw(st.sampled_from([0, -1, 10**6, 10**300, 2**63, 1e300])))
    return doc


def mutate_bytes(raw: bytes, data) -> bytes:
    """One to three byte-level changes: a byte replaced, the tail cut, bytes, deep brackets or a
    5,000-digit number inserted."""
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw)))
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "brackets", "digits"]))
        if op == "flip" and pos < len(raw):
            raw = raw[:pos] + bytes([data.draw(st.integers(0, 255))]) + raw[pos + 1:]
        elif op == "cut":
            raw = raw[:pos]
        elif op == "insert":
            raw = raw[:pos] + data.draw(st.binary(min_size=1, max_size=8)) + raw[pos:]
        elif op == "brackets":
            n = data.draw(st.sampled_from([50, 5_000, 100_000]))
            raw = raw[:pos] + b"[" * n + raw[pos:]
        elif op == "digits":      # a number longer than Python reads
            raw = raw[:pos] + b"9" * 5000 + raw[pos:]
    return raw


# ---- the property ---------------------------------------------------------------------------------

def check(argv: list[str], path: Path, parses: bool) -> None:
    """Run the CLI on a mutated ``path``: exit 0, or 2 with a message (naming ``path`` when the file
    does not ``parses``); no exception, no numpy warning, bounded time and memory."""
    out = io.StringIO()
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rc = main(argv)
        took = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = out.getvalue()
    assert rc in (0, 2), f"exit {rc}: {text[-2000:]}"
    if rc == 2:
        assert "error:" in text and "Traceback" not in text, text[-2000:]
        if not parses:
            assert str(path) in text, f"the message does not name {path}: {text[-500:]}"
    numeric = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not numeric, f"numpy warnings: {[str(w.message) for w in numeric]}"
    assert took < LIMIT_S, f"{took:.1f} s"
    assert peak < LIMIT_BYTES, f"{peak / 2**20:.0f} MiB"


def _json_parses(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
        return True
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False


def _yaml_parses(raw: bytes) -> bool:
    try:
        yaml.safe_load(raw.decode("utf-8"))
        return True
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError):
        return False


class Seeds(dict):
    """The seed inputs (a dict), shown short in hypothesis's reports."""

    def __repr__(self) -> str:
        return "seeds"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Seeds:
    """The valid inputs mutated: a toy model, its plan on two CPUs (and that cluster), the plan as
    AutoDiCE files and a modelled profile of the toy."""
    d = tmp_path_factory.mktemp("fuzz")
    toy_model(d / "toy.onnx")
    (d / "two.yaml").write_text(yaml.safe_dump(TWO_CPUS))
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        assert main(["plan", str(d / "toy.onnx"), "-c", str(d / "two.yaml"), "--algo", "exact", "--out",
                     str(d / "p")]) == 0
        assert main(["autodice", "export", str(d / "p" / "plans.json"), "--model", str(d / "toy.onnx"), "--out",
                     str(d / "ad")]) == 0
        assert main(["profile", str(d / "toy.onnx"), "--device", "rtx3070ti", "--out", str(d / "prof.json")]) == 0
    plans = json.loads((d / "p" / "plans.json").read_text())["plans"]
    plan = max(plans, key=lambda p: len(p.get("stages", [])))
    return Seeds(dir=d, plan=plan, mapping=json.loads((d / "ad" / "mapping.json").read_text()),
                 profile=json.loads((d / "prof.json").read_text()), onnx=(d / "toy.onnx").read_bytes())


def _commands(seeds, path: Path) -> dict[str, list[str]]:
    d = seeds["dir"]
    toy, two = str(d / "toy.onnx"), str(d / "two.yaml")
    return {"plan": ["simulate", str(path), "--model", toy, "--cluster", two, "-n", "5", "--json"],
            "cluster": ["clusters", str(path), "--json"],
            "profile": ["inspect", str(path), "--json"],
            "mapping": ["autodice", "import", str(path), "--model", toy, "--cluster", two, "--out",
                        str(d / "imported.json")],
            "onnx": ["inspect", str(path), "--json"]}


def _fuzz_text(seeds, kind: str, doc: Any, data, suffix: str) -> None:
    path = seeds["dir"] / f"fuzzed-{kind}{suffix}"
    as_yaml = suffix == ".yaml"
    dump = (lambda x: yaml.safe_dump(x).encode()) if as_yaml else (lambda x: json.dumps(x).encode())
    if data.draw(st.booleans()):
        raw = dump(mutate_tree(doc, data))
    else:
        raw = mutate_bytes(dump(doc), data)
    path.write_bytes(raw)
    check(_commands(seeds, path)[kind], path, (_yaml_parses if as_yaml else _json_parses)(raw))


@FUZZ
@given(data=st.data())
def test_fuzzed_plans(seeds, data):
    _fuzz_text(seeds, "plan", seeds["plan"], data, ".json")


@FUZZ
@given(data=st.data())
def test_fuzzed_cluster_yaml(seeds, data):
    _fuzz_text(seeds, "cluster", TWO_CPUS, data, ".yaml")


@FUZZ
@given(data=st.data())
def test_fuzzed_profiles(seeds, data):
    _fuzz_text(seeds, "profile", seeds["profile"], data, ".json")


@FUZZ
@given(data=st.data())
def test_fuzzed_autodice_mappings(seeds, data):
    _fuzz_text(seeds, "mapping", seeds["mapping"], data, ".json")


ONNX_OPS = ["Relu", "Conv", "Gemm", "Add", "MatMul", "Softmax", "Reshape", "NoSuchOp", ""]


def mutate_onnx(raw: bytes, data) -> bytes:
    """A structural change to the model (a dim, the opset, an op type, an attribute, a node dropped,
    an initializer's dims) or, half the time, a byte-level one."""
    if data.draw(st.booleans()):
        return mutate_bytes(raw, data)
    model = onnx.ModelProto()
    model.ParseFromString(raw)
    g = model.graph
    op = data.draw(st.sampled_from(["dim", "opset", "op_type", "attr", "drop", "init"]))
    number = st.one_of(st.integers(-3, 3), st.sampled_from([0, 2**31, 2**40, 2**62]))
    if op == "dim":
        dims = g.input[0].type.tensor_type.shape.dim
        dims[data.draw(st.integers(0, len(dims) - 1))].dim_value = data.draw(number.filter(lambda v: v >= 0))
    elif op == "opset":
        model.opset_import[0].version = data.draw(st.integers(0, 200))
    elif op == "op_type":
        g.node[data.draw(st.integers(0, len(g.node) - 1))].op_type = data.draw(st.sampled_from(ONNX_OPS))
    elif op == "attr":
        nodes = [n for n in g.node if n.attribute]
        if nodes:
            attr = data.draw(st.sampled_from(nodes)).attribute[0]
            if attr.ints:
                attr.ints[0] = data.draw(number)
            else:
                attr.i = data.draw(number)
    elif op == "drop":
        del g.node[data.draw(st.integers(0, len(g.node) - 1))]
    elif op == "init" and g.initializer:
        init = g.initializer[data.draw(st.integers(0, len(g.initializer) - 1))]
        init.dims[0] = data.draw(number.filter(lambda v: v >= 0))
    return model.SerializeToString()


@FUZZ
@given(data=st.data())
def test_fuzzed_onnx_models(seeds, data):
    path = seeds["dir"] / "fuzzed.onnx"
    path.write_bytes(mutate_onnx(seeds["onnx"], data))
    check(_commands(seeds, path)["onnx"], path, parses=True)
