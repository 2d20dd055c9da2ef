"""tests/cli_process.py's forked children see what a fresh process sees at import: the environment the
imports read (huggingface_hub's constants, score's MKL_CBWR) and what they set in it."""

from __future__ import annotations

import os

from cli_process import as_session, child_state, fresh_state


def test_a_forked_child_sees_a_fresh_process_import_time_state():
    assert child_state() == fresh_state(as_session(dict(os.environ)))


def test_another_environment_is_read_at_import_as_a_fresh_process_reads_it():
    env = {**os.environ, "HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"}
    env["MKL_CBWR"] = "COMPATIBLE"
    got = child_state(env)
    assert got == fresh_state(env)
    assert got["environ"]["MKL_CBWR"] == "COMPATIBLE"
