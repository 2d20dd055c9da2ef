"""The real prepare -> curate -> score -> curate chain the lineage and report tests read."""

from __future__ import annotations

import json
import os
from pathlib import Path


def build_chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage")
    here = Path.cwd()
    os.chdir(root)
    try:
        _cli("synth", "--n", "16", "--plant", "--out", "w", "-q")
        _cli("prepare", "w/sharegpt4v.json", "--out", "p", "-q")  # records no image root
        _cli("curate", "p", "--out", "c1", "--image-root", "w", "-q")
        _cli("score", "c1", "--model", "tiny", "--out", "s1", "-q")
        _cli("curate", "s1", "--out", "c2", "--keep-top-alignment", "75", "--min-clip-score", "-1",
             "--drop-ungrounded", "0", "-q")  # fmt: skip
    finally:
        os.chdir(here)
    manifests = {f: json.loads((root / f / "manifest.json").read_text()) for f in ("p", "c1", "s1", "c2")}
    # score -> curate carries the root, resolved (issue 29); c1 and s1's inputs record it too
    assert manifests["c2"]["options"]["image_root"] == str((root / "w").resolve())
    return root, manifests


def _cli(*args: str) -> None:
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
