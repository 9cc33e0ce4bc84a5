"""Models straight from torch's exporter: dynamic batch and shape arithmetic fold to static."""

from __future__ import annotations

import warnings

import pytest

from hetsplit.graph import load_onnx

torch = pytest.importorskip("torch")


class TinyAttention(torch.nn.Module):
    def __init__(self, e: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(e, 3 * e)
        self.out = torch.nn.Linear(e, e)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4)
        p = torch.softmax(q @ k.transpose(-2, -1) / (e // self.heads) ** 0.5, -1)
        return self.out((p @ v).transpose(1, 2).reshape(b, s, e))


def _export(tmp_path, dynamic: bool):
    path = tmp_path / f"attn_{dynamic}.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(TinyAttention().eval(), (torch.zeros(1, 6, 32),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "batch"}} if dynamic else None)
    return load_onnx(path)


def test_dynamic_batch_export_equals_static_export(tmp_path):
    static, dynamic = _export(tmp_path, False), _export(tmp_path, True)
    assert [layer.op for layer in dynamic.layers] == [layer.op for layer in static.layers]
    assert dynamic.total_macs == static.total_macs
    s, e, h = 6, 32, 4
    assert static.total_macs == s * e * 3 * e + 2 * h * s * s * (e // h) + s * e * e
    assert dynamic.cut_bytes.tolist() == static.cut_bytes.tolist()
    scores = next(layer for layer in dynamic.layers if layer.op == "matmul")
    assert scores.attrs["heads"] == h and scores.attrs["batch"] == h
