"""Every block of docs/generate.md runs on the tiny GGUF (written as model.gguf where the blocks run); the
rehearsal with emulated links (which needs root) and devices, where this machine allows it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetsplit.runtime.netem import emulation_available
from test_docs_examples import ROOT, SKIP, blocks, run_blocks

DOC = ROOT / "docs" / "generate.md"


def test_docs_generate_runs_on_the_tiny_gguf(tiny_gguf, tmp_path):
    shutil.copy(tiny_gguf, tmp_path / "model.gguf")
    assert run_blocks(DOC, tmp_path) == 1                          # the rehearsal, run below where it can be
    assert len(blocks(DOC)) == 5


def test_docs_generate_rehearsal_runs_where_links_and_devices_can_be_emulated(tiny_gguf, tmp_path):
    why = emulation_available()
    if why:
        pytest.skip(f"emulation unavailable: {why}")
    shutil.copy(tiny_gguf, tmp_path / "model.gguf")
    [cluster] = [b for lang, b in blocks(DOC) if lang == "yaml" and "home.yaml" in b.splitlines()[0]]
    (tmp_path / "home.yaml").write_text(cluster)
    [body] = [b for _, b in blocks(DOC) if b.startswith(SKIP)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}   # this tree's code
    done = subprocess.run(["bash", "-e", "-c", body.split("\n", 1)[1]], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "devices emulated" in done.stdout and "(paced)" in done.stdout and "links emulated" in done.stdout and "verify: ok" in done.stdout
