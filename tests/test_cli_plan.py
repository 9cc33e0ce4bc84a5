"""The main commands end to end: inspect, plan (every zoo model, a profile file), demo, and errors."""

import json

import pytest

from hetsplit.cli.main import main
from hetsplit.cluster import load_cluster
from hetsplit.graph import zoo

CLUSTER = "donna-2cpu-1gpu-1cim-hb-wcc"


@pytest.mark.parametrize("model", zoo.names())
def test_plan_runs_on_every_zoo_model(model, capsys):
    assert main(["plan", model, "--cluster", CLUSTER, "--algo", "donna", "exact", "--alpha", "0", "1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    plans = doc["plans"]
    assert {p["algorithm"] for p in plans} == {"donna", "exact", "single"}
    assert any(p["pareto"] for p in plans)
    n_layers = len(zoo.load(model).layers)
    for p in plans:
        assert sum(len(s["layers"]) for s in p["stages"]) == n_layers
        assert p["metrics"]["throughput"] > 0


def test_plan_on_a_profile_file_writes_plans_and_plot(tmp_path, capsys):
    profile = tmp_path / "vgg8.json"
    assert main(["profile", "vgg8", "--device", "rtx3070ti", "--out", str(profile)]) == 0
    doc = json.loads(profile.read_text())
    doc["device_types"]["xeon-w3323"] = doc["device_types"]["rtx3070ti"]  # a second type, as a user would add
    doc["device_types"]["neurosim-rram"] = doc["device_types"]["rtx3070ti"]
    profile.write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert main(["plan", str(profile), "--cluster", CLUSTER, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "★" in text and "donna α=1" in text
    saved = json.loads((out / "plans.json").read_text())
    assert saved["format"] == "hetsplit.planset/1" and saved["model"] == "vgg8"
    assert (out / "pareto.png").stat().st_size > 10_000


def test_inspect_json_lists_layers(capsys):
    assert main(["inspect", "resnet8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["layers"] == 14 == len(doc["layers"])
    assert doc["layers"][0]["op"] == "conv" and doc["layers"][0]["inputs"] == [-1]


def test_demo_compares_with_one_gpu(capsys):
    assert main(["demo"]) == 0
    text = capsys.readouterr().out
    assert "resnet152" in text and "against one GPU" in text and "exact Pareto front" in text


@pytest.mark.parametrize("argv, message", [
    (["plan", "resnet9000", "--cluster", CLUSTER], "resnet152"),          # lists the valid zoo names
    (["plan", "resnet8", "--cluster", "nowhere"], "donna-4cpu-pcie5"),      # lists the built-in clusters
    (["plan", "resnet8", "--cluster", CLUSTER, "--algo", "magic"], "exact"),  # lists the algorithms
    (["inspect", "missing.json"], "no such profile file"),
])
def test_bad_names_exit_2_with_the_valid_ones(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_plan_out_writes_an_html_report_and_report_rewrites_it(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["plan", "vgg8", "--cluster", CLUSTER, "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
    assert page.count("<details>") == len(json.loads((out / "plans.json").read_text())["plans"])
    assert main(["report", str(out / "plans.json"), "--out", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_text().count("<tr class=") == page.count("<tr class=")


def test_plan_last_device_constrains_the_pipeline_solvers(capsys):
    args = ["plan", "resnet8", "--cluster", CLUSTER, "--algo", "exact", "donna", "--alpha", "1",
            "--no-baselines", "--json"]
    assert main(args) == 0
    free = json.loads(capsys.readouterr().out)["plans"]
    last = next(n for n in load_cluster(CLUSTER).names if n != free[0]["stages"][-1]["device"])
    assert main(args + ["--last-device", last]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert {p["algorithm"] for p in plans} == {"exact", "donna"}
    assert all(p["stages"][-1]["device"] == last for p in plans)
