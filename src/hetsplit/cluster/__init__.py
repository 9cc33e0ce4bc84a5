"""Clusters: devices, links, groups, presets, YAML loading and validation."""

from hetsplit.cluster.types import DEVICE_KINDS, Cluster, Device, Medium, uniform_links

__all__ = ["DEVICE_KINDS", "Cluster", "Device", "Medium", "uniform_links"]
