"""Outputs (issue 42): only regular files, created or replaced atomically; a link planted at an output is
replaced, never followed; a pipe or device as an output is refused, never opened; a second command
writing into the same output is refused; a command that fails leaves no folder of its own behind."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from hetsplit import outpath
from hetsplit.cli.main import main
from hetsplit.errors import OutputError

CLUSTER = "donna-2cpu-1gpu-1cim-hb-wcc"
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    out = tmp_path_factory.mktemp("plans")
    assert main(["plan", "vgg8", "--cluster", CLUSTER, "--algo", "exact", "--out", str(out)]) == 0
    return out / "plans.json"


def test_links_planted_in_the_output_folder_are_replaced_not_followed(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for name in ("plans.json", "report.html", "pareto.png"):
        victims[name] = tmp_path / f"victim-{name}"
        victims[name].write_text("precious")
        (out / name).symlink_to(victims[name])
    assert main(["plan", "vgg8", "--cluster", CLUSTER, "--algo", "exact", "--out", str(out)]) == 0
    for name, victim in victims.items():
        assert victim.read_text() == "precious"
        assert (out / name).is_file() and not (out / name).is_symlink()
    assert json.loads((out / "plans.json").read_text())["plans"]
    assert sorted(p.name for p in out.iterdir()) == ["pareto.png", "plans.json", "report.html"]   # no temp, no lock


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_pipe_or_a_device_as_an_output_file_is_refused_before_any_work(plans, tmp_path, capsys, kind):
    target = tmp_path / "out.html"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target = "/dev/full"
    for argv in (["report", str(plans), "--out", str(target)],
                 ["profile", "vgg8", "--repeats", "1", "--warmup", "0", "--out", str(target)]):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "not a regular file" in err and "Traceback" not in err, err


@pytest.mark.processes
def test_a_second_command_writing_into_the_same_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(["sleep", "60"])
    try:
        (out / outpath.LOCK).write_text(str(holder.pid))
        assert main(["plan", "vgg8", "--cluster", CLUSTER, "--algo", "exact", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"another hetsplit command (process {holder.pid}) is writing there" in err, err
        assert not (out / "plans.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # its process gone, the lock is taken over
    assert main(["plan", "vgg8", "--cluster", CLUSTER, "--algo", "exact", "--out", str(out)]) == 0
    assert (out / "plans.json").is_file() and not (out / outpath.LOCK).exists()


def test_two_claims_of_one_output_in_flight_conflict_and_release_frees_them(tmp_path):
    folder = tmp_path / "a" / "b"
    assert outpath.output_dir(folder) == folder
    (folder / outpath.LOCK).write_text(str(os.getppid()))          # as if another live command held it
    outpath._held.clear()
    with pytest.raises(OutputError, match="another hetsplit command"):
        outpath.output_dir(folder)
    (folder / outpath.LOCK).unlink()
    outpath.release(failed=True)                                   # the folders this process made: gone
    assert not (tmp_path / "a").exists()


def test_a_command_that_fails_leaves_no_folder_it_created(tmp_path, capsys):
    out = tmp_path / "new" / "deeper"
    assert main(["plan", "vgg8", "--cluster", str(tmp_path / "no-such.yaml"), "--out", str(out)]) == 2
    assert not (tmp_path / "new").exists()


def test_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "r.json"
    outpath.write_text(target, "old")
    with pytest.raises(RuntimeError):
        with outpath.replacing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk gone")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["r.json"]
    outpath.write_text(target, "new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["r.json"]


# ---- profile's sizes and repeats are bounded ---------------------------------------------------------------

@pytest.mark.parametrize("extra, said", [(["--repeats", "100000000000"], "--repeats 100000000000: give a whole"),
                                         (["--repeats", "0"], "--repeats 0"), (["--warmup", "-1"], "--warmup -1"),
                                         (["--warmup", "1000000"], "--warmup 1000000")])
def test_profile_refuses_absurd_repeats_naming_the_flag(capsys, extra, said):
    assert main(["profile", "vgg8", *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


def test_profile_refuses_inputs_that_would_not_fit_in_memory_before_allocating(tmp_path, capsys, monkeypatch):
    from byo_models import detector

    detector(tmp_path / "det.onnx")
    monkeypatch.setenv("HETSPLIT_MAX_MEMORY_GB", "0.25")
    assert main(["profile", str(tmp_path / "det.onnx"), "--input-shape", "images:1,3,4096,4096", "--out",
                 str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "measuring det" in err and "--input-shape" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["det.onnx"]
