"""One dialect: every command's flags follow the same rules, and the first-hour errors are one line."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _main(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from caption_debias.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("command", ["curate", "stats"])
def test_a_dump_file_given_for_a_prepared_folder_says_run_prepare_first(command, tmp_path):
    dump = tmp_path / "some.json"
    dump.write_text("[]")
    extra = ["--out", str(tmp_path / "o")] if command == "curate" else []
    proc = _main(command, str(dump), *extra)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"caption-debias: error: {dump}: a file, not a prepared folder; run `caption-debias prepare {dump} --out DIR` first"
    ]
