"""A CPU+GPU host, for real: plans made from costs measured on this host, run, verified, measured
beside predicted.

On a host with a CUDA GPU (issue 22, item 6) this
1. times the runtime's per-message overhead against raw torch.distributed here (``runtime_overhead.py
   --skip-pipeline --skip-plans``); raw gloo's largest message's bandwidth becomes the cluster's link's;
2. profiles each model on ``local-gpu`` (hetsplit's ONNX interpreter on PyTorch CUDA, what the GPU
   device's segments run with) and on ``local-cpu`` (onnxruntime, ``--threads`` threads);
3. measures what a message end costs a worker here and what a message adds to an input (the runtime's own
   calibration, ``runtime.calibration``: toy runs, never the runs below; the link's latency as the ``here``
   fidelity takes it) and writes a cluster of those two devices (``cpu0``, ``gpu0``) with them, then plans: ResNet-50 with map-opt and
   HEFT (a node mapping; the best one that uses both devices is run), MobileBERT tensor-parallel over
   both (one shard on the GPU), and each model on the GPU alone;
4. runs each plan with ``hetsplit run --compare`` and prints predicted beside measured. Where the planner
   proposes no split over both devices (it charges what a cut costs), ``--earlier DIR`` runs the split an
   earlier run planned (``bench/data/h200-16c``), costed with this host's profiles, to check it loses;
5. plans each model with the exact pipeline DP and map-opt and, where ``hetsplit plan`` recommends a split
   over the best single device, runs the two alternately (``--recommended-tries``): the recommendation
   judged for real.

    python bench/gpu_host.py --out gpu-host     # a few minutes; everything it wrote is under --out

Without CUDA the GPU device runs on onnxruntime's CPU (the run says so in its executor column), so the
script can be rehearsed anywhere with ``--gpu-profile PRESET`` standing in for the GPU's profile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from runtime_overhead import interval

BENCH = Path(__file__).resolve().parent


def hetsplit(*args: str, log: Path) -> None:
    """Run one ``hetsplit`` command with this interpreter, its output appended to ``log``; fail loudly."""
    cmd = [sys.executable, "-m", "hetsplit.cli.main", *args]
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"\n$ hetsplit {' '.join(args)}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    print(f"  {time.perf_counter() - t0:6.1f} s  hetsplit {' '.join(args)}" + ("" if rc == 0 else f"  -> exit {rc}"),
          flush=True)
    if rc != 0:
        raise SystemExit(f"hetsplit {args[0]} failed (exit {rc}); see {log}")


def host_facts() -> dict:
    import onnxruntime as ort
    import torch

    cuda = torch.cuda.is_available()
    return {"torch": torch.__version__, "cuda": cuda, "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "onnxruntime": ort.__version__, "ort_providers": ort.get_available_providers(),
            "cores": len(os.sched_getaffinity(0))}


def measure_link(out: Path, log: Path) -> dict:
    """Raw gloo's hop here (1 KB: latency; 10 MB: bandwidth) and the runtime's overhead over it."""
    path = out / "hops.json"
    t0 = time.perf_counter()
    with log.open("a") as f:
        rc = subprocess.run([sys.executable, str(BENCH / "runtime_overhead.py"), "--skip-pipeline", "--skip-plans",
                             "--json", str(path)], stdout=f, stderr=subprocess.STDOUT).returncode
    print(f"  {time.perf_counter() - t0:6.1f} s  runtime_overhead.py (hops)", flush=True)
    if rc != 0:
        raise SystemExit(f"runtime_overhead.py failed (exit {rc}); see {log}")
    return link_of(path)


def link_of(hops_json: Path) -> dict:
    """The link of a ``runtime_overhead.py --json`` file: raw gloo's 1 KB hop (latency) and its largest
    message's bandwidth."""
    hops = {r["bytes"]: r for r in json.loads(hops_json.read_text())["hops"]}
    return {"bandwidth": hops[max(hops)]["raw_bandwidth"], "latency": hops[min(hops)]["raw_hop_s"], "hops": hops,
            "from": str(hops_json)}


HOP_FIGURES = ("bytes", "hetsplit_hop_s", "raw_blocking_hop_s", "overhead_vs_blocking", "overhead_vs_blocking_ci95",
               "verdict_vs_blocking", "raw_hop_s", "overhead", "overhead_paired", "overhead_paired_ci95", "verdict",
               "ahead_vs_blocking", "ahead_vs_blocking_ci95", "overhead_vs_same_posting",
               "overhead_vs_same_posting_ci95")


def message_cost() -> dict:
    """What one message end costs a worker's CPU here, fixed and per byte, and the wall time a message adds
    to an input (the links' latency, as the ``here`` fidelity charges it): the runtime's calibration
    measured now (toy runs on two cores, ``runtime.calibration``), with its source."""
    from hetsplit.runtime.calibration import runtime_costs

    t0 = time.perf_counter()
    costs = runtime_costs(recalibrate=True)
    print(f"  {time.perf_counter() - t0:6.1f} s  the runtime's calibration (message ends)", flush=True)
    return {"end_s": costs.worker_end_s, "byte_s": costs.worker_byte_s, "latency_s": costs.message_latency_s,
            "source": costs.source}


def write_cluster(path: Path, model: str, link: dict, message: dict) -> None:
    path.write_text(
        "format: hetsplit.cluster/1\n"
        f"name: gpu-host-{model}\n"
        "description: this host's CPU and GPU, costs measured here (bench/gpu_host.py); the link's bandwidth is raw\n"
        f"  gloo's over loopback, {'from ' + link['from'] if 'from' in link else 'measured here'} (a GPU tensor also "
        "crosses host memory,\n  inside its device's compute time); its latency (what a message adds to an input) "
        "and each message\n  end's CPU are the runtime's calibration here (toy runs, not these runs), as the here "
        "fidelity takes them\n"
        "devices:\n"
        f"  - {{name: cpu0, kind: cpu, type: local-cpu, memory: 32GiB, profile: cpu.{model}.json}}\n"
        f"  - {{name: gpu0, kind: gpu, type: local-gpu, memory: 32GiB, profile: gpu.{model}.json}}\n"
        "links:\n"
        f"  default: {{name: loopback, bandwidth: {link['bandwidth']:.4g}B/s, latency: {message['latency_s'] * 1e6:.1f}us,\n"
        f"            message: {{cpu: {message['end_s'] * 1e6:.2f}us, byte: {message['byte_s']:.4g}}}}}\n")


def plan_index(plans_file: Path, prefer: tuple[str, ...], devices: set[str]) -> tuple[int, str]:
    """The first plan found by one of ``prefer`` (in that order) that uses exactly ``devices``."""
    found = find_plan(plans_file, prefer, devices)
    if found is None:
        raise SystemExit(f"{plans_file}: no plan by {prefer} uses {sorted(devices)}")
    return found


def earlier_plans(earlier: Path, model: str, out: Path, cluster: Path) -> Path:
    """The plans an earlier run of this script made for ``model`` (``earlier``/plans.<model>.json), each
    pointed at this host's ``cluster``: a split the planner no longer proposes, run to check that it loses."""
    doc = json.loads((earlier / f"plans.{model}.json").read_text())
    for p in doc["plans"]:
        p["cluster_file"] = str(cluster)
    path = out / f"plans.{model}.earlier.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def find_plan(plans_file: Path, prefer: tuple[str, ...], devices: set[str]) -> tuple[int, str] | None:
    """``plan_index``, or None where no such plan is there."""
    plans = json.loads(plans_file.read_text())["plans"]

    def used(p: dict) -> set[str]:
        out = set()
        for v in p["assign"].values():
            out |= {v} if isinstance(v, str) else {s["device"] for s in v}
        return out

    for algo in prefer:
        for i, p in enumerate(plans):
            if p["algorithm"].startswith(algo) and used(p) == devices:
                return i, p["algorithm"]
    return None


def judge_recommendation(model: str, cluster: Path, out: Path, inputs: int, threads: str, tries: int,
                         log: Path) -> dict:
    """Plan ``model`` with the exact pipeline DP and map-opt and, where ``hetsplit plan`` recommends a split
    over the best single device, run the two alternately ``tries`` times each: a plan
    is judged against the best single device on the real host. The measured throughputs, with the
    recommendation's note."""
    plans = out / f"plans.{model}.recommended"
    hetsplit("plan", model, "--cluster", str(cluster), "--algo", "exact", "map-opt", "--time-budget", "10",
             "--out", str(plans), log=log)
    rec = json.loads((plans / "plans.json").read_text())["recommendation"]
    got: dict = {"note": rec.get("note"), "recommends_split": bool(rec.get("recommends_split")), "runs": []}
    if not got["recommends_split"]:
        return got
    single = rec["best_single_device"]
    for k in range(tries):
        for tag, i in (("split", rec["recommended"]), (f"{single['device']}-alone", single["index"])):
            run_json = run_plan(plans / "plans.json", model, i, f"recommended.{tag}.{k}", inputs, threads, out, log)
            got["runs"].append(summary_row(f"{model} recommended {tag} #{k}", run_json, model, i))
    return got


def run_plan(plans: Path, model: str, index: int, tag: str, inputs: int, threads: str, out: Path, log: Path) -> Path:
    """``hetsplit run --compare`` of plan ``index`` of ``plans``; the report's path (``run.<model>.<tag>.json``)."""
    run_json = out / f"run.{model}.{tag}.json"
    hetsplit("run", str(plans), model, "--index", str(index), "--inputs", str(inputs), "--threads", threads,
             "--compare", "--out", str(run_json), "--run-dir", str(out / f"rundir.{model}.{tag}"), log=log)
    return run_json


def summary_row(label: str, run_json: Path, model: str, index: int) -> dict:
    from hetsplit.workflow.comparison import Comparison
    from hetsplit.workflow.run import read_run_doc

    run = read_run_doc(run_json)
    if not isinstance(run, Comparison) or run.report is None:
        raise SystemExit(f"{run_json}: not a run compared with its prediction (hetsplit run --compare --out)")
    m, p, v = run.report, run.predicted, run.report.verify
    return {"run": label, "model": model, "plan_index": index, "report": run_json.name,
            "verified": v is not None and v.ok, "outputs": v.outputs_checked if v else 0,
            "max_abs_err": v.max_abs_err if v else None,
            "executors": {d.device: d.executor for d in m.devices},
            "compute_s": {d.device: d.compute_s for d in m.devices},
            "segments": {d.device: d.segments for d in m.devices},
            "predicted_compute_s": p.compute_s_per_device if p else None,
            "throughput": m.throughput, "predicted_throughput": p.throughput if p else None,
            "latency_s": m.latency_s, "predicted_latency_s": p.latency_s if p else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("gpu-host"))
    ap.add_argument("--threads", type=int, default=4, help="onnxruntime threads of the CPU device")
    ap.add_argument("--inputs", type=int, default=100, help="inputs of each ResNet-50 run")
    ap.add_argument("--tp-inputs", type=int, default=20, help="inputs of each MobileBERT run")
    ap.add_argument("--gpu-profile", default="local-gpu",
                    help="the GPU's profile device (a preset, such as rtx3070ti, to rehearse without a GPU)")
    ap.add_argument("--skip-hops", action="store_true", help="link figures of the local cluster instead")
    ap.add_argument("--earlier", type=Path, default=None, metavar="DIR",
                    help="where the planner proposes no split over both devices, run the split of this earlier "
                         "run's plans (its plans.<model>.json), costed with this host's profiles")
    ap.add_argument("--recommended-tries", type=int, default=2, metavar="K",
                    help="where the planner recommends a split, run it and the best single device alternately K "
                         "times each (0: not)")
    ap.add_argument("--hops", type=Path, default=None, metavar="FILE",
                    help="take the link from this runtime_overhead.py --json file (measured earlier on a host of "
                         "this kind) instead of measuring the hops first (minutes)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    facts = host_facts()
    print(json.dumps(facts), flush=True)
    link = ({"bandwidth": 1e9, "latency": 150e-6, "hops": {}} if args.skip_hops else
            link_of(args.hops) if args.hops else measure_link(out, log))
    message = message_cost()
    rows, whole, recommended, t = [], {}, {}, str(args.threads)
    for model, algos, prefer, n in (("resnet50", ["map-opt", "heft"], ("map-opt", "heft"), args.inputs),
                                    ("mobilebert", ["tensor-parallel"], ("tensor-parallel",), args.tp_inputs)):
        hetsplit("profile", model, "--device", args.gpu_profile, "--out", str(out / f"gpu.{model}.json"), log=log)
        hetsplit("profile", model, "--device", "local-cpu", "--threads", t, "--out", str(out / f"cpu.{model}.json"),
                 log=log)
        whole[model] = {dev: json.loads((out / f"{dev}.{model}.json").read_text()).get("whole_model", {}).get("time_s")
                        for dev in ("gpu", "cpu")}
        cluster = out / f"cluster.{model}.yaml"
        write_cluster(cluster, model, link, message)
        plans = out / f"plans.{model}"
        hetsplit("plan", model, "--cluster", str(cluster), "--algo", *algos, "--time-budget", "10", "--out", str(plans),
                 log=log)
        split_file, proposed = plans / "plans.json", True
        found = find_plan(split_file, prefer, {"cpu0", "gpu0"})
        if found is None and args.earlier is not None:      # the planner proposes no split here: run the old one
            split_file, proposed = earlier_plans(args.earlier, model, out, cluster), False
            found = find_plan(split_file, prefer, {"cpu0", "gpu0"})
        alone, _ = plan_index(plans / "plans.json", ("single",), {"gpu0"})
        todo = [(f"{model} gpu0 alone", plans / "plans.json", alone, "alone")]
        if found is None:
            print(f"  {model}: the planner proposes no split over cpu0 and gpu0 (--earlier DIR runs an earlier one)")
        else:
            index, algo = found
            todo.insert(0, (f"{model} {algo} cpu0+gpu0" + ("" if proposed else f" (not proposed here; {args.earlier}'s "
                                                                             "plan)"), split_file, index, "split"))
        for label, file, i, tag in todo:
            run_json = run_plan(file, model, i, tag, n, t, out, log)
            rows.append(summary_row(label, run_json, model, i) | {"plans": file.name, "proposed": proposed or
                                                                  tag == "alone"})
        if args.recommended_tries > 0:
            recommended[model] = judge_recommendation(model, cluster, out, n, t, args.recommended_tries, log)
    doc = {"host": facts, "link": {k: v for k, v in link.items() if k != "hops"},
           "hops": [{k: r[k] for k in HOP_FIGURES} for r in link["hops"].values()], "whole_model_s": whole,
           "message": message, "recommended": recommended,
           "runs": rows}
    (out / "summary.json").write_text(json.dumps(doc, indent=1))
    print(f"\nhost: {facts['gpu'] or 'no CUDA GPU'}, {facts['cores']} cores, torch {facts['torch']}, "
          f"onnxruntime {facts['onnxruntime']} {facts['ort_providers']}")
    print(f"link (raw gloo, {link.get('from', 'here')}): {link['bandwidth'] / 1e9:.2f} GB/s, {link['latency'] * 1e6:.0f} us; a message end "
          f"{message['end_s'] * 1e6:.1f} us + {message['byte_s'] * 1e9:.2f} ns/B ({message['source']})")
    for h in doc["hops"]:
        print(f"  hop {h['bytes']:>9} B: ours {h['hetsplit_hop_s'] * 1e3:.3f} ms; against blocking send/recv "
              f"({h['raw_blocking_hop_s'] * 1e3:.3f} ms) {interval(h, 'overhead_vs_blocking')} "
              f"{h['verdict_vs_blocking']}; against raw's best ({h['raw_hop_s'] * 1e3:.3f} ms) "
              f"{interval(h, 'overhead_paired')} {h['verdict']}")
    for model, w in whole.items():
        if None in w.values():
            continue
        print(f"{model} whole model: GPU device's executor {w['gpu'] * 1e3:.2f} ms, onnxruntime CPU ({t} threads) "
              f"{w['cpu'] * 1e3:.2f} ms (x{w['cpu'] / w['gpu']:.1f})")
    for r in rows:
        comp = ", ".join(f"{d} {r['executors'][d]} {r['compute_s'][d] * 1e3:.2f} ms"
                         + (f" (pred {r['predicted_compute_s'][d] * 1e3:.2f})" if r["predicted_compute_s"] and d in
                            r["predicted_compute_s"] else "") + f" in {r['segments'][d]} segment(s)"
                         for d in r["executors"])
        print(f"{r['run']}: {r['throughput']:.1f}/s (pred {r['predicted_throughput']:.1f}/s, x"
              f"{r['throughput'] / r['predicted_throughput']:.2f}), latency {r['latency_s'] * 1e3:.2f} ms (pred "
              f"{r['predicted_latency_s'] * 1e3:.2f}), verified {r['verified']} ({r['outputs']} outputs, max abs err "
              f"{r['max_abs_err']:.2g}); compute/input: {comp}")
    for model, rec in recommended.items():
        print(f"{model}: the planner recommends: {rec['note']}")
        if rec["runs"]:
            split = [r["throughput"] for r in rec["runs"] if " split " in r["run"]]
            alone = [r["throughput"] for r in rec["runs"] if " split " not in r["run"]]
            print(f"  run alternately: the split {', '.join(f'{x:.1f}' for x in split)}/s (pred "
                  f"{rec['runs'][0]['predicted_throughput']:.1f}), the best single device "
                  f"{', '.join(f'{x:.1f}' for x in alone)}/s (pred {rec['runs'][1]['predicted_throughput']:.1f}): "
                  + ", ".join(f"x{a / b:.2f}" for a, b in zip(split, alone)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
