"""A cluster read because a plan named it reads no other file (issue 42): the ``profile:`` and preset
files of a plan's ``cluster_file`` must resolve inside that YAML's folder, else the cluster is refused
with a message that quotes nothing of them; the same YAML given with --cluster (the user's word) may
name files anywhere."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from byo_models import CLUSTER_YAML
from hetsplit.errors import ClusterError
from hetsplit.plan.types import Plan
from hetsplit.workflow import load_cluster_spec, load_plan_cluster


def _plan(cluster_file) -> Plan:
    """What load_plan_cluster reads of a plan: its cluster name and cluster_file."""
    return SimpleNamespace(cluster="two-cpus", cluster_file=str(cluster_file))


def _with_profile(folder, profile: str):
    folder.mkdir(exist_ok=True)
    text = CLUSTER_YAML.replace("power_active: 5W}", f"power_active: 5W, profile: {profile}}}")
    (folder / "cluster.yaml").write_text(text)
    return folder / "cluster.yaml"


@pytest.mark.parametrize("where", ["absolute", "dot-dot", "link"])
def test_a_plans_cluster_naming_a_file_outside_its_folder_is_refused(tmp_path, where):
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    folder = tmp_path / "c"
    folder.mkdir()
    if where == "link":
        (folder / "p.json").symlink_to(secret)
    profile = {"absolute": str(secret), "dot-dot": "../secret.json", "link": "p.json"}[where]
    yaml = _with_profile(folder, profile)
    with pytest.raises(ClusterError) as exc:
        load_plan_cluster(_plan(yaml), required=True)
    assert "not a readable hetsplit cluster" in str(exc.value) and "secret" not in str(exc.value)
    assert load_plan_cluster(_plan(yaml)) is None
    assert load_cluster_spec(str(yaml)).devices[1].profile == str(secret.resolve())   # given by the user: taken


def test_a_plans_cluster_naming_a_preset_file_outside_its_folder_is_refused(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (tmp_path / "preset.yaml").write_text("not read")
    yaml = folder / "cluster.yaml"
    yaml.write_text(CLUSTER_YAML.replace("{name: cpu0, kind: cpu,", "{name: cpu0, preset: ../preset.yaml, kind: cpu,"))
    with pytest.raises(ClusterError, match="not a readable hetsplit cluster"):
        load_plan_cluster(_plan(yaml), required=True)


def test_a_plans_cluster_naming_a_file_beside_it_is_taken(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "cpu1.json").write_text("{}")
    yaml = _with_profile(folder, "cpu1.json")
    cluster = load_plan_cluster(_plan(yaml), required=True)
    assert cluster.devices[1].profile == str((folder / "cpu1.json").resolve())
