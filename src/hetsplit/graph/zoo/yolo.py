"""YOLOv8n (Ultralytics' layout: depth 0.33, width 0.25) at 640x640, with its DFL detect head.

Written from the published architecture (yolov8.yaml): Conv = Conv2d + BN + SiLU; C2f blocks;
SPPF; FPN/PAN neck; anchor-free decoupled head with Distribution Focal Loss decoding. The exported
graph ends with boxes (xywh, pixels) and class scores: (1, 84, 8400).
"""

from __future__ import annotations

import torch
from torch import nn

from hetsplit.graph.zoo.cnn import conv_bn


def conv(c_in: int, c_out: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return conv_bn(c_in, c_out, k, s, act=nn.SiLU)


class YoloBottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2, self.add = conv(c, c, 3), conv(c, c, 3), shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """Split the 1x1 conv's output in two halves, chain n bottlenecks on one, concat all."""

    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = c_out // 2
        self.cv1 = conv(c_in, 2 * self.c)
        self.cv2 = conv((2 + n) * self.c, c_out)
        self.m = nn.ModuleList(YoloBottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c_in: int, c_out: int, k: int = 5) -> None:
        super().__init__()
        c = c_in // 2
        self.cv1, self.cv2 = conv(c_in, c), conv(4 * c, c_out)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Detect(nn.Module):
    """Decoupled box (4 x 16 DFL bins) and class branches per level; decodes to xywh + scores."""

    anchors: torch.Tensor           # buffers (register_buffer), declared for the type checker
    strides: torch.Tensor

    def __init__(self, nc: int, ch: tuple[int, ...], strides: tuple[int, ...], img: int, reg_max: int = 16) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, reg_max
        c2, c3 = max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(conv(c, c2, 3), conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
                                 for c in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(conv(c, c3, 3), conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in ch)
        self.dfl = nn.Conv2d(reg_max, 1, 1, bias=False)
        self.dfl.weight.data[:] = torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1)
        self.dfl.weight.requires_grad_(False)
        anchors, stride_t = [], []
        for s in strides:
            h = w = img // s
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
            stride_t.append(torch.full((h * w, 1), float(s)))
        self.register_buffer("anchors", torch.cat(anchors).T.unsqueeze(0))   # (1, 2, A)
        self.register_buffer("strides", torch.cat(stride_t).T.unsqueeze(0))  # (1, 1, A)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        b = xs[0].shape[0]
        no = self.nc + 4 * self.reg_max
        y = torch.cat([torch.cat((self.cv2[i](x), self.cv3[i](x)), 1).view(b, no, -1) for i, x in enumerate(xs)], 2)
        box, cls = y.split((4 * self.reg_max, self.nc), 1)
        a = box.shape[-1]
        dist = self.dfl(box.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = dist.split((2, 2), 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
        return torch.cat((xywh, cls.sigmoid()), 1)


class YOLOv8n(nn.Module):
    def __init__(self, nc: int = 80, img: int = 640) -> None:
        super().__init__()
        self.b0, self.b1, self.b2 = conv(3, 16, 3, 2), conv(16, 32, 3, 2), C2f(32, 32, 1, True)
        self.b3, self.b4 = conv(32, 64, 3, 2), C2f(64, 64, 2, True)
        self.b5, self.b6 = conv(64, 128, 3, 2), C2f(128, 128, 2, True)
        self.b7, self.b8, self.b9 = conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256)
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.h12, self.h15 = C2f(384, 128, 1, False), C2f(192, 64, 1, False)
        self.h16, self.h18 = conv(64, 64, 3, 2), C2f(192, 128, 1, False)
        self.h19, self.h21 = conv(128, 128, 3, 2), C2f(384, 256, 1, False)
        self.detect = Detect(nc, (64, 128, 256), (8, 16, 32), img)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        h12 = self.h12(torch.cat((self.up(p5), p4), 1))
        h15 = self.h15(torch.cat((self.up(h12), p3), 1))
        h18 = self.h18(torch.cat((self.h16(h15), h12), 1))
        h21 = self.h21(torch.cat((self.h19(h18), p5), 1))
        return self.detect([h15, h18, h21])


def yolov8n() -> tuple[nn.Module, tuple[int, ...]]:
    return YOLOv8n(), (1, 3, 640, 640)
