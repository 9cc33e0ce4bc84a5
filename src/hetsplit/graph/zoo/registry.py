"""The zoo's model list: name -> PyTorch builder, with where each architecture comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from hetsplit.graph.zoo import cnn, transformer, yolo

Builder = Callable[[], tuple[nn.Module, tuple[int, ...]]]


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Builder
    description: str
    input_name: str = "input"      # the ONNX graph input (float image, or int64 token ids)


def _entries() -> list[ZooModel]:
    return [
        ZooModel("resnet8", cnn.resnet8, "MLPerf Tiny ResNet-8, CIFAR-10 32x32 (IMC paper)"),
        ZooModel("resnet18", cnn.resnet18_cifar, "ResNet-18 at base width 32, CIFAR-10 32x32 (IMC paper)"),
        ZooModel("resnet50", lambda: cnn.resnet_imagenet([3, 4, 6, 3]), "ResNet-50, ImageNet 224x224"),
        ZooModel("resnet101", lambda: cnn.resnet_imagenet([3, 4, 23, 3]), "ResNet-101, ImageNet 224x224"),
        ZooModel("resnet152", lambda: cnn.resnet_imagenet([3, 8, 36, 3]), "ResNet-152, ImageNet 224x224"),
        ZooModel("vgg8", cnn.vgg8, "NeuroSim's VGG-8, CIFAR-10 32x32"),
        ZooModel("vgg16", cnn.vgg16, "VGG-16, ImageNet 224x224"),
        ZooModel("vgg19", cnn.vgg19, "VGG-19, ImageNet 224x224"),
        ZooModel("alexnet", cnn.alexnet, "AlexNet (single-GPU form), ImageNet 224x224"),
        ZooModel("densenet121", cnn.densenet121, "DenseNet-121, ImageNet 224x224"),
        ZooModel("mobilenetv2", cnn.mobilenetv2, "MobileNetV2 1.0, ImageNet 224x224"),
        ZooModel("yolov8n", yolo.yolov8n, "YOLOv8n detector with DFL head, 640x640"),
        ZooModel("tinyllama-42m", transformer.tinyllama_42m,
                 "TinyLlama decoder E512 F2048 8 heads 8 layers, vocab 32000, one pass over S=128 tokens",
                 input_name="tokens"),
        ZooModel("mobilebert", transformer.mobilebert,
                 "MobileBERT encoder E512 (bottleneck 128) F512 4 heads 24 layers, S=268 tokens",
                 input_name="tokens"),
    ]


MODELS: dict[str, ZooModel] = {m.name: m for m in _entries()}
