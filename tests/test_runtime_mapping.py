"""Mappings (plan/2 assign: shards, combines, non-contiguous placements) split and run for real.

Every run starts one process per device plus the driver, moves real tensors and verifies every
output against the unsplit model; the bytes each worker sends per input are checked against the
messages of the plan's TaskGraph (check_plan).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnxruntime as ort
import pytest

from factories import cluster
from programs import run_inline
from hetsplit.errors import ModelError, RuntimeFailure
from hetsplit.graph.onnx_import import load_onnx
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Combine, Plan, Shard
from hetsplit.runtime import RunOptions, load_manifest, run_manifest, run_plan, split_model
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.compile import plan_cluster
from hetsplit.runtime.rounds import segment_lags

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional
pytestmark = pytest.mark.timeout(180)


# ---- models (torch, exported with opset 17 and static shapes) -------------------------------------

class Inception(nn.Module):
    """A stem, four branches of convolutions (one behind a max pool) concatenated, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.Conv2d(8, 4, 1)
        self.b2a, self.b2b = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 6, 3, padding=1)
        self.b3a, self.b3b = nn.Conv2d(8, 2, 1), nn.Conv2d(2, 4, 5, padding=2)
        self.b4 = nn.Conv2d(8, 2, 1)
        self.head, self.fc = nn.Conv2d(16, 8, 1), nn.Linear(8, 5)

    def forward(self, x):
        x = F.relu(self.stem(x))
        a = F.relu(self.b1(x))
        b = F.relu(self.b2b(F.relu(self.b2a(x))))
        c = F.relu(self.b3b(F.relu(self.b3a(x))))
        d = F.relu(self.b4(F.max_pool2d(x, 3, 1, 1)))
        y = F.relu(self.head(torch.cat([a, b, c, d], 1)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.f1, self.f2 = nn.Linear(16 * 4 * 4, 32), nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


class Block(nn.Module):
    """A Transformer block: multi-head attention by hand (views with -1), residuals, LayerNorm, GELU FFN."""

    def __init__(self, e=64, heads=4, f=128, fixed_heads=False):
        super().__init__()
        self.h, self.d, self.fixed = heads, e // heads, fixed_heads
        self.q, self.k, self.v, self.o = (nn.Linear(e, e) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(e), nn.LayerNorm(e)
        self.f1, self.f2 = nn.Linear(e, f), nn.Linear(f, e)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.h if self.fixed else -1
        q = self.q(x).view(b, s, h, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, h, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, h, self.d).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-2, -1) / self.d ** 0.5, -1)
        x = self.ln1(x + self.o((p @ v).transpose(1, 2).reshape(b, s, -1)))
        return self.ln2(x + self.f2(F.gelu(self.f1(x))))


def export(module, shape, path):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(*shape),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return load_onnx(path), path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    return {"incep": export(Inception(), (1, 3, 8, 8), d / "incep.onnx"),
            "cnn": export(SmallCNN(), (1, 3, 16, 16), d / "cnn.onnx"),
            "block": export(Block(), (1, 8, 64), d / "block.onnx")}


# ---- plans ------------------------------------------------------------------------------------------

def shards(devices, axis, size):
    step = size // len(devices)
    return tuple(Shard(d, axis, i * step, (i + 1) * step) for i, d in enumerate(devices))


def inception_plan(g) -> Plan:
    """d0 runs the stem, b1, then b4 to the end: layers that are not consecutive."""
    assign = {n: "d0" for n in g.names}
    assign.update({"b2a/Conv": "d1", "b2b/Conv": "d1", "b3a/Conv": "d2", "b3b/Conv": "d2", "MaxPool": "d2"})
    return Plan(g.name, "", "hand", assign=assign)


def cnn_plan_lop_lip(g) -> Plan:
    """conv c2 by output channels (concat on d1), fc f1 by input rows (sum on d0), 2 devices."""
    s = Shard
    assign = {"c1/Conv": "d0", "MaxPool": "d0", "c2/Conv": (s("d0", "out", 0, 8), s("d1", "out", 8, 16)),
              "MaxPool_1": "d1", "f1/Gemm": (s("d0", "in", 0, 128), s("d1", "in", 128, 256)), "f2/Gemm": "d1"}
    return Plan(g.name, "", "hand", assign=assign,
                combine={"c2/Conv": Combine("concat", "d1"), "f1/Gemm": Combine("sum", "d0")})


def cnn_plan_lip_lop(g) -> Plan:
    """conv c1 and c2 by input channels (sums on a device holding no shard), fc f1 by output columns
    (concat), f2 by input rows, 3 devices; c1's slices of the model input are cut by the driver."""
    s = Shard
    assign = {"c1/Conv": (s("d1", "in", 0, 1), s("d2", "in", 1, 3)), "MaxPool": "d0",
              "c2/Conv": (s("d0", "in", 0, 4), s("d1", "in", 4, 8)), "MaxPool_1": "d2",
              "f1/Gemm": (s("d0", "out", 0, 16), s("d1", "out", 16, 32)),
              "f2/Gemm": (s("d1", "in", 0, 16), s("d2", "in", 16, 32))}
    return Plan(g.name, "", "hand", assign=assign,
                combine={"c1/Conv": Combine("sum", "d0"), "c2/Conv": Combine("sum", "d2"),
                         "f1/Gemm": Combine("concat", "d2"), "f2/Gemm": Combine("sum", "d1")})


def block_plan(g, devices, tree=0, ln1=None, ln2=None) -> Plan:
    """Heads split across ``devices``: Q/K/V out shards on head boundaries (no combine), attention as
    chain shards, the output projection in shards summed on devices[0]; FFN first linear out (GELU
    fused), second linear in + sum."""
    assign = {name: shards(devices, "out", 64) for name in ("q/MatMul", "k/MatMul", "v/MatMul")}
    assign.update({name: shards(devices, "out", 4) for name in ("MatMul", "Softmax", "MatMul_1")})
    assign.update({"o/MatMul": shards(devices, "in", 64), "Add": ln1 or devices[-1],
                   "f1/MatMul": shards(devices, "out", 128), "f2/MatMul": shards(devices, "in", 128),
                   "Add_2": ln2 or devices[0]})
    return Plan(g.name, "", "hand", assign=assign, combine={"o/MatMul": Combine("sum", devices[0], tree),
                                                            "f2/MatMul": Combine("sum", devices[0], tree)})


# ---- checks -----------------------------------------------------------------------------------------

def taskgraph_messages(g, plan, cl):
    return check_plan(g, plan_cluster(plan, cl), plan).messages()


def assert_messages_match_the_taskgraph(manifest, g, plan, cl):
    """Worker-to-worker messages are exactly the TaskGraph's, with the bytes it counts."""
    names = plan_cluster(plan, cl).names
    want = sorted((m.payload, names[m.src], names[m.dst], m.nbytes) for m in taskgraph_messages(g, plan, cl))
    got = sorted((m.payload, m.src, m.dst, float(m.nbytes)) for m in manifest.messages
                 if "driver" not in (m.src, m.dst))
    assert got == want
    # the estimate's word for the plans the runtime runs input by input (estimate.here) is the runtime's own
    assert check_plan(g, plan_cluster(plan, cl), plan).sums_across_devices() == bool(manifest.collectives)


def assert_run(report, manifest, g, plan, cl, n):
    assert report.verify.ok and report.verify.outputs_checked == n
    assert report.verify.max_abs_err < 1e-4
    sent: dict[str, float] = {}
    names = plan_cluster(plan, cl).names
    for m in taskgraph_messages(g, plan, cl):
        sent[names[m.src]] = sent.get(names[m.src], 0.0) + m.nbytes
    assert {d.device: d.send_workers_bytes for d in report.devices} == \
        {d: sent.get(d, 0.0) for d in plan.devices}
    for d in report.devices:
        assert d.compute_s > 0 and d.peak_rss_bytes > 0 and d.cpu_per_input_s > 0
    assert all(len(h.wire_all_s) == n for h in report.hops)      # every message moved for every input
    assert len(report.hops) == len(manifest.messages)
    assert report.throughput > 0 and report.latency_s > 0
    return report.verify.max_abs_err


# ---- runs with real processes -----------------------------------------------------------------------

def test_non_contiguous_inception_mapping_over_three_devices(models, tmp_path):
    g, path = models["incep"]
    cl = cluster(["cpu"] * 3)
    plan = inception_plan(g)
    report = run_plan(plan, g, path, RunOptions(inputs=4, timeout_s=30, run_dir=tmp_path / "run"),
                      split_dir=tmp_path / "split", cluster=cl)
    m = load_manifest(tmp_path / "split")
    d0 = m.worker(1)
    assert d0.device == "d0" and len(d0.segments) == 2      # it waits for the branches between its two runs
    idx = [g.index(t) for t in d0.tasks]
    assert idx != list(range(idx[0], idx[0] + len(idx)))    # not consecutive layers
    assert_messages_match_the_taskgraph(m, g, plan, cl)
    assert_run(report, m, g, plan, cl, 4)
    assert not processes_of(tmp_path / "run")


@pytest.mark.parametrize("make_plan, devices", [(cnn_plan_lop_lip, 2), (cnn_plan_lip_lop, 3)])
def test_cnn_with_conv_and_fc_split_by_lop_and_lip(models, tmp_path, make_plan, devices):
    g, path = models["cnn"]
    cl = cluster(["cpu"] * devices)
    plan = make_plan(g)
    report = run_plan(plan, g, path, RunOptions(inputs=4, timeout_s=30, run_dir=tmp_path / "run"),
                      split_dir=tmp_path / "split", cluster=cl)
    m = load_manifest(tmp_path / "split")
    assert_messages_match_the_taskgraph(m, g, plan, cl)
    assert {c.kind for c in m.collectives} >= {"gather"}
    cuts = [t.take for msg in m.messages for t in msg.tensors if t.take is not None]
    assert cuts, "an 'in' shard's slice is cut by its sender"
    if make_plan is cnn_plan_lip_lop:
        assert any(msg.src == "driver" and msg.tensors[0].take is not None for msg in m.messages)
    assert_run(report, m, g, plan, cl, 4)
    assert not processes_of(tmp_path / "run")


def test_a_manifest_whose_sum_combine_moved_in_gloo_collectives_still_runs(models, tmp_path):
    """A manifest written when gathers and scatters had gloo subgroups of their own (their messages
    ``via`` gather or scatter, all under tag 0) loads with a tag of its own for every message's tensors,
    and runs point to point; a plan with a sum combine runs input by input (every lag 0)."""
    g, path = models["block"]
    m = split_model(block_plan(g, ["a", "b"], ln1="b", ln2="a"), g, path, tmp_path / "split")
    assert set(segment_lags(m).values()) == {0}
    doc = json.loads((tmp_path / "split" / "manifest.json").read_text())
    for d in doc["messages"]:
        d["via"] = "p2p" if d["collective"] is None else doc["collectives"][d["collective"]]["kind"]
        d["tag"] = d["tag"] if d["collective"] is None else 0
    assert {d["via"] for d in doc["messages"]} == {"p2p", "gather", "scatter"}
    (tmp_path / "split" / "manifest.json").write_text(json.dumps(doc))
    old = load_manifest(tmp_path / "split")
    tags = [t for msg in old.messages for t in range(msg.tag, msg.tag + len(msg.tensors))]
    assert len(tags) == len(set(tags))
    assert [msg.tag for msg in old.messages if msg.collective is None] == \
        [d["tag"] for d in doc["messages"] if d["collective"] is None]
    report = run_manifest(old, RunOptions(inputs=3, timeout_s=30, run_dir=tmp_path / "run"))
    assert report.verify.ok and report.verify.outputs_checked == 3 and report.verify.max_abs_err < 1e-4
    assert not processes_of(tmp_path / "run")


def test_transformer_block_by_heads_over_four_devices_with_a_tree_all_reduce(models, tmp_path):
    g, path = models["block"]
    cl = cluster(["cpu"] * 4)
    plan = block_plan(g, ["d0", "d1", "d2", "d3"], tree=2, ln1="d3", ln2="d1")
    report = run_plan(plan, g, path, RunOptions(inputs=4, timeout_s=30, run_dir=tmp_path / "run"),
                      split_dir=tmp_path / "split", cluster=cl)
    m = load_manifest(tmp_path / "split")
    assert_messages_match_the_taskgraph(m, g, plan, cl)
    gathers = [c for c in m.collectives if c.kind == "gather"]
    scatters = [c for c in m.collectives if c.kind == "scatter"]
    # per summed layer: two groups reduce to their leaders (d0, d2), the leaders to the root d0
    assert sorted((c.layer, c.root, c.members) for c in gathers) == sorted(
        [(layer, root, members) for layer in ("o/MatMul", "f2/MatMul")
         for root, members in (("d0", ("d0", "d1")), ("d2", ("d2", "d3")), ("d0", ("d0", "d2")))])
    # o's result goes back down the tree to d3 (LayerNorm there): d0 -> leader d2 -> d3
    assert ("o/MatMul", "d0", ("d0", "d2")) in [(c.layer, c.root, c.members) for c in scatters]
    assert ("o/MatMul", "d2", ("d2", "d3")) in [(c.layer, c.root, c.members) for c in scatters]
    err = assert_run(report, m, g, plan, cl, 4)
    assert err < 1e-4
    assert not processes_of(tmp_path / "run")


@pytest.mark.parametrize("model, fault, says", [
    ("cnn", "die", "died"),        # d1 killed outright
    ("block", "stall", "stalled"),  # d1 stopped: d0 waits in vain for its partial sum (a gather)
])
def test_a_faulty_worker_in_a_mapping_run_is_named(models, tmp_path, model, fault, says):
    g, path = models[model]
    plan = cnn_plan_lop_lip(g) if model == "cnn" else block_plan(g, ["d0", "d1", "d2", "d3"], tree=2)
    m = split_model(plan, g, path, tmp_path / "split")
    assert m.worker(2).device == "d1"
    opts = RunOptions(inputs=6, timeout_s=3, startup_timeout_s=30, run_dir=tmp_path / "run",
                      faults={"2": {"kind": fault, "after": 2}})
    with pytest.raises(RuntimeFailure) as info:
        run_manifest(load_manifest(tmp_path / "split"), opts)
    assert "d1" in str(info.value) and says in str(info.value)
    assert not processes_of(tmp_path / "run")


def test_cli_split_and_run_a_hand_written_plan2(models, tmp_path, capsys):
    from hetsplit.cli.main import main

    g, path = models["cnn"]
    doc = {"format": "hetsplit.plan/2", "model": g.name, "cluster": "local", "algorithm": "hand",
           "params": {"routing": "direct"},
           "assign": {"c1/Conv": "local-cpu0", "MaxPool": "local-cpu0",
                      "c2/Conv": [{"device": "local-cpu0", "axis": "out", "start": 0, "stop": 8},
                                  {"device": "local-cpu1", "axis": "out", "start": 8, "stop": 16}],
                      "MaxPool_1": "local-cpu1",
                      "f1/Gemm": [{"device": "local-cpu1", "axis": "in", "start": 0, "stop": 64},
                                  {"device": "local-cpu0", "axis": "in", "start": 64, "stop": 256}],
                      "f2/Gemm": "local-cpu0"},
           "combine": {"c2/Conv": {"kind": "concat", "on": "local-cpu1"},
                       "f1/Gemm": {"kind": "sum", "on": "local-cpu0"}}}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(doc))
    assert main(["split", str(plan_file), str(path), "--out", str(tmp_path / "split"), "--cluster", "local"]) == 0
    manifest = json.loads((tmp_path / "split" / "manifest.json").read_text())
    assert manifest["format"] == "hetsplit.manifest/2" and len(manifest["workers"]) == 3
    assert all((tmp_path / "split" / s["submodel"]).is_file() for w in manifest["workers"][1:]
               for s in w["segments"] if s["submodel"])
    capsys.readouterr()
    out = tmp_path / "report.json"
    code = main(["run", str(plan_file), str(path), "-n", "3", "--timeout", "30", "--cluster", "local",
                 "--out", str(out), "--run-dir", str(tmp_path / "run")])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["verify"]["ok"] and report["plan_kind"] == "mapping" and len(report["devices"]) == 2
    assert "links" in capsys.readouterr().out
    assert not processes_of(tmp_path / "run")


# ---- split only (no processes) -----------------------------------------------------------------------

def test_two_device_block_segments_compute_the_whole_model_and_round_trip(models, tmp_path):
    g, path = models["block"]
    plan = block_plan(g, ["a", "b"], ln1="b", ln2="a")
    m = split_model(plan, g, path, tmp_path)
    x = np.random.default_rng(3).standard_normal((1, 8, 64)).astype(np.float32)
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_inline(m, {"x": x})["y"], whole, atol=1e-5, rtol=1e-5)
    again = load_manifest(tmp_path)
    assert again.to_dict() == m.to_dict() and again.to_dict()["format"] == "hetsplit.manifest/2"
    assert_messages_match_the_taskgraph(again, g, plan, None)
    assert {c.kind for c in m.collectives} == {"gather", "scatter"}
    # the out-projection's bias Add (its fused epilogue) runs once, after the sum of the partials
    import onnx

    seg = next(s for w in m.stages for s in w.segments if "o/MatMul:sum" in s.tasks)
    ops = [n.op_type for n in onnx.load(str(tmp_path / seg.submodel)).graph.node]
    assert ops.index("Sum") < ops.index("Add")
    shard = next(s for w in m.stages for s in w.segments if "o/MatMul@in[32:64]" in s.tasks)
    assert ops.count("Add") == 1 and "o/MatMul@in[32:64]" == shard.tasks[-1]


def test_a_reshape_to_fixed_heads_cannot_be_cut_and_names_the_layer(tmp_path):
    g, path = export(Block(fixed_heads=True), (1, 8, 64), tmp_path / "fixed.onnx")
    with pytest.raises(ModelError, match="q/MatMul"):
        split_model(block_plan(g, ["a", "b"]), g, path, tmp_path / "split")


def test_pipelines_are_checked_by_check_plan(models, tmp_path):
    from hetsplit.errors import PlanError
    from hetsplit.plan.types import Stage

    g, path = models["cnn"]
    plan = Plan(g.name, "", "pipeedge", [Stage("d0", g.names[:3]), Stage("d0", g.names[3:])])
    with pytest.raises(PlanError, match="at most one stage"):
        split_model(plan, g, path, tmp_path)
