"""The HTML report: per-cut transfers equal the TaskGraph's messages, the cluster and its links, a
simulated timeline, a run measured against its prediction, bottlenecks with telling digits, Pareto labels
that do not overlap, and the page rendered in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from hetsplit.plan.check import check_plan
from hetsplit.report.html import plans_html
from hetsplit.report.tables import distinct_digits
from hetsplit.workflow import PlanRequest, find_plans, load_problem, report_details

SHOT = (1000, 1400)  # screenshot width, height (px)


@pytest.fixture(scope="module")
def planned():
    problem = load_problem("alexnet", "donna-edge-4cim-cloud-gpu")
    plans = find_plans(problem, PlanRequest(algorithms=("donna",), alphas=(0.0, 0.5, 1.0)))
    return problem, plans


def _section(page: str, name: str) -> str:
    m = re.search(rf"<section id={name}>(.*?)</section>", page, re.S)
    assert m, f"no {name} section"
    return m.group(1)


def test_transfers_of_every_plan_equal_its_taskgraph_messages(planned):
    problem, plans = planned
    page = plans_html(plans, "t", report_details(problem, plans))
    for i, plan in enumerate(plans):
        block = re.search(rf"<summary id=plan{i}>(.*?)</details>", page, re.S).group(1)
        shown = [float(b) for b in re.findall(r"data-bytes='([0-9.]+)'", block)]
        messages = check_plan(problem.graph, problem.cluster, plan).messages()
        assert shown == [round(m.nbytes) for m in messages]
        times = [float(t) for t in re.findall(r"data-s='([^']+)'", block)]
        cl = problem.cluster
        assert times == pytest.approx([float(cl.transfer_time(m.src, m.dst, m.nbytes)) for m in messages])
    assert page.count("<tr data-cut>") >= len(plans)  # the edge cluster's source: every plan moves its input


def test_cluster_timeline_and_run_sections(planned):
    problem, plans = planned
    from hetsplit.workflow.comparison import Comparison, Row

    run = Comparison(None, [Row("throughput (1/s)", 100.0, 205.0)],
                     ["measured throughput is 2.05x the prediction (above it)"])
    details = report_details(problem, plans, run=run)
    page = plans_html(plans, "t", details)
    cluster = _section(page, "cluster")
    assert all(f"<td class=l>{name}</td>" in cluster for name in problem.cluster.names)
    assert cluster.count("<tr>") == problem.cluster.num_devices + 1 + len(details.cluster["links"]) + 1
    timeline = _section(page, "timeline")
    assert f"plan {details.featured}" in timeline and "data:image/png;base64," in timeline
    assert f"{details.timeline.throughput:.4g} inferences/s" in timeline
    measured = _section(page, "measured")
    assert "<td>100</td><td>205</td><td>2.050</td>" in measured and "above it" in measured


def test_a_bare_run_report_is_set_beside_the_plans_metrics(planned):
    from hetsplit.runtime.report import DeviceRun, RunReport

    problem, plans = planned
    plan = plans[0]
    devices = [DeviceRun(d, 1e-3, 1e-3) for d in plan.devices]
    report = RunReport(plan.model, devices, [], 10, 2 * plan.metrics.throughput, 1e-3, 1e-3, [], None, 1.0)
    details = report_details(problem, plans, featured=0, run=RunReport.from_dict(report.to_dict()))
    assert details.run.row("throughput (1/s)").ratio == pytest.approx(2.0)
    assert any("the stage bound" in n for n in details.run.notes)  # measured far above a stage bound of 1/s


def test_bottleneck_digits_tell_plans_apart():
    assert distinct_digits([1.0, 2.0]) == 4
    assert distinct_digits([3.48537, 3.48539]) == 6
    assert distinct_digits([1.0, 1.0 + 1e-15]) == 4  # equal at 12 digits: no more digits needed
    assert distinct_digits([]) == 4


def test_pareto_labels_do_not_overlap(tmp_path):
    import matplotlib.pyplot as plt

    from hetsplit.report.plots import place_labels

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    points = {(195.8, 1.48): "gpu0", (196.9, 1.479): "α=0.2,0.4,0.6,0.8", (197.5, 1.5): "exact",
              (286.9, 5.7): "α=1", (12.4, 1.3e-3): "α=0, cim0"}
    ax.scatter(*zip(*points))
    ax.set_yscale("log")
    fig.tight_layout()
    fig.canvas.draw()
    boxes = [a.get_window_extent(fig.canvas.get_renderer()) for a in place_labels(ax, points)]
    plt.close(fig)
    assert len(boxes) == len(points)
    assert not [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]


def test_report_command_writes_every_section(planned, tmp_path):
    from hetsplit.cli.main import main
    from hetsplit.plan import save_plans

    problem, plans = planned
    save_plans(plans, tmp_path / "plans.json", model=problem.graph.name, cluster=problem.cluster.name)
    assert main(["report", str(tmp_path / "plans.json"), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert all(f"<section id={s}>" in page for s in ("cluster", "timeline")) and "data-bytes" in page


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.timeout(120)
def test_report_renders_in_headless_chromium(planned, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless Chromium here (Debian package `chromium`: apt-get install -y chromium)")
    from PIL import Image

    problem, plans = planned
    page = tmp_path / "report.html"
    page.write_text(plans_html(plans, "screenshot", report_details(problem, plans)), encoding="utf-8")
    shot = tmp_path / "shot.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={SHOT[0]},{SHOT[1]}", f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=100)
    if not shot.is_file():
        pytest.skip(f"Chromium ran but wrote no screenshot (exit {done.returncode}): {done.stderr[-300:]}")
    image = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert image.shape == (SHOT[1], SHOT[0])
    assert image.std() > 10 and (image < 128).mean() > 0.01  # text, tables and plots, not a blank page
