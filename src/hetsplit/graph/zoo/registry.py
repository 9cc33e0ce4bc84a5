"""The zoo's model list: name -> PyTorch builder, with where each architecture comes from.

Builders are named as "module:function" (modules of this package) and imported on use, so that
listing or loading the shapes-only zoo never imports torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ZooModel:
    name: str
    builder: str                    # "cnn:resnet_imagenet": module of hetsplit.graph.zoo, function
    description: str
    args: tuple[Any, ...] = field(default=())
    input_name: str = "input"       # the ONNX graph input (float image, or int64 token ids)

    def build(self) -> tuple[Any, tuple[int, ...]]:
        """(torch module, example input shape); imports torch."""
        module, func = self.builder.split(":")
        return getattr(importlib.import_module(f"hetsplit.graph.zoo.{module}"), func)(*self.args)


_ENTRIES = [
    ZooModel("resnet8", "cnn:resnet8", "MLPerf Tiny ResNet-8, CIFAR-10 32x32 (IMC paper)"),
    ZooModel("resnet18", "cnn:resnet18_cifar", "ResNet-18 at base width 32, CIFAR-10 32x32 (IMC paper)"),
    ZooModel("resnet50", "cnn:resnet_imagenet", "ResNet-50, ImageNet 224x224", ([3, 4, 6, 3],)),
    ZooModel("resnet101", "cnn:resnet_imagenet", "ResNet-101, ImageNet 224x224", ([3, 4, 23, 3],)),
    ZooModel("resnet152", "cnn:resnet_imagenet", "ResNet-152, ImageNet 224x224", ([3, 8, 36, 3],)),
    ZooModel("vgg8", "cnn:vgg8", "NeuroSim's VGG-8, CIFAR-10 32x32"),
    ZooModel("vgg16", "cnn:vgg16", "VGG-16, ImageNet 224x224"),
    ZooModel("vgg19", "cnn:vgg19", "VGG-19, ImageNet 224x224"),
    ZooModel("alexnet", "cnn:alexnet", "AlexNet (single-GPU form), ImageNet 224x224"),
    ZooModel("densenet121", "cnn:densenet121", "DenseNet-121, ImageNet 224x224"),
    ZooModel("mobilenetv2", "cnn:mobilenetv2", "MobileNetV2 1.0, ImageNet 224x224"),
    ZooModel("yolov8n", "yolo:yolov8n", "YOLOv8n detector with DFL head, 640x640"),
    ZooModel("tinyllama-42m", "transformer:tinyllama_42m",
             "TinyLlama decoder E512 F2048 8 heads 8 layers, vocab 32000, one pass over S=128 tokens",
             input_name="tokens"),
    ZooModel("mobilebert", "transformer:mobilebert",
             "MobileBERT encoder E512 (bottleneck 128) F512 4 heads 24 layers, S=268 tokens", input_name="tokens"),
]

MODELS: dict[str, ZooModel] = {m.name: m for m in _ENTRIES}
