"""Models as a third party exports them, built in the tests: symbolic batch, height and width (a
detector with strided convs, a ConvTranspose and a Resize) or sequence length (an attention block),
exported by torch's TorchScript exporter with ``dynamic_axes``; and a two-CPU cluster YAML."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

CLUSTER_YAML = """\
format: hetsplit.cluster/1
name: two-cpus
devices:
  - {name: cpu0, kind: cpu, memory: 1GiB, peak_macs: 2e8/s, mem_bandwidth: 1GB/s, power_active: 10W}
  - {name: cpu1, kind: cpu, memory: 1GiB, peak_macs: 1e8/s, mem_bandwidth: 1GB/s, power_active: 5W}
links:
  default: {bandwidth: 10GB/s, latency: 1us}
"""


class Detector(nn.Module):
    """A text-detector shape: down twice, up by a ConvTranspose, a skip, a Resize, a per-pixel head."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.head = nn.Conv2d(8, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.c1(x))
        u = self.up(torch.relu(self.c2(a))) + a
        u = nn.functional.interpolate(u, scale_factor=2.0, mode="nearest")
        return torch.sigmoid(self.head(u))


class Attention(nn.Module):
    """One self-attention block over a sequence of any length (heads reshaped from the input's shape)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return x + self.out((att @ v).transpose(1, 2).reshape(b, s, d))


def export(module: nn.Module, example: torch.Tensor, path: Path, input_name: str, axes: dict[int, str],
           opset: int = 17) -> Path:
    torch.manual_seed(0)
    module = module.eval()
    torch.onnx.export(module, (example,), str(path), input_names=[input_name], output_names=["out"],
                      dynamic_axes={input_name: axes}, opset_version=opset, dynamo=False)
    return path


def detector(path: Path, opset: int = 17) -> Path:
    torch.manual_seed(0)
    return export(Detector(), torch.randn(1, 3, 32, 48), path, "images", {0: "batch", 2: "height", 3: "width"}, opset)


def attention(path: Path, opset: int = 17) -> Path:
    torch.manual_seed(0)
    return export(Attention(), torch.randn(1, 10, 32), path, "tokens", {0: "batch", 1: "seq"}, opset)
