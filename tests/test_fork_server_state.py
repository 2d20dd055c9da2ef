"""tests/cli_process.py's forked children see what a fresh process sees at import: the environment the
imports read (huggingface_hub's constants, score's MKL_CBWR) and what they set in it."""

from __future__ import annotations

import os

from cli_process import child_state, fresh_state


def test_a_forked_child_sees_a_fresh_process_import_time_state():
    assert child_state() == fresh_state(dict(os.environ))


def test_another_environment_is_read_at_import_as_a_fresh_process_reads_it():
    """A call in another environment than the server's is not forked (the server's imports read its own): what
    the call's imports read is that environment's, where a forked child would show the server's."""
    offline = os.environ.get("HF_HUB_OFFLINE") != "1"
    env = {**os.environ, "HF_HUB_OFFLINE": "1" if offline else "0", "MKL_CBWR": "COMPATIBLE"}
    got = child_state(env)
    assert got["huggingface_hub"]["HF_HUB_OFFLINE"] is offline
    assert got["environ"]["MKL_CBWR"] == "COMPATIBLE"
    assert got["environ"]["HF_HUB_OFFLINE"] == env["HF_HUB_OFFLINE"]
