"""Convolutional networks of the zoo, written from their papers (no torchvision).

Every builder returns ``(module, example_input_shape)``. Weights are whatever ``torch.manual_seed``
leaves; the exporter seeds before building. BatchNorm follows Conv where the original network has
it (the exporter folds it into the conv in eval mode).
"""

from __future__ import annotations

import torch
from torch import nn


def conv_bn(c_in: int, c_out: int, k: int, stride: int = 1, act: type[nn.Module] | None = nn.ReLU,
            groups: int = 1) -> nn.Sequential:
    """Conv (no bias) + BatchNorm (+ activation): the unit of most modern CNNs."""
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(c_out)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# ---- ResNets -------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """Two 3x3 convs and a skip (1x1 conv when the shape changes), ReLU after the add."""

    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = conv_bn(c_in, width, 3, stride)
        self.conv2 = conv_bn(width, width, 3, 1, act=None)
        self.downsample = (conv_bn(c_in, width, 1, stride, act=None)
                           if stride != 1 or c_in != width else None)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv2(self.conv1(x)) + skip)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride, as in ResNet v1.5), 1x1 expand x4, skip."""

    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int = 1) -> None:
        super().__init__()
        c_out = width * self.expansion
        self.conv1 = conv_bn(c_in, width, 1)
        self.conv2 = conv_bn(width, width, 3, stride)
        self.conv3 = conv_bn(width, c_out, 1, act=None)
        self.downsample = (conv_bn(c_in, c_out, 1, stride, act=None)
                           if stride != 1 or c_in != c_out else None)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + skip)


class ResNet(nn.Module):
    """ResNet with ImageNet (7x7/2 stem + max pool) or CIFAR (3x3/1 stem) front."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], depths: list[int], widths: list[int],
                 num_classes: int, cifar: bool) -> None:
        super().__init__()
        c = widths[0]
        if cifar:
            self.stem = conv_bn(3, c, 3)
        else:
            self.stem = nn.Sequential(conv_bn(3, c, 7, 2), nn.MaxPool2d(3, 2, 1))
        stages = []
        for i, (depth, width) in enumerate(zip(depths, widths)):
            blocks = []
            for j in range(depth):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(c, width, stride))
                c = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.layer(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


def resnet8() -> tuple[nn.Module, tuple[int, ...]]:
    """MLPerf Tiny's ResNet-8 for CIFAR-10: 16/32/64 channels, one basic block per stage."""
    return ResNet(BasicBlock, [1, 1, 1], [16, 32, 64], 10, cifar=True), (1, 3, 32, 32)


def resnet18_cifar() -> tuple[nn.Module, tuple[int, ...]]:
    """ResNet-18 for CIFAR-10 at base width 32 (20 convs, ~2.8 M parameters, as the IMC paper)."""
    return ResNet(BasicBlock, [2, 2, 2, 2], [32, 64, 128, 256], 10, cifar=True), (1, 3, 32, 32)


def resnet_imagenet(depths: list[int]) -> tuple[nn.Module, tuple[int, ...]]:
    """Bottleneck ResNet-50/101/152 for 224x224 ImageNet."""
    return ResNet(Bottleneck, depths, [64, 128, 256, 512], 1000, cifar=False), (1, 3, 224, 224)


# ---- VGG and AlexNet -----------------------------------------------------------------------------
class VGG(nn.Module):
    """Plain conv stacks ("M" = 2x2 max pool) and a fully connected classifier."""

    def __init__(self, cfg: list[int | str], fc: list[int], in_hw: int, bias: bool = True,
                 avgpool: int | None = None) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c, hw = 3, in_hw
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
                hw //= 2
            else:
                layers += [nn.Conv2d(c, int(v), 3, 1, 1, bias=bias), nn.ReLU()]
                c = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(avgpool) if avgpool else nn.Identity()
        hw = avgpool or hw
        dims = [c * hw * hw, *fc]
        head: list[nn.Module] = []
        for i in range(len(fc)):
            head.append(nn.Linear(dims[i], dims[i + 1], bias=bias or i == len(fc) - 1))
            if i < len(fc) - 1:
                head.append(nn.ReLU())
        self.classifier = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


VGG16: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
VGG19: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]
VGG8: list[int | str] = [128, 128, "M", 256, 256, "M", 512, 512, "M"]


def vgg8() -> tuple[nn.Module, tuple[int, ...]]:
    """NeuroSim's CIFAR-10 VGG-8 (DNN_NeuroSim_V1.3 models/VGG.py): 6 convs, FC 8192-1024-10.

    NeuroSim's quantized layers carry no bias; neither do these (the last FC keeps one).
    """
    return VGG(VGG8, [1024, 10], 32, bias=False), (1, 3, 32, 32)


def vgg16() -> tuple[nn.Module, tuple[int, ...]]:
    return VGG(VGG16, [4096, 4096, 1000], 224, avgpool=7), (1, 3, 224, 224)


def vgg19() -> tuple[nn.Module, tuple[int, ...]]:
    return VGG(VGG19, [4096, 4096, 1000], 224, avgpool=7), (1, 3, 224, 224)


class AlexNet(nn.Module):
    """AlexNet in its single-GPU form (64/192/384/256/256 channels), 224x224 input."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(6)
        self.classifier = nn.Sequential(
            nn.Linear(256 * 36, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def alexnet() -> tuple[nn.Module, tuple[int, ...]]:
    return AlexNet(), (1, 3, 224, 224)


# ---- DenseNet-121 --------------------------------------------------------------------------------
class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (4k) then BN-ReLU-3x3 conv (k), concatenated to the input."""

    def __init__(self, c_in: int, growth: int, bn_size: int = 4) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth), nn.ReLU(), nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.block(x)], 1)


class DenseNet(nn.Module):
    """DenseNet-BC (Huang et al. 2017) with transitions halving channels and resolution."""

    def __init__(self, blocks: tuple[int, ...] = (6, 12, 24, 16), growth: int = 32, c0: int = 64,
                 num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, c0, 7, 2, 3, bias=False), nn.BatchNorm2d(c0), nn.ReLU(),
                                   nn.MaxPool2d(3, 2, 1)]
        c = c0
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(c, growth))
                c += growth
            if i < len(blocks) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def densenet121() -> tuple[nn.Module, tuple[int, ...]]:
    return DenseNet(), (1, 3, 224, 224)


# ---- MobileNetV2 ---------------------------------------------------------------------------------
class InvertedResidual(nn.Module):
    """1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 linear projection; skip when shapes match."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn(c_in, hidden, 1, act=nn.ReLU6))
        layers += [conv_bn(hidden, hidden, 3, stride, act=nn.ReLU6, groups=hidden),
                   conv_bn(hidden, c_out, 1, act=None)]
        self.conv = nn.Sequential(*layers)
        self.use_skip = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.use_skip else y


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018), width 1.0, 224x224."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]  # (expansion t, channels c, repeats n, first stride s)

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
        c = 32
        for t, c_out, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(c, c_out, s if i == 0 else 1, t))
                c = c_out
        layers += [conv_bn(c, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def mobilenetv2() -> tuple[nn.Module, tuple[int, ...]]:
    return MobileNetV2(), (1, 3, 224, 224)
