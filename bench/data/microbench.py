"""Op-class micro-benchmark models for calibration (nn-Meter style kernel coverage the zoo lacks).

  .venv/bin/python bench/data/microbench.py bench/data/epyc-milan-1t     # writes silu-bench.onnx, dw-bench.onnx
  hetsplit profile bench/data/epyc-milan-1t/silu-bench.onnx --device local-cpu --threads 1 \\
      --statistic min --clock cpu --repeats 15 --out bench/data/epyc-milan-1t/silu-bench.json

silu-bench: 3x3 and 1x1 convolutions with SiLU (ONNX Sigmoid + Mul, not fused by onnxruntime) next to
the same convolutions with ReLU (fused), at 160x160x16 down to 20x20x128: the difference is SiLU's cost.
dw-bench: depthwise 3x3 convolutions (stride 1 and 2, ReLU6) at the shapes of inverted-residual blocks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn


def silu_bench() -> tuple[nn.Module, torch.Tensor]:
    layers: list[nn.Module] = []
    c = 16
    for cn, s in [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1)]:
        for act in (nn.SiLU, nn.ReLU):
            layers += [nn.Conv2d(c, cn, 3, s if act is nn.SiLU else 1, 1), act()]
            c = cn
            layers += [nn.Conv2d(c, c, 1), act()]
    return nn.Sequential(*layers), torch.randn(1, 16, 160, 160)


def dw_bench() -> tuple[nn.Module, torch.Tensor]:
    layers: list[nn.Module] = []
    c = 24
    for cn, s in [(24, 1), (48, 2), (48, 1), (96, 2), (96, 1), (192, 2), (192, 1), (384, 2), (384, 1)]:
        if cn != c:
            layers += [nn.Conv2d(c, cn, 1), nn.ReLU6()]
            c = cn
        layers += [nn.Conv2d(c, c, 3, s, 1, groups=c), nn.ReLU6()]
    return nn.Sequential(*layers), torch.randn(1, 24, 112, 112)


def main(out: str) -> None:
    for name, make in (("silu-bench", silu_bench), ("dw-bench", dw_bench)):
        torch.manual_seed(0)
        model, x = make()
        path = Path(out) / f"{name}.onnx"
        torch.onnx.export(model.eval(), x, str(path), opset_version=17, input_names=["input"], dynamo=False)
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/data/epyc-milan-1t")
