"""Clusters: devices, links, groups, presets, YAML loading and validation (docs/architecture.md)."""

from hetsplit.cluster.examples import builtin_names, builtin_spec
from hetsplit.cluster.loader import CLUSTER_FORMAT, cluster_from_dict, load_cluster
from hetsplit.cluster.presets import (PRESET_FORMAT, Preset, device_preset_names, get_medium, load_preset,
                                      preset_names)
from hetsplit.cluster.types import DEVICE_KINDS, Cluster, Device, Medium, uniform_links

__all__ = ["CLUSTER_FORMAT", "DEVICE_KINDS", "PRESET_FORMAT", "Cluster", "Device", "Medium", "Preset",
           "builtin_names", "builtin_spec", "cluster_from_dict", "device_preset_names", "get_medium",
           "load_cluster", "load_preset", "preset_names", "uniform_links"]
