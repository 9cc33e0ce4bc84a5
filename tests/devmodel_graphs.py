"""Small hand-built graphs for the device-model tests (attrs as the ONNX importer writes them)."""

from __future__ import annotations

from hetsplit.graph.types import INPUT, Graph, Layer, Tensor

F32 = 4


def conv(name: str, c_in: int, c_out: int, hw: int, k: int = 3, stride: int = 1, pad: int | None = None,
         groups: int = 1, activation: str | None = "relu") -> Layer:
    pad = k // 2 if pad is None else pad
    out = (hw + 2 * pad - k) // stride + 1
    macs = out * out * c_out * (c_in // groups) * k * k
    op = "dwconv" if groups > 1 and groups == c_in else "conv"
    return Layer(name, op, macs, c_out * (c_in // groups) * k * k * F32, out * out * c_out * F32,
                 hw * hw * c_in * F32, nodes=(name,),
                 attrs=dict(c_in=c_in, c_out=c_out, kernel=(k, k), stride=(stride, stride), pads=(pad,) * 4,
                            groups=groups, in_hw=(hw, hw), out_hw=(out, out), activation=activation,
                            elem_bytes=F32))


def gemm(name: str, k: int, n: int, m: int = 1, activation: str | None = None) -> Layer:
    return Layer(name, "gemm", m * k * n, (k * n + n) * F32, m * n * F32, m * k * F32, nodes=(name,),
                 attrs=dict(m=m, k=k, n=n, activation=activation, elem_bytes=F32))


def matmul(name: str, m: int, k: int, n: int, batch: int = 1, heads: int = 1) -> Layer:
    return Layer(name, "matmul", batch * heads * m * k * n, 0, batch * heads * m * n * F32,
                 2 * batch * heads * (m * k + k * n) * F32 // 2, nodes=(name,),
                 attrs=dict(m=m, k=k, n=n, batch=batch, heads=heads, elem_bytes=F32))


def pool(name: str, c: int, hw: int, k: int = 2) -> Layer:
    out = hw // k
    return Layer(name, "pool", 0, 0, out * out * c * F32, hw * hw * c * F32, nodes=(name,),
                 attrs=dict(kernel=(k, k), stride=(k, k), in_hw=(hw, hw), out_hw=(out, out), channels=c,
                            elem_bytes=F32))


def eltwise(name: str, elements: int, op: str = "eltwise") -> Layer:
    return Layer(name, op, 0, 0, elements * F32, elements * F32, nodes=(name,),
                 attrs=dict(elements=elements, elem_bytes=F32))


def chain(name: str, layers: list[Layer], input_bytes: int | None = None) -> Graph:
    """A sequential graph: each layer reads the one before it."""
    first_in = layers[0].in_bytes if input_bytes is None else input_bytes
    tensors = [Tensor("input", INPUT, first_in, (0,))]
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        tensors.append(Tensor(f"{layer.name}_out", i, layer.out_bytes, () if last else (i + 1,), is_output=last))
    return Graph(name, layers, tensors)


def vgg8() -> Graph:
    """VGG8 for CIFAR-10 as NeuroSim's NetWork_VGG8.csv describes it (pools as separate layers)."""
    layers = [conv("conv1", 3, 128, 32), conv("conv2", 128, 128, 32), pool("pool1", 128, 32),
              conv("conv3", 128, 256, 16), conv("conv4", 256, 256, 16), pool("pool2", 256, 16),
              conv("conv5", 256, 512, 8), conv("conv6", 512, 512, 8), pool("pool3", 512, 8),
              gemm("fc1", 8192, 1024, activation="relu"), gemm("fc2", 1024, 10)]
    return chain("vgg8", layers)


def llama_blocks(blocks: int = 1, e: int = 512, f: int = 2048, heads: int = 8, seq: int = 1,
                 context: int = 128) -> Graph:
    """TinyLlama-42M-like decoder blocks (Bochem et al.): E=512, F=2048, 8 heads.

    ``seq`` = 1 is autoregressive decoding (GEMV, a KV cache of ``context`` tokens); ``seq`` > 1 is
    prompt mode (GEMM, attention over the ``seq`` tokens).
    """
    hd, ctx = e // heads, (context if seq == 1 else seq)
    layers: list[Layer] = []
    for b in range(blocks):
        p = f"b{b}."
        layers += [eltwise(p + "norm1", seq * e, "norm"),
                   gemm(p + "q", e, e, seq), gemm(p + "k", e, e, seq), gemm(p + "v", e, e, seq),
                   matmul(p + "qk", seq, hd, ctx, heads=heads), eltwise(p + "softmax", heads * seq * ctx, "softmax"),
                   matmul(p + "av", seq, ctx, hd, heads=heads), gemm(p + "o", e, e, seq),
                   eltwise(p + "add1", seq * e), eltwise(p + "norm2", seq * e, "norm"),
                   gemm(p + "w1", e, f, seq), gemm(p + "w3", e, f, seq), eltwise(p + "silu_mul", seq * f),
                   gemm(p + "w2", f, e, seq), eltwise(p + "add2", seq * e)]
    return chain(f"llama{blocks}x{e}", layers)
