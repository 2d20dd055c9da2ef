"""tests/cli_process.py's forked children see what a fresh process sees at import: the environment the
imports read (huggingface_hub's constants) and what they set in it (score sets nothing at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_process import child_state, fresh_state


def test_a_forked_child_sees_a_fresh_process_import_time_state():
    assert child_state() == fresh_state(dict(os.environ))


def test_another_environment_is_read_at_import_as_a_fresh_process_reads_it():
    env = {**os.environ, "HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"}
    env["MKL_CBWR"] = "COMPATIBLE"
    got = child_state(env)
    assert got == fresh_state(env)
    assert got["environ"]["MKL_CBWR"] == "COMPATIBLE"


def test_importing_the_score_package_changes_no_environment():
    """score sets MKL_CBWR where its work starts (score/encode.py), not at import: nothing for the fork
    server to freeze."""
    code = (
        "import json, os, sys\n"
        "before = dict(os.environ)\n"
        "import caption_debias.score, caption_debias.score.api, caption_debias.score.run, cli.score_cmd\n"
        "changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))\n"
        "print(json.dumps(changed))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
