"""Every block of docs/generate.md runs on the tiny GGUF (written as model.gguf where the blocks run)."""

from __future__ import annotations

import shutil

from test_docs_examples import ROOT, blocks, run_blocks


def test_docs_generate_runs_on_the_tiny_gguf(tiny_gguf, tmp_path):
    shutil.copy(tiny_gguf, tmp_path / "model.gguf")
    assert run_blocks(ROOT / "docs" / "generate.md", tmp_path) == 0
    assert len(blocks(ROOT / "docs" / "generate.md")) == 4
