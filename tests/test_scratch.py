"""A joined worker's scratch folder carries its owner, so the next worker or run removes one a killed
worker left, and nothing else."""

from __future__ import annotations

import os
import stat

import pytest

from hetsplit.runtime.owned import owned_name, owner_alive, owner_of
from hetsplit.runtime.scratch import remove_stale_scratch, worker_scratch


def _dead_pid() -> int:
    """A pid no process has (near the kernel's largest)."""
    return next(pid for pid in range(4_000_000, 3_000_000, -1) if not owner_alive(pid))


def test_a_workers_scratch_is_its_own_private_folder_removed_on_exit(tmp_path):
    with worker_scratch(tmp_path) as path:
        assert path.parent == tmp_path and owner_of(path.name) == os.getpid() and path.name.endswith("-worker")
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        (path / "split").mkdir()
        (path / "split" / "a.onnx").write_bytes(b"x" * 10)
    assert not path.exists()


def test_only_real_folders_of_gone_workers_are_removed(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / owned_name("abc", "worker", pid=dead)
    (stale / "split").mkdir(parents=True)
    (stale / "split" / "a.onnx").write_bytes(b"weights")
    alive = tmp_path / owned_name("abd", "worker")                 # this process: alive
    alive.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("mine")
    link = tmp_path / owned_name("abe", "worker", pid=dead)       # a link named as a stale folder: not followed
    link.symlink_to(target)
    a_file = tmp_path / owned_name("abf", "worker", pid=dead)
    a_file.write_text("not a folder")
    other = tmp_path / f"hetsplit-{dead}-abc-r1"                   # a name of another kind
    other.mkdir()
    assert remove_stale_scratch(tmp_path) == [stale.name]
    assert not stale.exists()
    assert alive.is_dir() and link.is_symlink() and (target / "keep").read_text() == "mine"
    assert a_file.is_file() and other.is_dir()


def test_a_new_scratch_first_removes_what_a_killed_worker_left(tmp_path):
    stale = tmp_path / owned_name("0a1", "worker", pid=_dead_pid())
    stale.mkdir()
    with worker_scratch(tmp_path):
        assert not stale.exists()


@pytest.mark.processes          # the doctor's other checks try a network namespace
def test_doctor_lists_a_killed_workers_folder_on_a_dry_run_and_removes_it_otherwise(tmp_path, monkeypatch):
    import tempfile

    from hetsplit.doctor import check

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / owned_name("0b2", "worker", pid=_dead_pid())
    stale.mkdir()
    item = next(i for i in check(dry_run=True) if i["item"] == "stale worker folders")
    assert item["status"] == "stale" and stale.name in item["detail"] and stale.is_dir()
    item = next(i for i in check(dry_run=False) if i["item"] == "stale worker folders")
    assert "removed 1 stale worker scratch folder" in item["detail"] and not stale.exists()
