"""Every fenced code block of docs/byo.md and the README's python block runs: shell blocks (bash -e; a
pipeline's status is its last command's) with this venv's ``hetsplit`` first on PATH, python blocks with this interpreter, yaml blocks whose first line is
``# file: NAME`` written as that file; all in one directory, in order. A block that cannot run here
(it needs two machines) starts with ``# not run by the docs test: <why>``; those are counted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
SKIP = "# not run by the docs test:"
FILE = "# file:"
RUNNABLE = ("shell", "bash", "python", "yaml")
pytestmark = pytest.mark.timeout(600)


def blocks(path: Path) -> list[tuple[str, str]]:
    return BLOCK.findall(path.read_text())


def run_blocks(path: Path, cwd: Path) -> int:
    """Run every block of ``path`` in ``cwd``; returns how many were marked not to run."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    skipped = 0
    for n, (lang, body) in enumerate(blocks(path)):
        assert lang in RUNNABLE, f"{path.name} block {n}: language {lang!r}; the docs test runs {RUNNABLE}"
        if body.startswith(SKIP):
            skipped += 1
            continue
        if lang == "yaml":
            first = body.splitlines()[0]
            assert first.startswith(FILE), f"{path.name} block {n}: a yaml block starts with '{FILE} NAME'"
            (cwd / first[len(FILE):].strip()).write_text(body)
            continue
        cmd = [sys.executable, "-c", body] if lang == "python" else ["bash", "-e", "-c", body]
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (f"{path.name} block {n} ({lang}) failed with {done.returncode}:\n{body}\n"
                                      f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
    return skipped


def test_docs_byo_runs_end_to_end(tmp_path):
    skipped = run_blocks(ROOT / "docs" / "byo.md", tmp_path)
    assert skipped == 1                               # the run on two machines, and only it
    run = (tmp_path / "rehearsal.json").read_text()
    assert '"ok": true' in run                        # outputs verified against the unsplit model
    assert (tmp_path / "report.html").stat().st_size > 1000


def test_readme_python_example_runs(tmp_path):
    code = [b for lang, b in blocks(ROOT / "README.md") if lang == "python"]
    assert len(code) == 1 and len(code[0].splitlines()) <= 20
    assert run_blocks_only(code[0], tmp_path).count("measured") == 2


def run_blocks_only(body: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", body], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
