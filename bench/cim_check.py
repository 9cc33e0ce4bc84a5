"""The CIM model against NeuroSim's VGG8 figures and DONNA's per-layer behaviour.

Run: .venv/bin/python bench/cim_check.py [vgg8 vgg19 resnet152 ...]
"""

from __future__ import annotations

import sys

import numpy as np

from hetsplit.costs.models import device_model
from hetsplit.costs.models.cim import CimModel, CimParams
from hetsplit.costs.profiler import resolve_device
from hetsplit.graph import zoo

NEUROSIM_VGG8 = {"time_s": 1.36e-3, "energy_j": 45e-6}


def main(models: list[str]) -> None:
    cim, cpu, gpu = (resolve_device(n) for n in ("neurosim-rram", "xeon-w3323", "rtx3070ti"))
    g = zoo.load("vgg8")
    lc = device_model(cim).layer_costs(g)
    parts = CimModel(CimParams.from_params(cim.params, "neurosim-rram")).breakdown(g)
    share = sum(c.t_buffer for c in parts) / sum(c.time_s for c in parts)
    print(f"VGG8/CIFAR-10 on neurosim-rram: {lc.time_s.sum() * 1e3:.3f} ms "
          f"({lc.time_s.sum() / NEUROSIM_VGG8['time_s'] - 1:+.1%} vs NeuroSim 1.36 ms), "
          f"{lc.energy_j.sum() * 1e6:.1f} uJ ({lc.energy_j.sum() / NEUROSIM_VGG8['energy_j'] - 1:+.1%} vs 45 uJ), "
          f"buffer share of latency {share:.0%} (NeuroSim ~74%)")
    print("\nDONNA: CIM slowest on convolutions except the last FC layers; most energy-efficient")
    print(f"{'model':10} {'convs':>5} {'slowest':>11} {'> GPU':>9} {'last FCs: CIM not slowest':>26} "
          f"{'CIM least energy':>17}")
    for name in models:
        g = zoo.load(name)
        t = {d.name: device_model(d).layer_costs(g) for d in (cim, cpu, gpu)}
        tc, tcpu, tgpu = (t[n].time_s for n in ("neurosim-rram", "xeon-w3323", "rtx3070ti"))
        convs = [i for i, layer in enumerate(g.layers) if layer.op in ("conv", "dwconv")]
        fcs = [i for i, layer in enumerate(g.layers) if layer.op == "gemm"][-2:]
        slowest = int(np.sum(tc[convs] > np.maximum(tcpu[convs], tgpu[convs])))
        slower_gpu = int(np.sum(tc[convs] > tgpu[convs]))
        fc_ok = all(tc[i] < max(tcpu[i], tgpu[i]) for i in fcs)
        ec = t["neurosim-rram"].energy_j
        other = np.minimum(t["xeon-w3323"].energy_j, t["rtx3070ti"].energy_j)
        finite = np.isfinite(ec)
        print(f"{name:10} {len(convs):5d} {slowest:>7d}/{len(convs):<3d} {slower_gpu:>5d}/{len(convs):<3d} "
              f"{str(fc_ok):>26} {int(np.sum(ec[finite] < other[finite])):>11d}/{int(finite.sum()):<5d}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["vgg8", "vgg16", "vgg19", "resnet50", "resnet152", "alexnet"])
